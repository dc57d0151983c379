"""Reading a Worker's log: the bootstrap's lifecycle lines (``RLARK_EVENT {json}``), and the
last lines a person needs to see why a Worker failed.

Pure: given bytes and an offset, return the events in the complete lines and the new offset, so
every runtime (log files, Pod logs) reads them the same way; :func:`tail_lines` likewise picks the
explaining lines out of a log's end. Only :func:`read_new_events` and :func:`read_tail` open files.
"""

from __future__ import annotations

import json
import math
import os
import re

from rlark.bootstrap.lifecycle import ESCAPE, EVENT_PREFIX, moment_of
from rlark.loglines import MAX_LINE_BYTES
from rlark.bootstrap.usage import check_usage

_PREFIX = EVENT_PREFIX.encode()


def parse_lifecycle(chunk: bytes, offset: int, token: str | None = None) -> tuple[list[dict], int]:
    """Events in the complete lines of ``chunk`` (which starts at byte ``offset`` of the log).

    Returns ``(events, new_offset)``; a trailing partial line is left for the next call. Lines
    that merely contain the prefix inside other output, or carry broken JSON, are skipped; so are
    lines without this Run's event ``token`` when one is given (printed by the run script, not
    by the bootstrap).
    """
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    events = []
    # lines end at "\n" alone, as the keeper relays them: splitlines() would also cut at "\r"
    # (and other characters), so "x\rRLARK_EVENT {...}" printed by the workload would read as
    # a lifecycle line of its own (found by an attack pass)
    for line in chunk[:end].split(b"\n"):
        if not line.startswith(_PREFIX):
            continue
        try:
            event = json.loads(line[len(_PREFIX):])
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event and (token is None or event.get("tok") == token):
            event.pop("tok", None)  # the Run's secret: checked here, kept nowhere a user reads
            events.append(event)
    return events, offset + end + 1


def read_new_events(path: str, offset: int, token: str | None = None,
                    max_bytes: int = 8 * 1024 * 1024, to_end: bool = False) -> tuple[list[dict], int]:
    """Read at most ``max_bytes`` of ``path`` from ``offset`` (everything up to the end of the
    file with ``to_end``, for a Worker that has exited) and parse lifecycle lines.

    A missing file yields no events. Memory stays bounded by ``max_bytes`` whatever the Worker
    writes: a line longer than :data:`rlark.loglines.MAX_LINE_BYTES` cannot be a lifecycle line
    and is skipped once that much of it is there, without waiting for its newline; reading on
    from inside such a line (``offset`` not at a line's start), its rest up to the newline is
    skipped too, so the tail of a long line is never taken for a line of its own.
    """
    events: list[dict] = []
    try:
        if not to_end and os.stat(path).st_size <= offset:
            return events, offset  # nothing new: one stat, not an open and a read (every pass)
        with open(path, "rb") as f:
            while True:
                start = max(0, offset - 1)  # one byte before: does offset start a line?
                f.seek(start)
                chunk = f.read(max_bytes + (offset - start))
                read_all = len(chunk) < max_bytes + (offset - start)
                if offset > start:
                    inside, chunk = chunk[:1] != b"\n", chunk[1:]
                    if inside:  # the rest of a line too long to read: skip it
                        nl = chunk.find(b"\n")
                        if nl < 0:
                            offset += len(chunk)
                            if read_all or not to_end:
                                return events, offset
                            continue
                        offset, chunk = offset + nl + 1, chunk[nl + 1:]
                found, new_offset = parse_lifecycle(chunk, offset, token)
                events.extend(found)
                if len(chunk) - (new_offset - offset) > MAX_LINE_BYTES:
                    new_offset = offset + len(chunk)  # one enormous line: not ours, skip it
                offset = new_offset
                if not to_end or read_all:
                    return events, offset
    except FileNotFoundError:
        return events, offset


def _int(value, lo: int = 0, hi: int = 255) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _opt_text(ev: dict, key: str, cap: int = 16384) -> bool:
    return key not in ev or ev[key] is None or (isinstance(ev[key], str) and len(ev[key]) <= cap)


def _status_fields(ev: dict, *keys: str) -> bool:
    return all(k not in ev or ev[k] is None or _int(ev[k]) for k in keys)


def _oom_fields(ev: dict) -> bool:
    # what a keeper counted in the Worker's memory cgroup (bootstrap/keeper.py): OOM kills and
    # the cgroup's limit in bytes
    return (("oom_kills" not in ev or _int(ev["oom_kills"], 1, 1 << 31))
            and ("memory_limit" not in ev or _int(ev["memory_limit"], 1, 1 << 63)))


#: each lifecycle kind RLark reads, and what its line must hold (a line that does not is
#: dropped: a Worker's log is the workload's to write where the channel is not the keeper's)
_KINDS = {
    "keeper": lambda e: isinstance(e.get("protected"), bool) and _int(e.get("uid"), 0, 2 ** 32),
    "facts": lambda e: True,
    "phase": lambda e: isinstance(e.get("phase"), str) and len(e["phase"]) <= 64,
    "nodes": lambda e: (isinstance(e.get("joined", []), list)
                        and all(isinstance(n, dict) and _int(n.get("node_rank"), 0, 1 << 20)
                                for n in e.get("joined", []))
                        and isinstance(e.get("missing", []), list)
                        and all(_int(r, 0, 1 << 20) for r in e.get("missing", []))),
    "failed": lambda e: (isinstance(e.get("reason"), str) and len(e["reason"]) <= 64
                         and _opt_text(e, "message") and _status_fields(e, "status", "exit_code")
                         and all(_int(r, 0, 1 << 20) for r in e.get("missing_ranks") or [])
                         and _oom_fields(e)),
    "warning": lambda e: (isinstance(e.get("reason"), str) and len(e["reason"]) <= 64
                          and _opt_text(e, "message")),
    "running": lambda e: "pid" not in e or _int(e["pid"], 0, 1 << 31),
    "run_finished": lambda e: _int(e.get("exit_code")) and _oom_fields(e),
    # the head's run script ended by itself; its keeper copies its mounts out before it says
    # run_finished (bootstrap/keeper.py)
    "copying_out": lambda e: (isinstance(e.get("run_ended"), (int, float))
                              and not isinstance(e.get("run_ended"), bool)),
    "exit": lambda e: _int(e.get("code")),
    "stopped": lambda e: True,
    "alive": lambda e: isinstance(e.get("stopped", []), list),
    "usage": check_usage,
    # an object-storage mount: a copy-mode copy (bootstrap/objects.py), or a FUSE-mode mount
    # made or undone (bootstrap/fuse.py)
    "mount": lambda e: (isinstance(e.get("name"), str) and len(e["name"]) <= 253
                        and e.get("requested", "auto") in ("auto", "copy", "fuse")
                        and _opt_text(e, "why")
                        and ((e.get("mode") == "copy" and e.get("direction") in ("in", "out")
                              and _int(e.get("files"), 0, 1 << 40)
                              and _int(e.get("bytes"), 0, 1 << 62))
                             or (e.get("mode") == "fuse"
                                 and e.get("direction") in ("mount", "unmount")))),
}


def check_event(event: dict) -> dict | None:
    """``event`` when it is a lifecycle line of a kind RLark reads, with the fields its kind
    needs of the right types (exit statuses 0..255, text within bounds, node ranks as
    integers, OOM kill counts and memory limits as positive integers) and a numeric ``ts``;
    None otherwise (pure)."""
    kind = event.get("event")
    check = _KINDS.get(kind) if isinstance(kind, str) else None
    if check is None or not isinstance(event.get("ts", 0.0), (int, float)):
        return None
    try:
        return event if check(event) else None
    except (TypeError, AttributeError):
        return None


def note_moment(life: dict, event: dict) -> None:
    """Keep in a Worker's lifecycle (``life["times"]``: moment name -> Unix seconds) the line's
    own ``ts`` for the moment ``event`` marks (:func:`rlark.bootstrap.lifecycle.moment_of`),
    the first of each only: a Run's timeline is drawn from them
    (:mod:`rlark.services.timeline`). A line without a finite numeric ``ts`` marks nothing.
    Updates ``life`` in place, with a new ``times`` dict (so a row's JSON column sees the
    change); no I/O."""
    name = moment_of(event)
    ts = event.get("ts")
    if name is None or isinstance(ts, bool) or not isinstance(ts, (int, float)) \
            or not math.isfinite(ts):
        return
    times = life.get("times") or {}
    if name not in times:
        life["times"] = {**times, name: float(ts)}


#: what a failure message carries of the failing Worker's log: at most this many lines and bytes
TAIL_MAX_LINES = 20
TAIL_MAX_BYTES = 4096
#: how much of a log's end :func:`read_tail` reads to find them
TAIL_WINDOW_BYTES = 64 * 1024

#: ``ray start``'s own progress lines (Ray's CLI logger: ``2026-05-09 07:29:33,123<TAB>INFO
#: scripts.py:1043 -- Local node IP: ...``, ``SUCC ... Ray runtime started.``, the "Next steps"
#: banner; Ray 2.47-2.60). Its WARNING and ERROR lines, its C++ components' ``[... W ...]``
#: lines and Python tracebacks stay: they are what explains a failed ``ray start``.
_RAY_PROGRESS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\t(?:INFO|SUCC|DEBUG) \S+\.py:\d+ -- ")
#: the warning Ray prints on every head start (Ray 2.60: token authentication is off); it would
#: push the lines that matter out of a short tail
_RAY_STARTUP_NOTICE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+\tWARNING authentication_token_setup\.py:")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


#: Ray's periodic debug state of a raylet or the GCS (``[state-dump] NodeManager: ...``, dozens of
#: lines at a time, printed by Ray's components into what `ray start --block` shows): kept in
#: the logs, never in a failure's tail
_RAY_STATE_DUMP = re.compile(r"\[state-dump\]")
#: a workload line that looked like a lifecycle line, as the keeper relays it (lifecycle.ESCAPE)
_ESCAPED_EVENT = ESCAPE.decode() + EVENT_PREFIX


def is_noise(line: str) -> bool:
    """A line that never explains a failure: a lifecycle line (any, with or without this Run's
    token, or one the workload printed, relayed escaped), ``ray start``'s progress output,
    Ray's ``[state-dump]`` debug state, or a blank line."""
    return (not line.strip() or line.startswith((EVENT_PREFIX, _ESCAPED_EVENT))
            or bool(_RAY_PROGRESS.match(line)) or bool(_RAY_STARTUP_NOTICE.match(line))
            or bool(_RAY_STATE_DUMP.search(line)))


def tail_lines(data: bytes, max_lines: int = TAIL_MAX_LINES, max_bytes: int = TAIL_MAX_BYTES,
               partial_first: bool = False) -> list[str]:
    """The last lines of a log that explain what its Worker did: :func:`is_noise` lines and
    terminal colour codes dropped, at most ``max_lines`` lines and ``max_bytes`` bytes (UTF-8)
    in all; a single longer line keeps its end, after ``…``.

    ``partial_first``: ``data`` starts inside a line (a window of a larger file), so its first
    line is incomplete and dropped.
    """
    lines = data.decode("utf-8", errors="replace").split("\n")
    if partial_first and lines:
        lines = lines[1:]
    kept: list[str] = []
    for line in reversed(lines):
        line = _ANSI.sub("", line).rstrip()
        if is_noise(line):
            continue
        kept.append(line)
        if len(kept) == max_lines:
            break
    kept.reverse()
    size = sum(len(x.encode()) + 1 for x in kept)
    while len(kept) > 1 and size > max_bytes:
        size -= len(kept.pop(0).encode()) + 1
    if kept and len(kept[0].encode()) > max_bytes:
        end = kept[0].encode()[-(max_bytes - 4):]
        kept[0] = "…" + end.decode("utf-8", errors="ignore")
    return kept


def read_tail(path: str | None, max_lines: int = TAIL_MAX_LINES,
              max_bytes: int = TAIL_MAX_BYTES) -> list[str]:
    """:func:`tail_lines` of the last :data:`TAIL_WINDOW_BYTES` of the log at ``path`` (nothing
    for a missing or unreadable log)."""
    if not path:
        return []
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_WINDOW_BYTES)
            f.seek(start)
            data = f.read(TAIL_WINDOW_BYTES)
    except OSError:
        return []
    return tail_lines(data, max_lines, max_bytes, partial_first=start > 0)


def with_tail(message: str, worker: str, lines: list[str]) -> str:
    """A failure message followed by the failing Worker's last lines (unchanged without any)."""
    if not lines:
        return message
    return f"{message}\nlast lines of {worker}:\n" + "\n".join(lines)


def merge_facts(facts: dict | None, event: dict) -> dict:
    """A Worker's facts with those of one ``facts`` lifecycle line added (later lines win key by
    key: the bootstrap reports what it knows at start, then the record facts after its prepare
    script, then what Ray and the run script left). Pure."""
    return {**(facts or {}), **{k: v for k, v in event.items() if k not in ("event", "ts")}}


def node_table_facts(node: dict) -> dict:
    """What the head's node table said of one Worker's Ray node (an entry of a ``nodes``
    lifecycle line): its labels (``rlark.io/node-rank`` is the node rank as Ray itself reports
    it: GcsNodeInfo.labels, set by ``ray start --labels``) and the total resources Ray counts on
    it (GcsNodeInfo.resources_total: ``CPU``, ``GPU``, ``memory`` in bytes, custom names). Pure."""
    return {"labels": dict(node.get("labels") or {}),
            "resources": dict(node.get("resources") or {})}
