"""The mark ivypy leaves on a file LUN it made, so that a later run may write the file without
``allow_write`` while it is still that file, at that size.

The mark is an extended attribute on the file itself, ``user.ivypy.lun``, whose value is a small
JSON object: who made the file (``ivypy`` and its version), how it was filled (``layout``), its
size in bytes and inode number when it was marked, and when it was made (UTC). ``getfattr -n
user.ivypy.lun FILE`` shows it; ``setfattr -x user.ivypy.lun FILE`` makes ivypy forget the file.

A mark counts only while the file is the one it was written on (same inode) and the size it
was written for:

- A plain ``cp`` copies no extended attributes: the copy carries no mark.
- ``cp -a``, ``cp --preserve=xattr``, ``rsync -X``, ``tar --xattrs`` and ``mv`` across file
  systems copy the mark to a new file with another inode number: refused as a copy. A copy
  that lands on the very inode number the mark names (another file system, by chance) at the
  very same size passes; its bytes are then still ivypy's copy.
- A file replaced at the path (a new file renamed over it) has another inode: no mark or a
  copied one. ``mv`` within a file system keeps the inode, so a moved file stays ivypy's.
- A file truncated or extended by someone else no longer has the marked size. (ivypy itself
  extends a file of its own with ``create: true`` and a larger ``size``; it marks it anew.)
- What the mark cannot see: someone writing into the file in place at the same size (``dd
  conv=notrunc``, or ``cp`` over it without removing it first, which keeps the file's inode
  and attributes). The preflight's signature probe still refuses a file that has since become
  a file system, a database or a disk image it knows.

The device number is not recorded: it may change across reboots (device-mapper and NVMe
numbering) while the file does not.

Owns the attribute's name and value (``encode_mark``, ``decode_mark``), judging a mark against
the file it was read from (``judge``, pure), writing it on an open file (``write_mark``) and
reading it (``read_mark``). It never writes anything but this one attribute, and only where
``slave.luns`` asks for it (a file ivypy created or sized); it writes no other file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from protocol.version import __version__

log = logging.getLogger(__name__)

#: the extended attribute ivypy marks a file LUN it made with
MARK_XATTR = "user.ivypy.lun"

# What a look at a file's mark found (``LunInfo.mark``).
#: no mark: a file ivypy did not make (or one made before marks existed)
MARK_NONE = ""
#: a mark that counts: the file ivypy made, at the size it made it
MARK_OK = "ok"
#: a mark naming another inode: copied with the file's attributes from a file ivypy made
MARK_COPIED = "copied"
#: a mark for another size: the file was truncated or extended since
MARK_RESIZED = "resized"
#: an attribute of that name that is not ivypy's JSON
MARK_DAMAGED = "damaged"
#: the file system keeps no user extended attributes: a file there cannot carry a mark
MARK_UNSUPPORTED = "unsupported"

MARK_STATES = (MARK_NONE, MARK_OK, MARK_COPIED, MARK_RESIZED, MARK_DAMAGED, MARK_UNSUPPORTED)

_NO_XATTRS = (errno.ENOTSUP, errno.EOPNOTSUPP)


@dataclass(frozen=True)
class Mark:
    """The value of a mark: what ivypy made, and when (``created``: ISO 8601 UTC, seconds)."""

    layout: str
    size_bytes: int
    inode: int
    created: str
    version: str = __version__


def encode_mark(mark: Mark) -> bytes:
    """The attribute's value: compact JSON, keys sorted."""
    return json.dumps({"by": "ivypy", "version": mark.version, "layout": mark.layout,
                       "size_bytes": mark.size_bytes, "inode": mark.inode,
                       "created": mark.created}, sort_keys=True, separators=(",", ":")).encode()


def decode_mark(raw: bytes) -> Mark | None:
    """The mark in ``raw``, or None when it is not one ivypy wrote. Keys it does not know (a
    later version's) are ignored."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        return None
    if not isinstance(data, dict) or data.get("by") != "ivypy":
        return None
    size, inode = data.get("size_bytes"), data.get("inode")
    layout, created, version = data.get("layout"), data.get("created"), data.get("version")
    if not (_is_count(size) and _is_count(inode)):
        return None
    if not (isinstance(layout, str) and isinstance(created, str) and isinstance(version, str)):
        return None
    return Mark(layout=layout, size_bytes=size, inode=inode, created=created, version=version)


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def judge(raw: bytes | None, st_ino: int, st_size: int) -> tuple[str, Mark | None]:
    """What the attribute ``raw`` (None: absent) says of the file with inode ``st_ino`` and
    size ``st_size``: a state (``MARK_*``) and the mark when there is one. A copy is told
    before a resize (a copy is not ivypy's file at any size). Pure."""
    if raw is None:
        return MARK_NONE, None
    mark = decode_mark(raw)
    if mark is None:
        return MARK_DAMAGED, None
    if mark.inode != st_ino:
        return MARK_COPIED, mark
    if mark.size_bytes != st_size:
        return MARK_RESIZED, mark
    return MARK_OK, mark


def utc_text(epoch_s: float) -> str:
    """``2026-11-25T16:54:19Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def write_mark(fd: int, layout: str, *, created: str = "",
               clock: Callable[[], float] = time.time) -> str:
    """Mark the open file ``fd`` as ivypy's, at its size and inode now; ``created`` (default:
    now) carries an earlier mark's date over when ivypy extends a file it made. Returns ""
    when marked, else why not (the file system keeps no user extended attributes, or its
    error): the file is then left unmarked, which only means a later run will not take it
    for ivypy's."""
    try:
        st = os.fstat(fd)
        value = encode_mark(Mark(layout=layout, size_bytes=st.st_size, inode=st.st_ino,
                                 created=created or utc_text(clock())))
        os.setxattr(fd, MARK_XATTR, value)
    except OSError as exc:
        if exc.errno in _NO_XATTRS:
            return "its file system keeps no user extended attributes"
        return f"{MARK_XATTR} could not be set: {exc.strerror or exc}"
    return ""


def read_mark(path: str, st: os.stat_result) -> tuple[str, Mark | None]:
    """``judge`` the mark of the file at ``path`` against ``st`` (its stat). An attribute that
    cannot be read for another reason than its absence or the file system's lack of them
    counts as no mark, with a warning."""
    try:
        raw: bytes | None = os.getxattr(path, MARK_XATTR)
    except OSError as exc:
        if exc.errno in _NO_XATTRS:
            return MARK_UNSUPPORTED, None
        if exc.errno != errno.ENODATA:
            log.warning("file LUN %s: cannot read its %s: %s", path, MARK_XATTR,
                        exc.strerror or exc)
        raw = None
    return judge(raw, st.st_ino, st.st_size)
