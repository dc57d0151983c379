"""Lines of a stream as they arrive (a followed log, a subprocess's output), read by a thread of
their own, so a test acts on what the stream has delivered so far instead of sleeping, and every
wait for more is bounded and named."""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Generic, Iterable, Iterator, TypeVar

import pytest

T = TypeVar("T", str, bytes)


def split_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The complete lines (without their newline) in a stream of byte chunks; a last line
    without a newline comes at the end."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        yield from lines
    if rest:
        yield rest


def close_followed(resp) -> None:
    """Close a followed urllib3 response whose body a reader thread is blocked on: its socket is
    shut down first, which ends that read (``close()`` alone waits for the read's lock, which a
    followed stream that stays quiet never gives back)."""
    sock = getattr(resp.connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    resp.close()


class ArrivingLines(Generic[T]):
    """``lines`` (an iterator that blocks until the next line is there) read in a daemon
    thread; :meth:`take` waits, bounded, for the next ones."""

    def __init__(self, lines: Iterable[T], source: str):
        self.source = source
        self.seen: list[T] = []
        self._q: queue.Queue[tuple[str, object]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(lines,), daemon=True)
        self._thread.start()

    def _read(self, lines: Iterable[T]) -> None:
        try:
            for line in lines:
                self._q.put(("line", line))
            self._q.put(("end", None))
        except Exception as exc:  # noqa: BLE001 - a closed connection: reported as the end
            self._q.put(("end", f"{type(exc).__name__}: {exc}"))

    def take(self, n: int, what: str, timeout: float = 30.0) -> list[T]:
        """The next ``n`` lines; fails naming ``what`` when the stream ends first or they do not
        all come within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        got: list[T] = []
        while len(got) < n:
            try:
                kind, value = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what} from {self.source}: "
                            f"got {got!r}, before that {self.seen!r}", pytrace=False)
            if kind == "end":
                why = f" ({value})" if value else ""
                pytest.fail(f"{self.source} ended{why} before {what}: got {got!r}, before that "
                            f"{self.seen!r}", pytrace=False)
            got.append(value)  # type: ignore[arg-type]
        self.seen += got
        return got

    def rest(self, what: str, timeout: float = 30.0) -> list[T]:
        """Every line until the stream ends; fails naming ``what`` when it has not ended within
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        got: list[T] = []
        while True:
            try:
                kind, value = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"{self.source} did not end within {timeout:g} s ({what}): got {got!r}",
                            pytrace=False)
            if kind == "end":
                self.seen += got
                return got
            got.append(value)  # type: ignore[arg-type]
