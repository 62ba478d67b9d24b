"""``python -m master`` is ``ivypy``."""

from master.cli import console_main

console_main()
