"""Following a Pod's log across reconnects without losing or repeating lines (pure).

The log API (``GET .../pods/NAME/log?follow=true&timestamps=true``) prefixes every line with an
RFC 3339 timestamp with nanoseconds (``2024-01-20T00:42:08.123456789Z text``) and can resume
only by ``sinceSeconds``. :class:`LogCursor` strips the timestamps, remembers the last one
written, and after a reconnect skips the lines already written (those older than it, and as many
lines *at* that timestamp as were written).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone


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
    """Feed raw chunks of a timestamped log stream; get back the bytes to append to the file."""

    def __init__(self) -> None:
        self._partial = b""
        self.last_ns: int | None = None  # timestamp of the last line written
        self.at_last = 0  # lines written with that timestamp
        self._replay: tuple[int, int] | None = None  # (last_ns, lines to skip at it)
        self._skipped_at_last = 0

    def resume(self, now: float) -> int | None:
        """Call before reconnecting; returns the ``sinceSeconds`` to ask for (None: from the
        start, nothing was written yet)."""
        self._partial = b""
        if self.last_ns is None:
            return None
        self._replay = (self.last_ns, self.at_last)
        self._skipped_at_last = 0
        return max(1, math.ceil(now - self.last_ns / 1e9) + 1)

    def _line(self, line: bytes) -> bytes | None:
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
        """The complete lines of ``chunk`` (after what earlier chunks left), timestamps removed."""
        data = self._partial + chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._partial = data
            return b""
        self._partial = data[end + 1:]
        out = []
        for line in data[: end + 1].split(b"\n")[:-1]:
            rest = self._line(line)
            if rest is not None:
                out.append(rest + b"\n")
        return b"".join(out)

    def flush(self) -> bytes:
        """At the end of the stream: a last line without a newline, completed."""
        if not self._partial:
            return b""
        line, self._partial = self._partial, b""
        rest = self._line(line)
        return b"" if rest is None else rest + b"\n"
