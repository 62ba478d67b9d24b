"""``python -m master`` is ``ivypy``."""

from master.cli.main import console_main

console_main()
