"""Reading Worker logs: the last N lines, and following new lines as they are written.

Local Workers write to files under ``$RLARK_HOME/logs``; the files outlive the Workers and the
server, so logs stay readable after a Job ended and after a restart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Callable, Iterable, Iterator

from rlark import settings
from rlark.bootstrap.lifecycle import EVENT_PREFIX
from rlark.loglines import MAX_LINE_BYTES, LineSplitter, cut_line

if TYPE_CHECKING:
    from rlark.store import JobRow

CHUNK = 64 * 1024


#: a log answered in one piece (the API's lines, the Logs tab) is read from its last 16 MiB at
#: most (a Worker may write gigabytes); downloads stream it whole (:func:`read_lines`)
MAX_WHOLE_BYTES = 16 * 1024 * 1024


def left_out_mark(skipped: int) -> str:
    """The line RLark puts first where it answers with the end of a log only: how much it left
    out, why, and where the rest is."""
    return (f"[RLark: the first {skipped:,} bytes of this log are left out here: an answer holds "
            f"at most a log's last {MAX_WHOLE_BYTES // (1024 * 1024)} MiB. The console's log "
            "download (logs.txt, logs.csv) has every line]")


#: a lifecycle line's event token (``"tok": "<hex>"``), for lines that are not valid JSON
_TOKEN_FIELD = re.compile(r'\s*"tok"\s*:\s*"[^"]*"\s*,?')


def is_lifecycle(line: str) -> bool:
    """Whether ``line`` is one of the bootstrap's lifecycle lines (``RLARK_EVENT {json}``):
    RLark's own bookkeeping, which user-facing logs leave out unless asked for."""
    return line.startswith(EVENT_PREFIX)


def is_user_line(line: str) -> bool:
    """Not a lifecycle line (:func:`is_lifecycle`): what a user's own logs show by default."""
    return not line.startswith(EVENT_PREFIX)


def redact(line: str, mask: Callable[[str], str] | None = None) -> str:
    """``line`` as users may read it: a lifecycle line without the Run's event token (the
    secret that marks genuine lifecycle lines; controller/lifecycle.py); with ``mask`` (a
    Worker's from :meth:`~rlark.services.jobs.JobService.worker_logs`) the values of the Job's
    secrets replaced by ``***``, as CI systems do, since a script may print them."""
    if mask is not None:
        line = mask(line)
    if not line.startswith(EVENT_PREFIX) or "tok" not in line:
        return line
    try:
        body = json.loads(line[len(EVENT_PREFIX):])
    except ValueError:
        body = None
    if isinstance(body, dict):
        body.pop("tok", None)
        return EVENT_PREFIX + json.dumps(body)
    return _TOKEN_FIELD.sub("", line)


def user_lines(lines: Iterable[str], lifecycle: bool = False) -> list[str]:
    """Log lines as ``rlark logs``, the API and the console show them: lifecycle lines left out
    (``lifecycle=False``, the default) or kept without their token (:func:`redact`)."""
    if lifecycle:
        return [redact(line) for line in lines]
    return [line for line in lines if not line.startswith(EVENT_PREFIX)]


def lines_backward(f, size: int, chunk: int = CHUNK,
                   max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes, int]]:
    """The lines of the open binary file ``f`` (of ``size`` bytes) from its last to its first, as
    ``(line without its newline, offset of its first byte)``, each cut as
    :func:`rlark.loglines.cut_line` cuts it. The memory held is one ``chunk`` and at most
    ``max_line`` bytes of the line being read, whatever the file holds: a line longer than that
    is passed over backwards without keeping it, and its first ``max_line`` bytes are read again
    from its start."""
    end = size
    if end:
        f.seek(end - 1)
        if f.read(1) == b"\n":
            end -= 1  # the file's final newline ends its last line
    pieces: list[bytes] = []  # the current line's bytes seen so far, last piece first
    kept = length = 0  # bytes kept in pieces; the current line's length so far
    line_end = pos = end
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        right = len(block)
        while True:
            nl = block.rfind(b"\n", 0, right)
            piece = block[nl + 1:right]
            length += len(piece)
            if kept <= max_line:
                pieces.append(piece)
                kept += len(piece)
            if nl < 0:
                break
            yield _line_at(f, pieces, length, pos + nl + 1, max_line), pos + nl + 1
            pieces, kept, length = [], 0, 0
            right = nl
            line_end = pos + nl
    if line_end > 0 or pieces:
        yield _line_at(f, pieces, length, 0, max_line), 0


def _line_at(f, pieces: list[bytes], length: int, start: int, max_line: int) -> bytes:
    """One line found by :func:`lines_backward`: its bytes when it was kept whole, else its
    first ``max_line`` bytes (read again from ``start``) and the cut mark."""
    if length <= max_line:
        return b"".join(reversed(pieces))
    f.seek(start)
    return cut_line(f.read(max_line + 1), max_line)


def tail_lines(path: str | None, n: int | None,
               keep: Callable[[str], bool] | None = None,
               drop: bool = True) -> tuple[list[str], int]:
    """The last ``n`` lines of the file (when ``n`` is None: all of them, as far back as
    :data:`MAX_WHOLE_BYTES` of lines reach) and the file size in bytes (the offset to follow
    from). Lines are read backwards (:func:`lines_backward`): every line is cut at
    :data:`rlark.loglines.MAX_LINE_BYTES`, so a huge line near the end takes 1 MiB of the
    answer, not all of it, and the lines before it are still there; at most
    :data:`MAX_WHOLE_BYTES` of lines are answered, whatever ``n`` is. With ``keep`` (e.g.
    :func:`is_user_line`) only lines it accepts are counted: ``n`` of them, however many other
    lines lie between; they alone are returned, or with ``drop=False`` every line from the first
    of them on (a reader that wants the others for context, such as the times lifecycle lines
    carry). When lines before the answer were left out for want of room, the first line
    returned is :func:`left_out_mark` (the bytes before the first line answered). A missing
    file has no lines."""
    if not path or not os.path.exists(path):
        return [], 0
    found: list[str] = []  # from the end backwards
    counted = taken = 0
    skipped = 0  # bytes before the first line answered, when lines were left out for room
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if n is not None and n <= 0:
            return [], size
        earliest = size
        for raw, start in lines_backward(f, size):
            if taken + len(raw) + 1 > MAX_WHOLE_BYTES:
                skipped = earliest
                break
            earliest = start
            taken += len(raw) + 1
            line = raw.decode("utf-8", errors="replace")
            found.append(line)
            if keep is None or keep(line):
                counted += 1
                if n is not None and counted >= n:
                    break
    lines = list(reversed(found))
    if keep is not None:
        if drop:
            lines = [line for line in lines if keep(line)]
        else:  # from the first kept line on
            first = next((i for i, line in enumerate(lines) if keep(line)), len(lines))
            lines = lines[first:]
    if skipped:
        lines.insert(0, left_out_mark(skipped))
    return lines, size


def read_lines(path: str | None, chunk: int = CHUNK) -> Iterator[str]:
    """Every line of the file from its start to the size it had when reading began (a Worker
    may go on writing), read ``chunk`` bytes at a time: the memory held is at most a chunk and
    one line of :data:`rlark.loglines.MAX_LINE_BYTES` (longer lines come cut, with
    :data:`rlark.loglines.CUT_MARK`), however big the file. The file is opened for each chunk,
    so many of these at once hold no file descriptor while they wait. A missing file has no
    lines."""
    if not path:
        return
    try:
        end = os.path.getsize(path)
    except OSError:
        return
    lines = LineSplitter()
    offset = 0
    while offset < end:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(min(chunk, end - offset))
        except FileNotFoundError:  # the Job was deleted meanwhile
            break
        if not data:  # cut shorter meanwhile
            break
        offset += len(data)
        for line in lines.feed(data):
            yield line.decode("utf-8", errors="replace")
    last = lines.flush()
    if last is not None:
        yield last.decode("utf-8", errors="replace")


def follow_lines(
    path: str | None,
    offset: int,
    still_active: Callable[[], bool],
    poll_seconds: float = 0.2,
    idle_check_seconds: float = 1.0,
) -> Iterator[str]:
    """Yield complete lines appended to ``path`` after byte ``offset``, until ``still_active()``
    turns false and the file has been read to its end. ``still_active`` is asked at most every
    ``idle_check_seconds`` while no new line arrives. Lines longer than
    :data:`rlark.loglines.MAX_LINE_BYTES` come cut (:class:`rlark.loglines.LineSplitter`)."""
    lines = LineSplitter()
    last_check = 0.0
    active = True
    while True:
        chunk = b""
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(CHUNK)
        if chunk:
            offset += len(chunk)
            for line in lines.feed(chunk):
                yield line.decode("utf-8", errors="replace")
            continue
        if not active:
            last = lines.flush()
            if last is not None:
                yield last.decode("utf-8", errors="replace")
            return
        now = time.monotonic()
        if now - last_check >= idle_check_seconds:
            last_check = now
            active = still_active()
            if not active:
                continue  # one more read to the end of the file
        time.sleep(poll_seconds)


def job_log_dirs(job: "JobRow") -> list[Path]:
    """A Job's Worker files, removed with it: its log directory under ``$RLARK_HOME/logs`` (and,
    for Runs made before logs were kept per project, the directories its Workers' log paths
    name), and each Run's Worker directories under ``$RLARK_HOME/workers/<run uid>`` (a Worker's
    home and what it wrote into its working directory, on the local runtime); never anything
    outside those two directories of RLark's own."""
    dirs = {settings.job_logs_dir(job.project.name, job.name)}
    dirs |= {Path(w.log_path).parent for r in job.runs for w in r.workers if w.log_path}
    logs = settings.logs_dir().resolve()
    workers = (settings.rlark_home() / "workers").resolve()
    dirs |= {workers / r.uid for r in job.runs if r.uid and "/" not in r.uid and r.uid not in (".", "..")}
    return sorted(d for d in dirs if d.resolve().is_relative_to(logs)
                  or (d.resolve().is_relative_to(workers) and d.resolve() != workers))


def remove_dirs(dirs: list[Path]) -> None:
    """Remove directories (those :func:`job_log_dirs` names), ignoring ones already gone."""
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


# --- following logs -------------------------------------------------------------------------------


class FollowLimits:
    """How many log follows this server serves at once: at most ``total`` in all and
    ``per_user`` for one user (so one user cannot take them all). Thread-safe.

    Defaults: ``$RLARK_MAX_LOG_FOLLOWS`` (64) and ``$RLARK_MAX_LOG_FOLLOWS_PER_USER`` (8)."""

    def __init__(self, total: int | None = None, per_user: int | None = None) -> None:
        import threading

        self.total = total if total is not None else settings.positive_int_env("RLARK_MAX_LOG_FOLLOWS", 64)
        self.per_user = per_user if per_user is not None else settings.positive_int_env(
            "RLARK_MAX_LOG_FOLLOWS_PER_USER", 8)
        self._lock = threading.Lock()
        self._by_user: dict[str, int] = {}

    @property
    def open(self) -> int:
        """Follows being served now."""
        with self._lock:
            return sum(self._by_user.values())

    def acquire(self, user: str) -> None:
        """Take a place for one follow of ``user``; give it back with :meth:`release`.

        Raises:
            TooManyRequests: all places, or all of this user's, are taken (429, retry later).
        """
        from rlark.services.errors import TooManyRequests

        with self._lock:
            used = sum(self._by_user.values())
            mine = self._by_user.get(user, 0)
            if used >= self.total:
                raise TooManyRequests(
                    f"this server already streams {used} followed logs, its limit "
                    f"(RLARK_MAX_LOG_FOLLOWS={self.total}); retry later, close other followers, or "
                    "read the log without follow", retry_after=5)
            if mine >= self.per_user:
                raise TooManyRequests(
                    f"user {user!r} already follows {mine} logs, the limit per user "
                    f"(RLARK_MAX_LOG_FOLLOWS_PER_USER={self.per_user}); close one (another console "
                    "tab or `rlark logs -f`) and retry", retry_after=5)
            self._by_user[user] = mine + 1

    def release(self, user: str) -> None:
        with self._lock:
            left = self._by_user.get(user, 0) - 1
            if left > 0:
                self._by_user[user] = left
            else:
                self._by_user.pop(user, None)


def _sse(event: str, data) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def follow_events(chosen: list[dict], tail: int | None, keep: Callable[[str], bool] | None,
                        active: Callable[[], set[str]], allowed: Callable[[], bool], *,
                        poll_seconds: float = 0.2, idle_check_seconds: float = 1.0,
                        reauthorize_seconds: float = 5.0,
                        keepalive_seconds: float = 15.0) -> AsyncIterator[str]:
    """The Server-Sent Events of a followed log (``GET .../logs?follow=true``), as text chunks.

    ``chosen``: the Workers (``name``, ``log``, ``mask``, as :meth:`JobService.worker_logs`
    gives them); their last ``tail`` lines (10 when None; ``keep`` picks which lines count and
    are shown) come first, then what is appended, each line :func:`redact`-ed (with the
    Worker's ``mask``: the Job's secret values hidden) and cut at
    :data:`rlark.loglines.MAX_LINE_BYTES`. Events: ``workers`` (the names), ``line``
    (``{"worker", "line"}``), and ``end``: ``{}`` once every Worker is out of ``active()``
    (names of Workers that may still write) and its log is read, ``{"reason": "AccessEnded"}``
    as soon as ``allowed()`` says the caller may no longer read the Job (asked every
    ``reauthorize_seconds``). A comment goes out after ``keepalive_seconds`` without a line.

    One reader for all the Workers, in the event loop: no thread per Worker or per request
    (``active`` and ``allowed`` touch the database and run in the shared thread pool). It reads
    only as fast as the client takes what it sent, so nothing piles up for a slow client.
    """
    import anyio

    yield _sse("workers", [w["name"] for w in chosen])
    n = 10 if tail is None else tail
    offsets: dict[str, int] = {}
    for w in chosen:
        lines, offsets[w["name"]] = await anyio.to_thread.run_sync(tail_lines, w["log"], n, keep)
        if lines:
            yield "".join(_sse("line", {"worker": w["name"], "line": redact(line, w.get("mask"))})
                          for line in lines)
    splitters = {w["name"]: LineSplitter() for w in chosen}
    masks = {w["name"]: w.get("mask") for w in chosen}
    following = {w["name"]: w["log"] for w in chosen}
    still: set[str] = set(following)
    now = time.monotonic()
    next_check, next_auth, next_alive = now + idle_check_seconds, now + reauthorize_seconds, now + keepalive_seconds
    while following:
        out: list[str] = []
        got_bytes = False
        for name, path in list(following.items()):
            chunk = _read_at(path, offsets[name])
            if chunk:
                got_bytes = True
                offsets[name] += len(chunk)
                for raw in splitters[name].feed(chunk):
                    line = raw.decode("utf-8", errors="replace")
                    if keep is None or keep(line):
                        out.append(_sse("line", {"worker": name, "line": redact(line, masks[name])}))
            elif name not in still:  # gone and read to its end
                last = splitters[name].flush()
                if last is not None:
                    line = last.decode("utf-8", errors="replace")
                    if keep is None or keep(line):
                        out.append(_sse("line", {"worker": name, "line": redact(line, masks[name])}))
                del following[name]
        now = time.monotonic()
        if out:
            next_alive = now + keepalive_seconds
            yield "".join(out)
        if now >= next_auth:
            if not await anyio.to_thread.run_sync(allowed):
                yield _sse("end", {"reason": "AccessEnded"})
                return
            next_auth = time.monotonic() + reauthorize_seconds
        if got_bytes:
            continue  # read on before sleeping
        if now >= next_check:
            still = await anyio.to_thread.run_sync(active)
            next_check = time.monotonic() + idle_check_seconds
            continue  # one more read to the end of the files of Workers that are gone
        if now >= next_alive:
            next_alive = now + keepalive_seconds
            yield ": keep-alive\n\n"
        await anyio.sleep(poll_seconds)
    yield _sse("end", {})


def _read_at(path: str | None, offset: int) -> bytes:
    """At most :data:`CHUNK` bytes of ``path`` from ``offset`` (none while it does not exist)."""
    if not path:
        return b""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(CHUNK)
    except FileNotFoundError:
        return b""
