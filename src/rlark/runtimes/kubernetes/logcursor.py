"""Following a Pod's log across reconnects without losing or repeating lines (pure).

The log API (``GET .../pods/NAME/log?follow=true&timestamps=true``) prefixes every line with an
RFC 3339 timestamp with nanoseconds (``2024-01-20T00:42:08.123456789Z text``) and can resume
only by ``sinceSeconds``. :class:`LogCursor` strips the timestamps, remembers the last one
written, and after a reconnect skips the lines already written (those older than it, and as many
lines *at* that timestamp as were written).

A cursor outlives the server process that wrote the file: :meth:`LogCursor.state` is saved beside
the file after each write, and the next process resumes with :func:`restore` (or, with no usable
state, :meth:`LogCursor.after_lines`), so the file gets every line of the Pod's log exactly once.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from rlark.loglines import CUT_MARK, MAX_LINE_BYTES

#: room for the stream's own timestamp (``2024-01-20T00:42:08.123456789Z ``) before a line
STAMP_BYTES = 64


def parse_log_time(stamp: bytes) -> int | None:
    """``2024-01-20T00:42:08.123456789Z`` -> nanoseconds since the epoch; None if not a time."""
    try:
        text = stamp.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not text.endswith("Z") or "T" not in text:
        return None
    body = text[:-1]
    frac = 0
    if "." in body:
        body, digits = body.split(".", 1)
        if not digits.isdigit():
            return None
        frac = int(digits[:9].ljust(9, "0"))
    try:
        secs = datetime.strptime(body, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return int(secs) * 1_000_000_000 + frac


class LogCursor:
    """Feed raw chunks of a timestamped log stream; get back the bytes to append to the file.

    Args:
        last_ns: timestamp (ns since the epoch) of the last line in the file; None: no
            timestamped line yet (a reconnect then reads from the start, skipping ``lines``).
        at_last: how many lines in the file carry ``last_ns``.
        lines: lines in the file.
        size: the file's size in bytes (what the cursor accounts for).
    """

    def __init__(self, last_ns: int | None = None, at_last: int = 0, lines: int = 0,
                 size: int = 0) -> None:
        self._partial = b""
        self.last_ns = last_ns
        self.at_last = at_last
        self.lines = lines
        self.size = size
        self._replay: tuple[int, int] | None = None  # (last_ns, lines to skip at it)
        self._skipped_at_last = 0
        self._skip_first = 0  # a replay from the start: lines to drop (already in the file)
        self._dropping = False  # inside the rest of a line cut at MAX_LINE_BYTES

    @classmethod
    def after_lines(cls, lines: int, size: int) -> "LogCursor":
        """A cursor for a file of ``lines`` lines (``size`` bytes) with no saved state (written
        by a release without cursors, or by a process that died before its first save): the
        next stream is read from the start and its first ``lines`` lines are dropped."""
        return cls(lines=lines, size=size)

    def state(self) -> dict[str, int | None]:
        """What :meth:`from_state` needs to carry on in another process (JSON-ready):
        ``{"size": bytes, "lines": n, "last_ns": ns or None, "at_last": n}``."""
        return {"size": self.size, "lines": self.lines, "last_ns": self.last_ns, "at_last": self.at_last}

    @classmethod
    def from_state(cls, state: dict) -> "LogCursor":
        """The cursor :meth:`state` described.

        Raises:
            ValueError: ``state`` is not such a dict (a field missing, negative or not an int).
        """
        try:
            size, lines, at_last, last_ns = (state["size"], state["lines"], state["at_last"],
                                             state["last_ns"])
        except (KeyError, TypeError):
            raise ValueError(f"not a log cursor state: {state!r}") from None
        counts = (size, lines, at_last) + (() if last_ns is None else (last_ns,))
        if not all(type(v) is int and v >= 0 for v in counts):
            raise ValueError(f"not a log cursor state: {state!r}")
        return cls(last_ns=last_ns, at_last=at_last, lines=lines, size=size)

    def resume(self, now: float) -> int | None:
        """Call before (re)connecting; returns the ``sinceSeconds`` to ask for (None: from the
        start, as no timestamped line was written yet)."""
        self._partial = b""
        self._dropping = False
        self._replay = None
        self._skipped_at_last = 0
        if self.last_ns is None:
            self._skip_first = self.lines
            return None
        self._skip_first = 0
        self._replay = (self.last_ns, self.at_last)
        return max(1, math.ceil(now - self.last_ns / 1e9) + 1)

    def _line(self, line: bytes) -> bytes | None:
        if self._skip_first:
            self._skip_first -= 1
            return None
        stamp, sep, rest = line.partition(b" ")
        ns = parse_log_time(stamp) if sep else None
        if ns is None:  # not timestamped (should not happen): keep as is
            return line
        if self._replay is not None:
            last, count = self._replay
            if ns < last:
                return None
            if ns == last and self._skipped_at_last < count:
                self._skipped_at_last += 1
                return None
            self._replay = None
        if ns == self.last_ns:
            self.at_last += 1
        else:
            self.last_ns, self.at_last = ns, 1
        return rest

    def feed(self, chunk: bytes) -> bytes:
        """The complete lines of ``chunk`` (after what earlier chunks left), timestamps removed.

        A line longer than :data:`rlark.loglines.MAX_LINE_BYTES` is written cut there, with
        :data:`rlark.loglines.CUT_MARK`, as soon as that much of it has come; the rest of it is
        dropped, so at most that much of a line is ever held."""
        out = []
        if self._dropping:
            nl = chunk.find(b"\n")
            if nl < 0:
                return b""
            self._dropping, chunk = False, chunk[nl + 1:]
        data = self._partial + chunk
        end = data.rfind(b"\n")
        self._partial = data[end + 1:]
        for line in data[: end + 1].split(b"\n")[:-1] if end >= 0 else ():
            if len(line) > MAX_LINE_BYTES + STAMP_BYTES:
                line = line[:MAX_LINE_BYTES + STAMP_BYTES]
                rest = self._line(line)
                if rest is not None:
                    out.append(rest[:MAX_LINE_BYTES] + CUT_MARK + b"\n")
                continue
            rest = self._line(line)
            if rest is not None:
                out.append(rest + b"\n")
        if len(self._partial) > MAX_LINE_BYTES + STAMP_BYTES:
            rest = self._line(self._partial[:MAX_LINE_BYTES + STAMP_BYTES])
            if rest is not None:
                out.append(rest[:MAX_LINE_BYTES] + CUT_MARK + b"\n")
            self._partial, self._dropping = b"", True
        return self._written(out)

    def flush(self) -> bytes:
        """At the end of the stream: a last line without a newline, completed."""
        if not self._partial:
            return b""
        line, self._partial = self._partial, b""
        rest = self._line(line)
        return self._written([] if rest is None else [rest + b"\n"])

    def _written(self, lines: list[bytes]) -> bytes:
        data = b"".join(lines)
        self.lines += len(lines)
        self.size += len(data)
        return data


def restore(saved: dict | None, file_size: int) -> LogCursor | None:
    """The cursor to resume a log file of ``file_size`` bytes with, from the state saved after
    the last write (:meth:`LogCursor.state`; None: none was found). The caller cuts the file back
    to the returned cursor's ``size`` first: a process that died between writing lines and saving
    the state left lines the cursor does not account for, and they are fetched again.

    Returns None when ``saved`` cannot say (missing, malformed, or larger than the file: the file
    was cut by someone else); then the file's own lines tell (:meth:`LogCursor.after_lines`).
    """
    if saved is None:
        return None
    try:
        cursor = LogCursor.from_state(saved)
    except ValueError:
        return None
    return cursor if cursor.size <= file_size else None
