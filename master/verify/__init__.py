"""Data verification on the master (issue #62): what the run's verified writes put down.

``mapstore`` owns the map of what was written (per LUN a byte per 4 KiB block, per writer its
confirmed serial) and its files in the run folder, which a kill at any moment leaves usable.
The package runs on the controller only: it neither talks to hosts nor checks data (the
slave's compiled loop checks, ``protocol.verify`` is the contract both sides keep).
"""
