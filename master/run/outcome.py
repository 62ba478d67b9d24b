"""What a run ends with: its exit status, its result, and a step's failure.

Owns the exit codes of ``ivypy run`` (``0`` ok, ``1`` a step invalid, ``2`` config or preflight
error, ``3`` host failure, ``4`` run folder not writable, ``5`` data verification found
damaged blocks, ``130`` interrupted), ``RunResult``
and ``StepFailed``. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from protocol.errors import IvyError

EXIT_OK, EXIT_INVALID, EXIT_CONFIG, EXIT_HOST, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_OUTPUT = 4  # the run folder could not be written (disk full, read-only ...)
EXIT_DAMAGED = 5  # data verification found damaged blocks (docs/verify.md)


@dataclass
class RunResult:
    exit_code: int
    folder: Path | None
    message: str = ""
    invalid_steps: list[str] = field(default_factory=list)


class StepFailed(IvyError):
    """A step cannot go on (a host failed or was late); carries the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_HOST) -> None:
        self.exit_code = exit_code
        super().__init__(message)


def failure_text(exc: IvyError) -> str:
    """A failure as a summary row's reason quotes it: its first line (a ``HostError`` names
    its host; a slave's stderr tail stays in events.csv and run.log)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]
