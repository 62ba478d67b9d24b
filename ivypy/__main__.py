"""``python -m ivypy`` is ``ivypy``, installed or in a checkout."""

from ivypy import main

main()
