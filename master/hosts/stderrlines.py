"""A slave's stderr bytes cut into log lines, in bounded memory. Pure: the transport feeds it.

Owns the rules for turning what a slave writes to its stderr into lines for the run log: lines
end at ``\\n`` (a ``\\r`` before it is dropped), bytes are UTF-8 with undecodable ones replaced,
the reads may split the stream anywhere, and a line may be of any length. A line longer than
``max_line_bytes`` keeps its first ``max_line_bytes`` and ends with
`` ... [line truncated: <its length> bytes]``; the rest is counted, never held, so a slave that
writes a gigabyte without a newline costs ``max_line_bytes``. An unterminated last line comes out
at ``close``.

Must not: read from a stream or log (``master.hosts.transport`` relays the lines), or drop a line.
"""

from __future__ import annotations

from typing import Final

#: The longest line kept whole (asyncio's default stream limit, which ended the relay before).
MAX_LINE_BYTES: Final = 1 << 16


class StderrLines:
    """Fed stderr bytes in any pieces, returns the lines they complete."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, not {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._head = bytearray()  # the current line's first bytes, up to max_line_bytes
        self._length = 0  # the current line's length so far, in bytes

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; return every line they complete (possibly none)."""
        lines: list[str] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            stop = len(data) if end < 0 else end
            room = self.max_line_bytes - len(self._head)
            if room > 0:
                self._head += data[start:min(stop, start + room)]
            self._length += stop - start
            if end < 0:
                break
            lines.append(self._take())
            start = end + 1
        return lines

    def close(self) -> list[str]:
        """The stream ended: the unterminated last line, if there is one."""
        return [self._take()] if self._length else []

    def _take(self) -> str:
        head, length = bytes(self._head), self._length
        self._head.clear()
        self._length = 0
        if length <= self.max_line_bytes:
            return head.rstrip(b"\r").decode("utf-8", errors="replace")
        return (f"{head.decode('utf-8', errors='replace')} ... [line truncated: {length} "
                "bytes]")
