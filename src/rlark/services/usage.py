"""A Run's resource use: per Worker, a small series of its keeper's ``usage`` samples (CPU cores,
memory bytes, per-GPU utilisation and memory; ``rlark.bootstrap.usage``), its latest sample and
peaks, and a warning for a Worker whose GPUs sat idle while another's worked. The API (``GET
/api/v1/jobs/{name}/runs/{number}/usage``), ``rlark top JOB`` and the Job page's Resources tab
show what :func:`build_usage` builds.

The controller keeps each Worker's series in its lifecycle (``lifecycle["usage"]``) with
:func:`add_sample`: at most :data:`MAX_POINTS` points; when full, every other point is dropped
and from then on only every ``stride``-th sample is kept (the stride doubles each time), so a
week-long Run's row stays as small as a minute-long one's, evenly spread over its life. Peaks
are kept apart, over every sample, so thinning never lowers them.

A point is ``[ts, cpu, mem, gpus]``: Unix seconds (the Worker's clock), cores, bytes, and
``[[util %, memUsed MiB, memTotal MiB], ...]`` or None when the Worker saw no GPU. Pure.
"""

from __future__ import annotations

from statistics import median
from typing import Any, Mapping, Sequence

#: the most points one Worker's series keeps
MAX_POINTS = 240
#: a Worker's GPUs are "idle" when their median utilisation stayed at or under IDLE_UTIL % while
#: another Worker's median stayed at or over BUSY_UTIL % in the same window
IDLE_UTIL, BUSY_UTIL = 5.0, 30.0
#: the fewest samples of each Worker in the shared window before anything is said
MIN_WINDOW_SAMPLES = 3


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


def _gpu_util(point: Sequence) -> float | None:
    utils = [g[0] for g in point[3] or [] if g[0] is not None]
    return sum(utils) / len(utils) if utils else None


def idle_gpu_warnings(series: Mapping[str, Sequence[Sequence]]) -> list[dict]:
    """Workers whose GPUs sat idle while another Worker's worked: over the window all Workers
    with GPU samples share (the latest first sample to the earliest last one), a Worker whose
    median GPU utilisation (mean over its GPUs per sample) was at most :data:`IDLE_UTIL` %
    while the busiest one's was at least :data:`BUSY_UTIL` %. ``series``: Worker name -> its
    points. Returns ``[{"worker", "medianUtil", "busiest", "busiestUtil", "from", "to",
    "message"}]``, by name; none when fewer than two Workers have GPUs or a Worker has under
    :data:`MIN_WINDOW_SAMPLES` samples in the window. Pure."""
    gpu = {name: [p for p in pts if _gpu_util(p) is not None] for name, pts in series.items()}
    gpu = {name: pts for name, pts in gpu.items() if pts}
    if len(gpu) < 2:
        return []
    start = max(pts[0][0] for pts in gpu.values())
    end = min(pts[-1][0] for pts in gpu.values())
    if end <= start:
        return []
    medians = {}
    for name, pts in gpu.items():
        window = [u for p in pts if start <= p[0] <= end and (u := _gpu_util(p)) is not None]
        if len(window) < MIN_WINDOW_SAMPLES:
            return []
        medians[name] = median(window)
    busiest = max(sorted(medians), key=lambda n: medians[n])
    if medians[busiest] < BUSY_UTIL:
        return []
    return [{"worker": name, "medianUtil": round(m, 1), "busiest": busiest,
             "busiestUtil": round(medians[busiest], 1), "from": start, "to": end,
             "message": f"{name}'s GPUs were idle (median {m:.0f}% busy) while {busiest}'s were "
                        f"{medians[busiest]:.0f}% busy, over {end - start:.0f} s"}
            for name, m in sorted(medians.items()) if m <= IDLE_UTIL]


def build_usage(number: int, workers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A Run's usage view: ``{"run", "workers": [{"name", "role", "rank", "points",
    "latest", "peak", "gpus"}], "idleGpus": [...]}`` from ``workers`` (``name``, ``role``,
    ``rank``, ``usage``: the stored series or None), rank order. ``latest``: the last point
    as ``{"ts", "cpu", "mem", "gpu"}`` (None before the first sample); ``gpus``: how many GPUs
    the Worker saw (0: none, shown as absent). Pure."""
    rows = []
    for w in sorted(workers, key=lambda w: (w["rank"], w["name"])):
        stored = w.get("usage") or {}
        points = [list(p) for p in stored.get("points") or [] if isinstance(p, list) and len(p) == 4]
        last = stored.get("last") if isinstance(stored.get("last"), list) else None
        last = last if last is not None and len(last) == 4 else (points[-1] if points else None)
        rows.append({
            "name": w["name"], "role": w["role"], "rank": w["rank"], "points": points,
            "latest": None if last is None else {
                "ts": last[0], "cpu": last[1], "mem": last[2],
                "gpu": None if not last[3] else [
                    {"util": g[0], "memUsed": g[1], "memTotal": g[2]} for g in last[3]]},
            "peak": dict(stored.get("peak") or {}),
            "gpus": max((len(p[3]) for p in points if p[3]), default=0)})
    return {"run": number, "workers": rows,
            "idleGpus": idle_gpu_warnings({r["name"]: r["points"] for r in rows})}
