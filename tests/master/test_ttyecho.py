"""The terminal's echo off and back, on a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import termios
from collections.abc import Iterator

import pytest

from master.live.ttyecho import EchoOff


@pytest.fixture()
def pty_stream() -> Iterator[io.TextIOWrapper]:
    leader, follower = os.openpty()
    stream = open(follower, "w", closefd=True)  # noqa: SIM115 - closed below
    try:
        yield stream
    finally:
        stream.close()
        os.close(leader)


def _echo(fd: int) -> bool:
    return bool(termios.tcgetattr(fd)[3] & termios.ECHO)


def test_echo_off_then_as_it_was(pty_stream: io.TextIOWrapper) -> None:
    fd = pty_stream.fileno()
    before = termios.tcgetattr(fd)
    assert _echo(fd)
    off = EchoOff.on(pty_stream)
    assert off is not None
    assert not _echo(fd)
    after = termios.tcgetattr(fd)
    # only the echo changed: signals (Ctrl-C) still work
    assert after[3] == before[3] & ~termios.ECHO and after[3] & termios.ISIG
    assert after[:3] == before[:3] and after[4:] == before[4:]
    off.restore()
    assert termios.tcgetattr(fd) == before
    off.restore()  # once only: a second call changes nothing
    assert termios.tcgetattr(fd) == before


def test_a_terminal_already_quiet_stays_quiet(pty_stream: io.TextIOWrapper) -> None:
    fd = pty_stream.fileno()
    quiet = termios.tcgetattr(fd)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    off = EchoOff.on(pty_stream)
    assert off is not None
    off.restore()
    assert not _echo(fd)


def test_no_terminal_no_change(tmp_path: os.PathLike[str]) -> None:
    assert EchoOff.on(io.StringIO()) is None  # no file descriptor
    with open(os.path.join(tmp_path, "f"), "w") as fh:  # a file: no terminal
        assert EchoOff.on(fh) is None
