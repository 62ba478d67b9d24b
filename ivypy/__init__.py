"""The one top-level import name an installed ivypy has, and its ``ivypy`` command.

Owns: the console script's start (``main``): putting the wheel's own ``master``, ``protocol``
and ``slave`` first on ``sys.path`` in the ivypy process, then handing over to
``master.cli.main``. The wheel carries those three packages beneath this one
(``site-packages/ivypy/master/`` ...; pyproject.toml's wheel ``sources``), so site-packages holds
no generic ``master`` another distribution could clash with, and nothing outside the ivypy
process sees them; inside it the code imports itself as ``master.…``, ``protocol.…`` and
``slave.…``, as in the repository (the slave zipapp packs ``protocol/`` and ``slave/`` by those
names). In a checkout (the developers' editable install, whose ``.pth`` puts the checkout's
root on ``sys.path``) they are the repository's folders, and nothing is added.

Must not: import ``master``, ``protocol`` or ``slave`` when imported itself (only ``main`` does,
once the path is set), hold any of ivypy's logic, or be imported by them: they do not know it.
"""

from __future__ import annotations

import os
import sys

#: The folder that holds the installed ``master``, ``protocol`` and ``slave``: this package's.
PACKAGES_DIR = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    """``ivypy`` as a process (the console script, ``python -m ivypy``)."""
    if os.path.isfile(os.path.join(PACKAGES_DIR, "master", "__init__.py")) and \
            sys.path[:1] != [PACKAGES_DIR]:
        sys.path.insert(0, PACKAGES_DIR)
    from master.cli.main import console_main

    console_main()
