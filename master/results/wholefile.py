"""Replacing a file whole: a reader, or a crash, sees the old file or the new one, never a part.

Owns the one way the master replaces a whole-run file (state.json, summary.json, report.html,
luns.csv): the bytes go to a hidden temporary file beside it, are synced, and the temporary file
is renamed over the old one; the directory is then synced so that the rename itself survives a
crash (``replace_whole``; ``whole_file`` for bytes written a piece at a time). A failure
removes the temporary file and raises the ``OSError`` for the caller to translate.
``foreign_file`` tells a file a command may write over (its own, by a mark its caller names)
from one it must leave alone. Must not know what the files hold; stdlib only (``ivypy status``
imports it).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: the writes of ``whole_file`` go to the kernel this many bytes at a time
WRITE_BUFFER_BYTES = 1 << 20


def replace_whole(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole (``.<name>.tmp`` beside it, fsync, rename, fsync of
    the directory). ``OSError`` when it cannot be written; the temporary file is then gone."""
    with whole_file(path) as fh:
        fh.write(data)


@contextlib.contextmanager
def whole_file(path: Path) -> Iterator[BinaryIO]:
    """A file to write ``path``'s new bytes into, a piece at a time (a document too large to
    hold twice in memory), that replaces ``path`` whole when the block ends as
    ``replace_whole`` does. ``OSError`` when it cannot be written; an error of the block or
    of the write leaves ``path`` as it was and no temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb", buffering=WRITE_BUFFER_BYTES) as fh:
            yield fh
            fh.flush()
            os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename itself made durable
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def foreign_file(path: str | os.PathLike[str], mark: bytes, within: int) -> bool:
    """Whether ``path`` is a regular file, not empty, whose first ``within`` bytes lack
    ``mark``: not one its command wrote, so not to be written over (``-o`` naming a run's
    summary.csv, or an input log). A missing file, an empty one, a pipe or a device (a
    terminal, ``/dev/stdout``) is not. ``OSError`` when it cannot be looked at or read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return False
    with open(path, "rb") as fh:
        return mark not in fh.read(within)
