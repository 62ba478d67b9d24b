"""The exception tree of ivypy. Every error ivypy raises on purpose is an ``IvyError``.

::

    IvyError
    ├── ProtocolError                 bytes or messages that break the protocol
    │   ├── LocalProtocolError        we were about to break the rules (a bug on our side)
    │   └── RemoteProtocolError       the peer broke the rules (malformed, oversized, out of order)
    │       └── VersionMismatchError  the peer speaks another protocol version
    ├── LadderMismatchError           histograms on different bucket ladders (also a ValueError)
    ├── ConfigError                   the test file is wrong: carries file, line and key path
    ├── PreflightError                a write would touch a LUN that is in use
    ├── HostError                     a host failed: unreachable, lost, late, slave crashed
    │   └── SlaveStartError           the slave could not start on the host
    ├── IoEngineError                 the I/O engine could not be set up or failed
    ├── MasterLateError               a subinterval began without the master's grant (slave)
    ├── LogFormatError                an input log (fio histogram log) is malformed
    └── CompareError                  ``ivypy compare``: a wrong argument, or runs that do not match

Exceptions carry context as attributes (``host``, ``lun``, ``key_path``, ...) so that callers
can act on them without parsing messages. Foreign exceptions (OSError, asyncssh errors, yaml
errors) are translated into this tree at exactly one boundary with ``raise ... from exc``.
This module must not import anything beyond the standard library.
"""

from __future__ import annotations


class IvyError(Exception):
    """Root of every error ivypy raises on purpose."""


class ProtocolError(IvyError):
    """A frame or message that breaks the protocol. ``host`` names the peer when known."""

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(f"[host={host}] {message}" if host else message)


class LocalProtocolError(ProtocolError):
    """We were about to send something the protocol forbids (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something malformed, oversized or out of order."""


class VersionMismatchError(RemoteProtocolError):
    """The peer speaks another protocol version."""


class LadderMismatchError(IvyError, ValueError):
    """Two histograms (or a wire histogram) use different bucket ladders."""


# the characters str.splitlines() breaks at, written as escapes: a config error is one line
# even when it quotes a value that holds one of them
_ONE_LINE = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


class ConfigError(IvyError):
    """The test file is wrong. Formats as ``file:line: key.path: message``, on one line."""

    def __init__(
        self,
        message: str,
        *,
        key_path: str = "",
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.key_path = key_path
        self.file = file
        self.line = line
        message = message.translate(_ONE_LINE)
        self.reason = message
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        elif line:
            where = f"line {line}: "
        super().__init__(f"{where}{key_path + ': ' if key_path else ''}{message}"
                         .translate(_ONE_LINE))


class ConfigErrors(ConfigError):
    """Several errors of one test file at once (``MAX_REPORTED`` at most, then how many more):
    each its own ``file:line: key.path: message`` line. A fio user's ``runtime``, ``rw`` and
    ``bs`` took three runs to learn of, one unknown key each."""

    MAX_REPORTED = 20

    def __init__(self, errors: list[ConfigError]) -> None:
        shown = errors[:self.MAX_REPORTED]
        self.errors = shown
        first = shown[0]
        super().__init__(first.reason, key_path=first.key_path, file=first.file, line=first.line)
        more = len(errors) - len(shown)
        self.lines = [str(e) for e in shown] + ([f"and {more} more"] if more else [])
        self.args = ("\n".join(self.lines),)

    def __str__(self) -> str:
        return "\n".join(self.lines)


class PreflightError(IvyError):
    """A workload that writes was refused on a LUN that is in use."""

    def __init__(self, message: str, *, host: str | None = None, lun: str | None = None) -> None:
        self.host = host
        self.lun = lun
        super().__init__(message)


class HostError(IvyError):
    """A host failed: unreachable, lost mid-step, late, or its slave crashed."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        exit_status: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.host = host
        self.exit_status = exit_status
        self.stderr_tail = stderr_tail
        text = f"host {host}: {message}"
        if exit_status is not None:
            text += f" (exit status {exit_status})"
        if stderr_tail:
            text += f"; stderr: {stderr_tail.strip()[-500:]}"
        super().__init__(text)


class SlaveStartError(HostError):
    """The slave could not be started on the host (missing python3, numpy, psutil, ...)."""


class IoEngineError(IvyError):
    """The I/O engine could not be set up, or an I/O failed in a way the engine cannot count."""


class MasterLateError(IvyError):
    """A subinterval was about to start on a slave without the master's ``Continue`` for it
    (``protocol.credit``), or the buffer it needs was still being sent: the slave stops all
    I/O. A worker's own (``slave.worker.WorkerLateError``) names the worker and its
    workloads."""


class OutputError(IvyError):
    """The run folder could not be written (disk full, quota, read-only, I/O error). Names the
    file and the reason."""

    def __init__(self, path: str, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        super().__init__(f"cannot write {path}: {exc.strerror or exc}")


class LogFormatError(IvyError):
    """An input log is malformed. Names the file and line."""

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        self.file = file
        self.line = line
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")


class CompareError(IvyError):
    """``ivypy compare`` cannot compare: a wrong argument (a ``--fail-if`` expression, a metric
    or rollup type the runs do not have), a run folder without a readable ``summary.csv``, or
    two runs with no step and rollup instance in common. ``what`` names the argument or file."""

    def __init__(self, message: str, *, what: str = "") -> None:
        self.what = what
        super().__init__(f"{what}: {message}" if what else message)
