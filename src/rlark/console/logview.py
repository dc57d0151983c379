"""Worker log lines for the console's Logs tab and its downloads (text and CSV).

Lines are read with :func:`rlark.services.logs.tail_lines` from the Workers that
:meth:`JobService.worker_logs` chooses, so the console shows what ``rlark logs`` prints: RLark's
lifecycle lines (``RLARK_EVENT {...}``) only when asked for, and never with the Run's event
token (:func:`rlark.services.logs.redact`).

Worker logs are plain files; a line has a time only when it carries one. A line's ``time`` is
that time (a lifecycle line's ``ts``, or a leading ``YYYY-MM-DD HH:MM:SS`` stamp as Python
logging, Ray and RLinf write), else the time of the latest earlier stamped line of the same
Worker (lifecycle lines count, shown or not): the moment the line was written is not before it.
Every time is given in one form, ISO 8601 in UTC with its zone (``2026-01-02T03:04:05.123+00:00``);
a stamp written without a zone is taken as this machine's local time (Ray and Python logging
write local time; local Workers run here, and Kubernetes nodes usually keep UTC, as servers do).

``order="time"`` merges the chosen Workers' lines by that time (each Worker's own order kept),
each line named by its Worker.

The Logs tab shows the last lines of each Worker (:func:`collect`); a download
(:func:`stream`) is every line of every chosen Worker, read from the files in bounded chunks and
merged as it goes (``heapq.merge`` over one line iterator per Worker), so its memory does not
grow with the size of the logs. Where RLark leaves something out it says so in a line of its
own (:func:`rlark.services.logs.left_out_mark`) or at the cut
(:data:`rlark.loglines.CUT_MARK`).
"""

from __future__ import annotations

import csv
import heapq
import html
import io
import itertools
import json
import re
from datetime import datetime, timezone
from typing import Iterable, Iterator, NamedTuple

from markupsafe import Markup

from rlark.services.logs import CHUNK, is_lifecycle, is_user_line, read_lines, redact, tail_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
EVENT_PREFIX = "RLARK_EVENT "
_STAMP = re.compile(r"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")
#: lines the Logs tab marks as errors: Python tracebacks and exception lines, log records of
#: level ERROR/FATAL/CRITICAL, and a command's non-zero exit (console.js has the same pattern)
ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b(?:ERROR|FATAL|CRITICAL)\b"
    r"|^\s*[\w.]*(?:Error|Exception)\b(?::|$)|exited with code [1-9]")
ORDERS = ("worker", "time")
#: what a download holds in read-ahead across all its Workers (each reads ``this / Workers``
#: bytes at a time, between 4 KiB and 64 KiB)
DOWNLOAD_READ_AHEAD = 4 * 1024 * 1024
#: a download is sent in pieces of about this many characters
DOWNLOAD_PIECE = 64 * 1024


class LogLine(NamedTuple):
    worker: str
    role: str
    time: str | None  # ISO 8601 in UTC (+00:00); None when no line so far had one
    text: str


def _utc(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def stamp_of(line: str) -> str | None:
    """The time a line carries, as ISO 8601 in UTC with its zone (a stamp without a zone is
    taken as this machine's local time)."""
    first = line[:1]
    if first == "R":
        if not line.startswith(EVENT_PREFIX):
            return None
        try:
            ts = json.loads(line[len(EVENT_PREFIX):]).get("ts")
            return _utc(datetime.fromtimestamp(float(ts), timezone.utc))
        except (ValueError, TypeError, AttributeError, OverflowError, OSError):
            return None
    if not (first.isdigit() or first == "["):
        return None
    m = _STAMP.match(line)
    if m is None:
        return None
    frac = (m.group(3) or "0").ljust(6, "0")[:6]
    try:
        local = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}.{frac}")
        return _utc(local.astimezone())  # naive: this machine's local time
    except (ValueError, OverflowError, OSError):
        return None


def is_error(text: str) -> bool:
    """Whether a log line reports an error (:data:`ERROR_LINE`)."""
    return ERROR_LINE.search(text) is not None


def worker_lines(worker: dict, n: int | None, lifecycle: bool = False) -> list[LogLine]:
    """The last ``n`` lines (all when None) of one Worker (an item of
    :meth:`JobService.worker_logs`), ANSI colours removed, each with its time. Lifecycle lines
    only with ``lifecycle`` (``n`` counts the lines shown), without the Run's event token; the
    values of the Job's secrets masked (the item's ``mask``)."""
    lines, _ = tail_lines(worker["log"], n, None if lifecycle else is_user_line, drop=False)
    return list(_with_times(worker, lines, lifecycle))


def _with_times(worker: dict, raw_lines: Iterable[str], lifecycle: bool) -> Iterator[LogLine]:
    """One Worker's raw lines as :class:`LogLine` (see :func:`worker_lines`)."""
    name, role = worker["name"], worker["role"]
    mask = worker.get("mask")
    last: str | None = None
    for raw in raw_lines:
        text = ANSI.sub("", raw) if "\x1b" in raw else raw
        last = stamp_of(text) or last
        if is_lifecycle(text) and not lifecycle:
            continue
        yield LogLine(name, role, last, redact(text, mask))


def every_line(worker: dict, lifecycle: bool = False, chunk: int = CHUNK) -> Iterator[LogLine]:
    """Every line of one Worker's log, first to last, as :func:`worker_lines` gives the last
    ones, read ``chunk`` bytes at a time (:func:`rlark.services.logs.read_lines`)."""
    return _with_times(worker, read_lines(worker["log"], chunk), lifecycle)


def _by_time(lines: Iterable[LogLine]) -> Iterator[tuple[str, LogLine]]:
    """A Worker's lines keyed for merging: the latest time so far (never going back)."""
    key = ""
    for line in lines:
        key = max(key, line.time or "")
        yield key, line


def collect(workers: Iterable[dict], n: int | None, q: str | None, lifecycle: bool = False,
            order: str = "worker") -> list[LogLine]:
    """Lines of every chosen Worker filtered by ``q`` (case-insensitive substring): in rank
    order then file order, or (``order="time"``) merged by time."""
    per_worker = []
    needle = q.casefold() if q else None
    for w in workers:
        lines = worker_lines(w, n, lifecycle)
        per_worker.append(lines if needle is None
                          else [x for x in lines if needle in x.text.casefold()])
    if order == "time":
        return [line for _, line in heapq.merge(*(_by_time(ls) for ls in per_worker),
                                                key=lambda item: item[0])]
    return [line for lines in per_worker for line in lines]


def as_html(lines: list[LogLine], prefix: bool) -> Markup:
    """The lines as ``<span class="ln">`` elements for the Logs tab (built here rather than in a
    template loop: thousands of lines render several times faster). Error lines
    (:func:`is_error`) get ``ln-err``, lifecycle lines ``ln-event``."""
    esc = html.escape
    parts = []
    for line in lines:
        cls = "ln ln-event" if line.text.startswith(EVENT_PREFIX) else (
            "ln ln-err" if is_error(line.text) else "ln")
        who = f'<span class="ln-w">[{esc(line.worker)}]</span> ' if prefix else ""
        when = f' data-time="{esc(line.time)}"' if line.time else ""
        parts.append(f'<span class="{cls}" data-worker="{esc(line.worker)}"{when}>{who}'
                     f"{esc(line.text, quote=False)}\n</span>")
    return Markup("".join(parts))


def as_text(lines: list[LogLine], prefix: bool) -> str:
    """Plain text as ``rlark logs`` prints it (``[worker] line`` when several Workers)."""
    if prefix:
        return "".join(f"[{line.worker}] {line.text}\n" for line in lines)
    return "".join(line.text + "\n" for line in lines)


def as_csv(lines: list[LogLine], header: bool = True) -> str:
    """``worker,role,time,line`` rows (with a header line unless ``header`` is false)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if header:
        writer.writerow(["worker", "role", "time", "line"])
    writer.writerows((w, r, t or "", x) for w, r, t, x in lines)
    return buf.getvalue()


def stream(workers: list[dict], q: str | None, fmt: str, lifecycle: bool = False,
           order: str = "worker") -> Iterator[str]:
    """A whole download (``csv`` or ``txt``): every line of each Worker in turn, or of all of
    them merged by time (``order="time"``), filtered by ``q`` as :func:`collect` does; in pieces
    of about :data:`DOWNLOAD_PIECE` characters. Memory stays bounded whatever the logs' sizes:
    :data:`DOWNLOAD_READ_AHEAD` of read-ahead, one pending line per Worker while merging
    (lines are cut at :data:`rlark.loglines.MAX_LINE_BYTES`), and one piece."""
    if fmt == "csv":
        yield "worker,role,time,line\n"
    prefix = len(workers) > 1
    chunk = max(4096, min(CHUNK, DOWNLOAD_READ_AHEAD // max(1, len(workers))))
    needle = q.casefold() if q else None

    def lines_of(w: dict) -> Iterator[LogLine]:
        lines = every_line(w, lifecycle, chunk)
        return lines if needle is None else (x for x in lines if needle in x.text.casefold())

    if order == "time":
        merged = heapq.merge(*(_by_time(lines_of(w)) for w in workers), key=lambda item: item[0])
        lines: Iterator[LogLine] = (line for _, line in merged)
    else:
        lines = itertools.chain.from_iterable(lines_of(w) for w in workers)
    piece: list[LogLine] = []
    size = 0
    for line in lines:
        piece.append(line)
        size += len(line.text) + 40
        if size >= DOWNLOAD_PIECE:
            yield as_csv(piece, header=False) if fmt == "csv" else as_text(piece, prefix)
            piece, size = [], 0
    if piece:
        yield as_csv(piece, header=False) if fmt == "csv" else as_text(piece, prefix)
