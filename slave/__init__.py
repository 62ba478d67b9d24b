"""Runs on test hosts: LUN discovery, preflight, I/O engines, sequencers, workload loops.

Ships to hosts as a zipapp together with ``protocol/``; must not import asyncssh, yaml, rich or
``master``. Needs only Python 3, numpy and psutil on the host.
"""
