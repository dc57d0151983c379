"""A Run's resource use: per Worker, a small series of its keeper's ``usage`` samples (CPU cores,
memory bytes, per-GPU utilisation and memory; ``rlark.bootstrap.usage``), its latest sample and
peaks, and a warning for a Worker whose GPUs sat idle while another's worked. The API (``GET
/api/v1/jobs/{name}/runs/{number}/usage``), ``rlark top JOB`` and the Job page's Resources tab
show what :func:`build_usage` builds.

The controller keeps each Worker's series in its lifecycle (``lifecycle["usage"]``) with
:func:`rlark.bootstrap.usage.add_sample` (there, below the controller, with the series' format
and bounds: at most ``MAX_POINTS`` points, evenly thinned, peaks and the latest sample kept
apart). Pure.
"""

from __future__ import annotations

from statistics import median
from typing import Any, Mapping, Sequence


#: a Worker's GPUs are "idle" when their median utilisation stayed at or under IDLE_UTIL % while
#: another Worker's median stayed at or over BUSY_UTIL % in the same window
IDLE_UTIL, BUSY_UTIL = 5.0, 30.0
#: the fewest samples of each Worker in the shared window before anything is said
MIN_WINDOW_SAMPLES = 3


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
