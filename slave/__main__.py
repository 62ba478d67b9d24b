"""``python -m slave``: speak the protocol on stdin/stdout."""

import sys

from slave.main import main

sys.exit(main())
