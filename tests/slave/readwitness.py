"""The bytes a test's own reads took from a block device, counted twice over a stretch of
time: the device's read sectors (``/sys/block/<dev>/stat``) and this process's read bytes
(``/proc/self/io``: the kernel's per-task count at ``submit_bio``, all threads of the process).

Either count alone can be raised by someone else: the device's by another process reading it
(a concurrent run's discovery probing every loop device for signatures), this process's by
its reads of another device (a module loaded from disk). Neither can be lower than the test's
reads of the device once they completed, so the smaller of the two is the witness. The
device's bytes, not its read requests: the block layer merges adjacent reads in flight into
one request (a ring at QD3 over 64 MiB: 6-19 in 300,000)."""

from __future__ import annotations


def device_read_bytes(name: str) -> int:
    """Bytes the block device ``name`` has read since it was set up."""
    with open(f"/sys/block/{name}/stat") as f:
        return int(f.read().split()[2]) * 512


def own_read_bytes() -> int:
    """Bytes this process's reads have asked of block devices."""
    with open("/proc/self/io") as f:
        return int(next(ln for ln in f if ln.startswith("read_bytes:")).split()[1])


class ReadWitness:
    """Started at construction; ``bytes()``: what this process read from the device since."""

    def __init__(self, device_name: str) -> None:
        self.device_name = device_name
        self._device = device_read_bytes(device_name)
        self._own = own_read_bytes()

    def bytes(self) -> int:
        return min(device_read_bytes(self.device_name) - self._device,
                   own_read_bytes() - self._own)
