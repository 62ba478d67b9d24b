"""The terminal's echo, turned off while the live view draws a region on it.

A key typed while the region is on (Enter, or Ctrl-C's ``^C``) is echoed by the terminal
where the cursor is, below or at the end of the region, and moves the cursor: the region's
next redraw starts that many lines too low and leaves its top lines behind, a stale frame.
With the echo off nothing moves; Ctrl-C still interrupts (signals are not echo). Owns only
that flag of the terminal's settings: it changes nothing else, and puts back what it found
(also at exit, should the view not be closed). Does nothing when the stream is no terminal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from typing import IO, Any


class EchoOff:
    """The echo of the terminal behind a stream, off until ``restore``."""

    def __init__(self, fd: int, saved: list[Any]) -> None:
        self.fd = fd
        self.saved = saved
        atexit.register(self.restore)

    @classmethod
    def on(cls, stream: IO[str]) -> EchoOff | None:
        """Echo off on ``stream``'s terminal; None (and nothing changed) when it is none."""
        try:
            import termios

            fd = stream.fileno()
            if not os.isatty(fd):
                return None
            saved = termios.tcgetattr(fd)
            quiet = list(saved)
            quiet[3] &= ~termios.ECHO  # the local modes
            termios.tcsetattr(fd, termios.TCSANOW, quiet)
        except ImportError:  # no termios: not a POSIX terminal
            return None
        except (OSError, ValueError, AttributeError, termios.error):  # no fd, or no terminal
            return None
        return cls(fd, saved)

    def restore(self) -> None:
        """The settings as they were; once (later calls do nothing)."""
        if not self.saved:
            return
        import termios

        saved, self.saved = self.saved, []
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(self.fd, termios.TCSANOW, saved)
        atexit.unregister(self.restore)
