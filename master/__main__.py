"""``python -m master`` is ``ivypy``."""

import sys

from master.cli import main

sys.exit(main())
