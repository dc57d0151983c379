"""Worker log lines for the console's Logs tab and its downloads (text and CSV).

Lines are read with :func:`rlark.services.logs.tail_lines` from the Workers that
:meth:`JobService.worker_logs` chooses, so the console shows what ``rlark logs`` prints.

Worker logs are plain files; a line has a time only when it carries one. The CSV's ``time`` is
that time (a lifecycle line's ``ts``, or a leading ``YYYY-MM-DD HH:MM:SS`` stamp as Python
logging, Ray and RLinf write), else the time of the latest earlier stamped line of the same
Worker: the moment the line was written is not before it.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import datetime, timezone
from typing import Iterable, Iterator, NamedTuple

from markupsafe import Markup

from rlark.services.logs import tail_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
EVENT_PREFIX = "RLARK_EVENT "
_STAMP = re.compile(r"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")


class LogLine(NamedTuple):
    worker: str
    role: str
    time: str | None  # ISO 8601 (UTC for lifecycle lines); None when no line so far had one
    text: str


def stamp_of(line: str) -> str | None:
    """The time a line carries, as ISO 8601 (UTC for lifecycle lines; as written otherwise)."""
    first = line[:1]
    if first == "R":
        if not line.startswith(EVENT_PREFIX):
            return None
        try:
            ts = json.loads(line[len(EVENT_PREFIX):]).get("ts")
            return datetime.fromtimestamp(float(ts), timezone.utc).isoformat(timespec="milliseconds")
        except (ValueError, TypeError, AttributeError, OverflowError, OSError):
            return None
    if not (first.isdigit() or first == "["):
        return None
    m = _STAMP.match(line)
    if m is None:
        return None
    frac = (m.group(3) or "0").ljust(3, "0")[:3]
    return f"{m.group(1)}T{m.group(2)}.{frac}"


def worker_lines(worker: dict, n: int | None) -> list[LogLine]:
    """The last ``n`` lines (all when None) of one Worker (an item of
    :meth:`JobService.worker_logs`), ANSI colours removed, each with its time."""
    lines, _ = tail_lines(worker["log"], n)
    name, role = worker["name"], worker["role"]
    out = []
    last: str | None = None
    for raw in lines:
        text = ANSI.sub("", raw) if "\x1b" in raw else raw
        last = stamp_of(text) or last
        out.append(LogLine(name, role, last, text))
    return out


def collect(workers: Iterable[dict], n: int | None, q: str | None) -> list[LogLine]:
    """Lines of every chosen Worker, in rank order then file order, filtered by ``q``
    (case-insensitive substring)."""
    out: list[LogLine] = []
    needle = q.casefold() if q else None
    for w in workers:
        lines = worker_lines(w, n)
        out.extend(lines if needle is None else (x for x in lines if needle in x.text.casefold()))
    return out


def as_html(lines: list[LogLine], prefix: bool) -> Markup:
    """The lines as ``<span class="ln">`` elements for the Logs tab (built here rather than in a
    template loop: thousands of lines render several times faster)."""
    esc = html.escape
    parts = []
    for line in lines:
        cls = "ln ln-event" if line.text.startswith(EVENT_PREFIX) else "ln"
        who = f'<span class="ln-w">[{esc(line.worker)}]</span> ' if prefix else ""
        parts.append(f'<span class="{cls}" data-worker="{esc(line.worker)}">{who}'
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


def stream(workers: list[dict], q: str | None, fmt: str) -> Iterator[str]:
    """A whole download, one Worker at a time (logs can be large): ``csv`` or ``txt``."""
    if fmt == "csv":
        yield "worker,role,time,line\n"
    for w in workers:
        lines = collect([w], None, q)
        yield as_csv(lines, header=False) if fmt == "csv" else as_text(lines, len(workers) > 1)
