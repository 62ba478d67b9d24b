"""External metrics gathered on the controller (``gather:`` sources in the test file).

``lines`` and ``promtext`` parse a source's output (pure), ``rates`` turns counters into rates,
``join`` maps elements to rollup instances (pure), ``runner`` runs a command or scrapes an
endpoint with a timeout, ``gathering`` schedules the gathers of a step just in time and writes
their files. The package runs on the controller only: nothing here reaches a slave.
"""
