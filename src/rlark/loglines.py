"""Splitting a Worker's output into lines with bounded memory (pure).

A Worker writes what it likes: a line of 100 MiB without a newline must not make RLark hold 100
MiB. Everywhere RLark reads a Worker's output line by line (following a log, the last lines of a
log, the lifecycle-line reader, the Kubernetes log follower) a line longer than
:data:`MAX_LINE_BYTES` is cut there: its first :data:`MAX_LINE_BYTES` bytes are kept with
:data:`CUT_MARK` after them, the rest of it up to its newline is dropped, and reading goes on
with the next line. The log file itself keeps every byte.
"""

from __future__ import annotations

#: the longest line RLark keeps whole (bytes); longer lines are cut (module docstring)
MAX_LINE_BYTES = 1024 * 1024
#: what follows the kept part of a cut line
CUT_MARK = b" [RLark: line cut at 1 MiB]"


def cut_line(line: bytes, max_bytes: int = MAX_LINE_BYTES) -> bytes:
    """``line`` (no newline) as RLark shows it: whole, or its first ``max_bytes`` bytes and
    :data:`CUT_MARK`."""
    return line if len(line) <= max_bytes else line[:max_bytes] + CUT_MARK


class LineSplitter:
    """Feed chunks of a byte stream, get back its complete lines (without ``\\n``), each at most
    ``max_bytes`` long plus :data:`CUT_MARK`. Holds at most ``max_bytes`` of a line that is not
    complete yet, whatever the stream does.

    ``cut``: how many lines were cut so far."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._dropping = False  # inside the dropped rest of a cut line
        self.cut = 0

    @property
    def pending(self) -> int:
        """Bytes of the incomplete last line held now (never more than ``max_bytes``)."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes (a cut line comes out once, when its cut is made)."""
        out: list[bytes] = []
        start = 0
        while start < len(chunk):
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl
            if self._dropping:
                if nl >= 0:
                    self._dropping = False
                start = end + 1
                continue
            room = self.max_bytes - len(self._buf)
            if end - start > room:  # the line outgrows the limit: cut it now
                self._buf += chunk[start:start + room]
                out.append(bytes(self._buf) + CUT_MARK)
                self._buf.clear()
                self.cut += 1
                self._dropping = nl < 0
                start = end + 1
                continue
            self._buf += chunk[start:end]
            if nl < 0:
                break
            out.append(bytes(self._buf))
            self._buf.clear()
            start = nl + 1
        return out

    def flush(self) -> bytes | None:
        """At the end of the stream: the incomplete last line, if any."""
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        return line
