"""The lifecycle channel's format: one line per event, ``RLARK_EVENT {json}``, written to the
Worker's log by its keeper alone, and the typed reports the workload may send the keeper.

Pure: the line builder (:func:`lifecycle_line`), the check of one report
(:func:`check_report`) and the rate bound (:class:`Bucket`). The server reads the lines with
``rlark.controller.lifecycle.parse_lifecycle``; tests that stand in for a Worker (kwok Pods)
build them with :func:`lifecycle_line`, so they write exactly what a keeper writes.
"""

from __future__ import annotations

import json
import re
import time

#: the prefix of a lifecycle line (the server's reader looks for it at the start of a line)
EVENT_PREFIX = "RLARK_EVENT "
EVENT_PREFIX_BYTES = EVENT_PREFIX.encode()
#: what a workload line that begins with :data:`EVENT_PREFIX` is relayed after
ESCAPE = b"(workload) "

#: lifecycle kinds only the keeper writes
KEEPER_KINDS = frozenset({"keeper", "running", "run_finished", "copying_out", "stopped", "exit",
                          "alive", "usage", "mount"})
#: fields only the keeper writes, into its own lines and the workload's ``failed`` reports: the
#: OOM kills it counted in the Worker's memory cgroup (``oom_kills``: in ``run_finished``, since
#: the run script started; in ``failed``, since the workload did) and that cgroup's limit in
#: bytes (``memory_limit``; cgroups.py)
KEEPER_FIELDS = frozenset({"oom_kills", "memory_limit"})
#: failure reasons the workload may not report: RLark gives them from what the keeper counted
#: (``rlark.controller.phases``) or did itself (a copy-mode mount's copy, ``objects.py``), never
#: from what the workload says
KEEPER_REASONS = frozenset({"OOMKilled", "MountFailed"})
#: what the workload may report, and the most bytes one report of the kind may take
REPORT_LIMITS = {
    "facts": 4 * 1024 * 1024,  # package lists, a capped diff, Hydra files (the facts modules' caps)
    "phase": 16 * 1024,
    "nodes": 1024 * 1024,
    "failed": 64 * 1024,
    "warning": 16 * 1024,
    "start_run": 1024,
}
#: reports per second the workload may send on average, and in one burst
REPORT_RATE, REPORT_BURST = 50.0, 500
#: warnings one Worker may report in all (each becomes an Event the server keeps)
MAX_WARNINGS = 20
#: facts one Worker may report in all, in bytes (the bootstrap's own come to well under 1 MiB:
#: package lists, a capped diff, capped Hydra files); the server keeps them in its database
MAX_FACTS_BYTES = 8 * 1024 * 1024
#: reason codes are CamelCase words (rlark.status.Reason's shape)
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")
_PHASE = re.compile(r"^[A-Z][A-Za-z0-9]{1,63}$")


def lifecycle_line(event: str, ts: float | None = None, **data) -> str:
    """One lifecycle line, without its newline: ``RLARK_EVENT {"ts": ..., "event": ..., ...}``.

    Args:
        event: the kind (``keeper``, ``phase``, ``facts``, ``run_finished``, ``exit``...).
        ts: Unix seconds; default now, rounded to milliseconds.
        data: the event's fields, after ``ts`` and ``event`` in this order; a value JSON cannot
            hold is written as its ``str()``.
    Returns:
        The line as the keeper writes it (and as a Worker without a keeper prints it). Pure
        but for reading the clock when ``ts`` is not given.
    """
    body = {"ts": round(time.time(), 3) if ts is None else ts, "event": event, **data}
    return EVENT_PREFIX + json.dumps(body, default=str)


#: the phases of a ``phase`` line whose moment a Worker's row keeps (:func:`moment_of`): a closed
#: set, so a workload reporting phases of its own cannot grow the row
TIMED_PHASES = frozenset({"Preparing", "Prepared", "WaitingForHead", "StartingRay", "RayStarted",
                          "Joining"})
#: the other kinds whose moment a Worker's row keeps: the keeper's start, the run script's start
#: and end (head), a failure, a stop, the Worker's exit
TIMED_KINDS = frozenset({"keeper", "running", "run_finished", "failed", "stopped", "exit"})
#: the moment of the head's first ``nodes`` line that misses no rank: the join barrier passed
ALL_JOINED = "AllJoined"


def moment_of(event: dict) -> str | None:
    """The name of the moment in a Worker's life that the lifecycle line ``event`` (parsed)
    marks, or None: a phase of :data:`TIMED_PHASES` by that name, a kind of
    :data:`TIMED_KINDS` by its kind, :data:`ALL_JOINED` for a ``nodes`` line that joined some
    ranks and misses none. The server keeps the first ``ts`` of each (a Run's timeline). Pure."""
    kind = event.get("event")
    if kind == "phase":
        phase = event.get("phase")
        return phase if isinstance(phase, str) and phase in TIMED_PHASES else None
    if kind == "nodes":
        return ALL_JOINED if event.get("joined") and not event.get("missing") else None
    return kind if isinstance(kind, str) and kind in TIMED_KINDS else None


# --- checking what the workload reports (pure) -----------------------------------------------


def _small_int(value, lo: int = 0, hi: int = 255) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _text(value, cap: int) -> bool:
    return isinstance(value, str) and len(value) <= cap


def check_report(line: bytes) -> tuple[dict | None, str]:
    """One report line of the workload -> ``(report, "")`` when it is well formed, else
    ``(None, why)``. A report is a JSON object with ``event`` one of :data:`REPORT_LIMITS`,
    within that kind's size, without the keeper's own fields (:data:`KEEPER_FIELDS`), and for
    ``failed``/``warning`` a CamelCase ``reason`` other than those RLark gives itself
    (:data:`KEEPER_REASONS`), a text ``message`` and exit statuses that are 0..255 (pure)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None, "not JSON"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    kind = obj.get("event")
    if kind not in REPORT_LIMITS:
        return None, f"kind {str(kind)[:40]!r} may not be reported by the workload"
    if len(line) > REPORT_LIMITS[kind]:
        return None, f"a {kind} report of {len(line)} bytes (at most {REPORT_LIMITS[kind]})"
    if KEEPER_FIELDS & obj.keys():
        return None, f"{kind}: {', '.join(sorted(KEEPER_FIELDS & obj.keys()))} is the keeper's to say"
    if kind in ("failed", "warning"):
        if not isinstance(obj.get("reason"), str) or not _REASON.match(obj["reason"]):
            return None, f"{kind}: reason {str(obj.get('reason'))[:40]!r} is not a reason code"
        if obj["reason"] in KEEPER_REASONS:
            return None, f"{kind}: reason {obj['reason']} is RLark's to give, not the workload's"
        if not _text(obj.get("message", ""), 8192):
            return None, f"{kind}: message is not text of at most 8192 characters"
        for key in ("status", "exit_code"):
            if key in obj and obj[key] is not None and not _small_int(obj[key]):
                return None, f"{kind}: {key} {str(obj[key])[:20]!r} is not an exit status 0..255"
        for key in ("missing_ranks", "joined_ranks"):
            if key in obj and not (isinstance(obj[key], list)
                                   and all(_small_int(r, 0, 1 << 20) for r in obj[key])):
                return None, f"{kind}: {key} is not a list of node ranks"
    elif kind == "phase":
        if not isinstance(obj.get("phase"), str) or not _PHASE.match(obj["phase"]):
            return None, f"phase: {str(obj.get('phase'))[:40]!r} is not a phase name"
    elif kind == "nodes":
        if not isinstance(obj.get("joined", []), list) or not isinstance(obj.get("missing", []), list):
            return None, "nodes: joined and missing must be lists"
    obj.pop("ts", None)  # the keeper's clock stamps every line
    return obj, ""


class Bucket:
    """A token bucket: ``take()`` is True while the average rate stays within ``rate`` per
    second with bursts of ``burst`` (``now``: a monotonic clock, injectable for tests)."""

    def __init__(self, rate: float, burst: int, now=time.monotonic):
        self.rate, self.burst, self.now = rate, float(burst), now
        self.tokens, self.at = float(burst), now()

    def take(self) -> bool:
        t = self.now()
        self.tokens = min(self.burst, self.tokens + (t - self.at) * self.rate)
        self.at = t
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
