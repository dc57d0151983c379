"""What a Worker uses: the keeper's ``usage`` lines (CPU, memory, GPUs), one every few seconds.

The keeper samples the processes below it (the workload, Ray's daemons, the run script): it is
their child subreaper (prctl ``PR_SET_CHILD_SUBREAPER``, prctl(2)), so a daemon that double-forks
away from ``ray start`` stays below it, as it does below a Pod's first process. Per sample:

* ``cpu``: cores used since the previous sample: the growth of the tree's CPU time over the
  wall time between the two. The tree's CPU time is ``utime + stime + cutime + cstime`` of each
  process below the keeper plus ``cutime + cstime`` of the keeper (proc(5), /proc/<pid>/stat
  fields 14-17, in clock ticks): a process that ended and was waited for has its time in its
  parent's ``cutime``/``cstime``, so the sum only falls when a process ends unwaited-for
  between two samples (then that sample's cpu is 0, never negative).
* ``mem``: bytes resident: the sum of the processes' RSS (field 24, in pages). Pages two
  processes share are counted twice (Ray's object store in /dev/shm counts once per process
  that maps it); it is an upper bound, said so in the API's description.
* ``gpu``: one ``{"util": percent, "memUsed": MiB, "memTotal": MiB}`` per GPU the Worker sees,
  from ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total
  --format=csv,noheader,nounits`` (NVIDIA's nvidia-smi documentation, "--query-gpu"), only the
  GPUs ``CUDA_VISIBLE_DEVICES`` names when it names indices; absent from the line when there is
  no nvidia-smi, it fails, or it sees no GPU (the API then shows no GPU, never zeros).

Cost: one read of /proc/<pid>/stat per process on the host (a PID namespace shows only the
Worker's) and, with GPUs, one nvidia-smi call (bounded by :data:`NVIDIA_SMI_TIMEOUT`; after
:data:`NVIDIA_SMI_FAILURES` failures in a row it is not called again). Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Mapping

#: seconds between two samples by default, and the least a Worker's environment may set
#: (``RLARK_USAGE_SECONDS``; 0 turns sampling off)
DEFAULT_INTERVAL, MIN_INTERVAL = 5.0, 2.0
#: seconds one nvidia-smi call may take (the keeper relays nothing meanwhile), and the failures
#: in a row after which it is given up
NVIDIA_SMI_TIMEOUT, NVIDIA_SMI_FAILURES = 2.0, 3
NVIDIA_SMI_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total",
                    "--format=csv,noheader,nounits"]


def interval_of(value: str | None) -> float | None:
    """The sampling interval in seconds from ``RLARK_USAGE_SECONDS`` text: the default when
    unset or not a number, at least :data:`MIN_INTERVAL`, None (no sampling) for 0 or less."""
    try:
        seconds = float(value) if value else DEFAULT_INTERVAL
    except ValueError:
        seconds = DEFAULT_INTERVAL
    if seconds != seconds:  # NaN
        seconds = DEFAULT_INTERVAL
    return None if seconds <= 0 else max(MIN_INTERVAL, seconds)


@dataclass(frozen=True)
class ProcStat:
    """Of one /proc/<pid>/stat: the parent, own CPU ticks (utime+stime), waited-for children's
    ticks (cutime+cstime) and resident pages."""

    pid: int
    ppid: int
    ticks: int
    child_ticks: int
    rss_pages: int


def parse_stat(text: str) -> ProcStat | None:
    """One /proc/<pid>/stat text -> :class:`ProcStat` (proc(5): the command is in parentheses
    and may hold spaces, so fields are counted after the last ``)``; ppid is field 4, utime..
    cstime 14-17, rss 24); None when it is not such a text. Pure."""
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 1 or close_at < open_at:
        return None
    rest = text[close_at + 1:].split()
    try:
        pid = int(text[:open_at])
        # rest[0] is field 3 (state)
        ppid, ut, st, cut, cst = (int(rest[i]) for i in (1, 11, 12, 13, 14))
        rss = int(rest[21])
    except (ValueError, IndexError):
        return None
    return ProcStat(pid, ppid, ut + st, cut + cst, max(rss, 0))


def tree_totals(stats: list[ProcStat], root: int) -> tuple[int, int, int]:
    """``(ticks, rss_pages, processes)`` of the processes below ``root`` (not ``root`` itself,
    whose own ticks are the keeper's) plus ``root``'s waited-for children's ticks. Pure."""
    children: dict[int, list[ProcStat]] = {}
    by_pid = {}
    for p in stats:
        children.setdefault(p.ppid, []).append(p)
        by_pid[p.pid] = p
    ticks = by_pid[root].child_ticks if root in by_pid else 0
    rss = count = 0
    todo = list(children.get(root, []))
    seen = {root}
    while todo:
        p = todo.pop()
        if p.pid in seen:
            continue
        seen.add(p.pid)
        ticks += p.ticks + p.child_ticks
        rss += p.rss_pages
        count += 1
        todo.extend(children.get(p.pid, []))
    return ticks, rss, count


def parse_nvidia_smi(text: str, visible: str | None = None) -> list[dict]:
    """nvidia-smi's ``index, utilization.gpu, memory.used, memory.total`` CSV (no header, no
    units) -> ``[{"util": %, "memUsed": MiB, "memTotal": MiB}, ...]`` in its order; a value it
    cannot give (``[N/A]``, ``[Not Supported]``) is None. ``visible``: ``CUDA_VISIBLE_DEVICES``;
    when it lists indices only those GPUs are kept (UUIDs or MIG names: all are kept). Lines
    that are not four fields are skipped. Pure."""
    keep: set[int] | None = None
    if visible is not None and visible.strip():
        parts = [v.strip() for v in visible.split(",") if v.strip()]
        if all(v.isdigit() for v in parts):
            keep = {int(v) for v in parts}
    out = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        if keep is not None and int(fields[0]) not in keep:
            continue

        def num(v: str) -> float | None:
            try:
                return float(v)
            except ValueError:
                return None

        out.append({"util": num(fields[1]), "memUsed": num(fields[2]), "memTotal": num(fields[3])})
    return out


def usage_fields(ticks_then: int, ticks_now: int, seconds: float, hz: int, rss_pages: int,
                 page_size: int, gpus: list[dict] | None) -> dict:
    """The fields of one ``usage`` line: ``cpu`` (cores, 3 decimals, never below 0), ``mem``
    (bytes), ``gpu`` only when ``gpus`` lists some. Pure."""
    cores = max(0, ticks_now - ticks_then) / hz / seconds if seconds > 0 else 0.0
    out: dict = {"cpu": round(cores, 3), "mem": rss_pages * page_size}
    if gpus:
        out["gpu"] = gpus
    return out


def read_stats(proc: str = "/proc") -> list[ProcStat]:
    """Every process's :class:`ProcStat` under ``proc`` (those that end meanwhile are left out)."""
    out: list[ProcStat] = []
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                st = parse_stat(f.read())
        except OSError:
            continue
        if st is not None:
            out.append(st)
    return out


class Sampler:
    """The keeper's sampler: :meth:`due` says whether a sample is due at monotonic ``now``;
    :meth:`sample` returns the next ``usage`` line's fields (None for the first call, which only
    sets the baseline)."""

    def __init__(self, interval: float, root: int, visible_gpus: str | None = None,
                 smi: str | None = None, now: float | None = None):
        """``root``: the keeper's pid; ``smi``: nvidia-smi's path (None: look it up on PATH)."""
        self.interval, self.root, self.visible = interval, root, visible_gpus
        self.smi = smi if smi is not None else shutil.which("nvidia-smi")
        self.smi_failures = 0
        self.hz = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.next_at = (time.monotonic() if now is None else now)
        self.last: tuple[float, int] | None = None

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def _gpus(self) -> list[dict] | None:
        if not self.smi or self.smi_failures >= NVIDIA_SMI_FAILURES:
            return None
        try:
            done = subprocess.run([self.smi, *NVIDIA_SMI_QUERY], capture_output=True,
                                  timeout=NVIDIA_SMI_TIMEOUT, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            self.smi_failures += 1
            return None
        if done.returncode != 0:
            self.smi_failures += 1
            return None
        self.smi_failures = 0
        return parse_nvidia_smi(done.stdout.decode("ascii", "replace"), self.visible)

    def sample(self, now: float) -> dict | None:
        self.next_at = now + self.interval
        ticks, rss, _count = tree_totals(read_stats(), self.root)
        last, self.last = self.last, (now, ticks)
        if last is None:
            return None
        return usage_fields(last[1], ticks, now - last[0], self.hz, rss, self.page, self._gpus())


# --- the series the server keeps (pure; the controller's, kept here below it) ------------------
# A Worker's ``lifecycle["usage"]``: at most MAX_POINTS points; when full, every other point is
# dropped and from then on only every ``stride``-th sample is kept (the stride doubles each
# time), so a week-long Run's row stays as small as a minute-long one's, evenly spread over its
# life. Peaks and the latest sample are kept apart, over every sample. A point is
# ``[ts, cpu, mem, gpus]``: Unix seconds (the Worker's clock), cores, bytes, and
# ``[[util %, memUsed MiB, memTotal MiB], ...]`` or None when the Worker saw no GPU.

#: the most points one Worker's series keeps
MAX_POINTS = 240

def _num(v: Any, lo: float = 0.0, hi: float = 1e15) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v) if lo <= v <= hi else None


def point_of(event: Mapping[str, Any]) -> list | None:
    """A ``usage`` lifecycle line (parsed) as a series point, None when it is not one (pure)."""
    ts, cpu, mem = _num(event.get("ts"), 0, 1e11), _num(event.get("cpu"), 0, 1e5), \
        _num(event.get("mem"), 0, 1 << 62)
    if ts is None or cpu is None or mem is None:
        return None
    gpus = None
    raw = event.get("gpu")
    if isinstance(raw, list) and raw:
        gpus = [[_num(g.get("util"), 0, 100), _num(g.get("memUsed")), _num(g.get("memTotal"))]
                for g in raw[:64] if isinstance(g, dict)] or None
    return [round(ts, 3), round(cpu, 3), int(mem), gpus]


def check_usage(event: Mapping[str, Any]) -> bool:
    """Whether a ``usage`` line has the shape :func:`point_of` reads (the controller's check)."""
    return point_of(event) is not None and (
        "gpu" not in event or (isinstance(event["gpu"], list) and len(event["gpu"]) <= 64))


def add_sample(series: Mapping[str, Any] | None, event: Mapping[str, Any]) -> dict:
    """``series`` (a Worker's ``lifecycle["usage"]``: ``points``, ``stride``, ``seen``,
    ``peak``, ``last``: the latest point; None: empty) with the ``usage`` line ``event`` added, as a new dict; unchanged
    when the line is not one. Bounded by :data:`MAX_POINTS` (module docstring). Pure."""
    old = series or {}
    points: list[list] = list(old.get("points") or [])
    stride, seen = int(old.get("stride") or 1), int(old.get("seen") or 0)
    peak: dict[str, Any] = dict(old.get("peak") or {})
    point = point_of(event)
    if point is None:
        return {"points": points, "stride": stride, "seen": seen, "peak": peak,
                "last": old.get("last")}
    peak["cpu"] = max(peak.get("cpu", 0.0), point[1])
    peak["mem"] = max(peak.get("mem", 0), point[2])
    if point[3]:
        peak["gpuUtil"] = max([peak.get("gpuUtil", 0.0)] + [g[0] for g in point[3] if g[0] is not None])
        peak["gpuMem"] = max([peak.get("gpuMem", 0.0)] + [g[1] for g in point[3] if g[1] is not None])
    seen += 1
    if (seen - 1) % stride == 0:
        points.append(point)
        if len(points) >= MAX_POINTS:
            points = points[::2]
            stride *= 2
    # the latest sample is kept apart too: thinning may drop it from the points
    return {"points": points, "stride": stride, "seen": seen, "peak": peak, "last": point}


