"""Setting two runs side by side (``ivypy compare BASE_RUN NEW_RUN``; see docs/compare.md).

Modules, in the order data flows: ``summary`` (reading a run folder's ``summary.csv``),
``match`` (steps by name, rollup instances by name), ``changes`` (each metric's change and
which conditions hold), ``report`` (text, csv and json). The ``--fail-if`` grammar is
``master.config.expr``'s (the test's ``thresholds:`` share it).
All of it is pure but ``summary``'s reading of the file; the command line is
``master.cli.compare``. This package belongs to the master side; nothing in ``slave/`` or
``protocol/`` may import it, and it must not import the run loop.
"""
