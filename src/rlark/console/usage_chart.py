"""The console's Resources tab: per Worker, server-side SVG charts (template ``_usage.html``,
drawn with :func:`rlark.console.curves_chart.chart`'s geometry) of its CPU cores, memory and,
when it saw GPUs, their mean utilisation and memory, seconds since its first sample on the x
axis, from :func:`rlark.services.usage.build_usage`. No JavaScript. Pure.
"""

from __future__ import annotations

from typing import Any

from rlark.console.curves_chart import chart

GIB = 1024 ** 3
#: the metrics a Worker's charts show (its GPU ones only when it saw GPUs); ``us.<metric>``
#: in the catalogs names each
METRICS = ("cpu", "memory", "gpu-util", "gpu-memory")
#: Workers charted at most (a large Run's others are in the table, and in ``rlark top``)
MAX_WORKERS = 32


def _mean(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def worker_charts(w: dict[str, Any]) -> list[dict[str, Any]]:
    """One Worker's charts: ``cpu`` (cores), ``memory`` (GiB) and, when it saw GPUs,
    ``gpu-util`` (mean %) and ``gpu-memory`` (GiB used, summed over its GPUs); each the
    :func:`~rlark.console.curves_chart.chart` answer plus ``metric`` and ``unit``."""
    pts = w["points"]
    t0 = pts[0][0] if pts else 0.0

    def series(value) -> list[list[Any]]:
        return [[round(p[0] - t0, 1), value(p)] for p in pts]

    out = [("cpu", "cores", series(lambda p: p[1])),
           ("memory", "GiB", series(lambda p: round(p[2] / GIB, 3)))]
    if w["gpus"]:
        out.append(("gpu-util", "%", series(lambda p: _mean([g[0] for g in p[3] or []]))))
        out.append(("gpu-memory", "GiB", series(
            lambda p: round(sum(g[1] or 0 for g in p[3]) / 1024, 3) if p[3] else None)))
    return [{**chart(f"{w['name']} {metric}", [(w["name"], data)]), "metric": metric, "unit": unit}
            for metric, unit, data in out]


def charts(usage: dict[str, Any]) -> dict[str, Any]:
    """The Resources section: ``{"workers": [{"name", "role", "rank", "latest", "peak",
    "gpus", "count", "charts"}], "idle": usage["idleGpus"], "more": Workers not charted}``."""
    rows = []
    for w in usage["workers"][:MAX_WORKERS]:
        rows.append({k: w[k] for k in ("name", "role", "rank", "latest", "peak", "gpus")}
                    | {"count": len(w["points"]), "charts": worker_charts(w) if w["points"] else []})
    return {"workers": rows, "idle": usage.get("idleGpus") or [],
            "more": max(0, len(usage["workers"]) - MAX_WORKERS), "gib": GIB}
