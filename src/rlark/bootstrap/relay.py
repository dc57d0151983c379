"""The Worker's log as the keeper writes it: the workload's output relayed byte for byte
(:class:`Channel`; a workload line that begins like a lifecycle line is relayed after
:data:`~rlark.bootstrap.lifecycle.ESCAPE`, so it is never read as one) with the keeper's own
lifecycle lines between, each on a line of its own; and the bounded readers of the workload's
pipes (:class:`Lines`, :func:`read_all`). Pure state; bytes go out through a callable.
"""

from __future__ import annotations

import os

from rlark.bootstrap.lifecycle import ESCAPE, EVENT_PREFIX_BYTES, lifecycle_line


class Channel:
    """The Worker's log as the keeper writes it: the workload's bytes relayed unchanged but for
    :data:`ESCAPE` before a line that begins like a lifecycle line, and the keeper's own lines,
    each starting on a fresh line. ``write``: takes bytes (e.g. :func:`write_all` to fd 1)."""

    def __init__(self, write):
        self.write = write
        self.at_start = True  # the last byte written ended a line (or nothing was written)
        self.head = bytearray()  # the start of a workload line that may still be a lookalike

    def relay(self, data: bytes) -> None:
        """Relay a chunk of the workload's output."""
        out = bytearray()
        pos, n = 0, len(data)
        while pos < n:
            if self.at_start:
                piece = data[pos:pos + len(EVENT_PREFIX_BYTES) - len(self.head)]
                nl = piece.find(b"\n")
                if nl >= 0:
                    piece = piece[:nl + 1]
                self.head += piece
                pos += len(piece)
                head = bytes(self.head)
                if head.endswith(b"\n") or not EVENT_PREFIX_BYTES.startswith(head) \
                        or len(head) >= len(EVENT_PREFIX_BYTES):
                    if head.startswith(EVENT_PREFIX_BYTES):
                        out += ESCAPE
                    out += head
                    self.head.clear()
                    self.at_start = head.endswith(b"\n")
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                out += data[pos:]
                pos = n
            else:
                out += data[pos:nl + 1]
                pos = nl + 1
                self.at_start = True
        if out:
            self.write(bytes(out))

    def emit(self, event: str, **data) -> None:
        """Write one lifecycle line ``RLARK_EVENT {"ts": <unix seconds>, "event": ..., ...}``
        (:func:`~rlark.bootstrap.lifecycle.lifecycle_line`) on a line of its own."""
        line = lifecycle_line(event, **data).encode() + b"\n"
        pre = b""
        if self.head:  # a held start of a workload line: it was no lifecycle line
            pre += bytes(self.head)
            self.head.clear()
            self.at_start = False
        if not self.at_start:
            pre += b"\n"
        self.write(pre + line)
        self.at_start = True


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe may take part of it); a reader that is gone
    (EPIPE) loses the rest: the keeper goes on managing the Worker."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BrokenPipeError:
            return
        view = view[n:]


class Lines:
    """Complete lines of a byte stream, each at most ``cap`` bytes: a longer one is dropped
    whole and counted in ``dropped`` (bounded memory whatever the workload writes)."""

    def __init__(self, cap: int):
        self.cap, self.buf, self.skipping, self.dropped = cap, bytearray(), False, 0

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes (without their newline)."""
        out: list[bytes] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            part = data[start:] if nl < 0 else data[start:nl]
            if self.skipping:
                pass  # inside a line already too long: dropped up to its newline
            elif len(self.buf) + len(part) > self.cap:
                self.buf.clear()
                self.skipping = True
                self.dropped += 1
            else:
                self.buf += part
            if nl < 0:
                return out
            if not self.skipping:
                out.append(bytes(self.buf))
            self.buf.clear()
            self.skipping = False
            start = nl + 1


def read_all(fd: int, cap: int = 64 * 1024 * 1024) -> bytes:
    """Everything the pipe ``fd`` gives until its end (at most ``cap`` bytes), then close it."""
    chunks, size = [], 0
    try:
        while size <= cap:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            chunks.append(data)
            size += len(data)
    finally:
        os.close(fd)
    if size > cap:
        raise ValueError(f"the workload's environment is over {cap} bytes")
    return b"".join(chunks)
