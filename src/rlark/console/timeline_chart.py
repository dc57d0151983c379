"""The Job page's timeline chart: the geometry of a server-side SVG (template
``_timeline.html``) of a Run's timeline (:func:`rlark.services.timeline.build_timeline`): per
role a header, per Worker a row of spans coloured by phase, the join barrier as a vertical line,
failures marked; each span carries what its ``<title>`` shows on hover (phase, times, length).
No JavaScript: the chart is redrawn with the page's live refresh. Pure.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

#: the SVG's user units: its width (the browser scales it to the card), the label column, a
#: row's height and a span bar's height
WIDTH, LABEL, ROW, BAR = 1000, 220, 20, 14
#: room under the rows for the time axis
AXIS = 22
#: more Workers than this and the chart is drawn compact: thin rows without a text label, one
#: tooltip per row (its spans' times, in seconds from the Run's creation) instead of one per
#: span; 1,000 Workers drawn in full are 1.5 MB of SVG and 2.5 s to show (bench/console_charts.py)
COMPACT_ROWS = 100
#: a compact row's height and bar
COMPACT_ROW, COMPACT_BAR = 6, 5


def clock(t: float | None) -> str:
    """``HH:MM:SS.mmm UTC`` of Unix seconds ``t`` ("" for None)."""
    if t is None:
        return ""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def chart(tl: dict[str, Any]) -> dict[str, Any]:
    """The chart of ``tl``: ``{"width", "height", "label", "rows": [{"kind": "role", "role",
    "y"} | {"kind": "worker", "name", "rank", "isHead", "y", "spans": [{"phase", "x", "w",
    "start", "end", "open", "seconds"}], "failure": {"x", "reason", "message", "at"} | None}],
    "barrier": {"x", "at"} | None, "axis": {"y", "seconds"}, "slowest", "notJoined", "compact",
    "workers", "bar", "row"}``. Times are shown as :func:`clock` text; an open span (its Worker
    still in it) ends at ``now``. Every span is at least one unit wide, so a short one stays
    visible. With more than :data:`COMPACT_ROWS` Workers, ``compact``: rows :data:`COMPACT_ROW`
    high and spans with ``since`` and ``until`` (seconds from the Run's creation) in place of
    ``start`` and ``end``."""
    start = tl["start"]
    end = tl["end"] if tl.get("end") is not None else tl["now"]
    # a Worker whose clock runs ahead of the server's may report moments after "now"
    end = max([end] + [m for w in tl["workers"] for s in w["spans"]
                       for m in (s["start"], s["end"]) if m is not None])
    total = max(end - start, 1e-3)
    area = WIDTH - LABEL - 10

    def x(at: float) -> float:
        return round(LABEL + min(max(at - start, 0.0), total) / total * area, 1)

    compact = len(tl["workers"]) > COMPACT_ROWS
    row, bar = (COMPACT_ROW, COMPACT_BAR) if compact else (ROW, BAR)
    rows: list[dict[str, Any]] = []
    y = 0
    role = None
    for w in tl["workers"]:
        if w["role"] != role:
            role = w["role"]
            rows.append({"kind": "role", "role": role, "y": y})
            y += ROW
        spans = []
        for s in w["spans"]:
            stop = s["end"] if s["end"] is not None else end
            x0 = x(s["start"])
            span = {"phase": s["phase"], "x": x0, "w": max(round(x(stop) - x0, 1), 1.0),
                    "open": s["end"] is None, "seconds": f"{stop - s['start']:.1f}"}
            if compact:  # whole units (a unit is about a pixel): 1,000 rows' bytes count
                span.update(x=round(x0), w=max(round(x(stop) - x0), 1),
                            since=f"{s['start'] - start:.1f}", until=f"{stop - start:.1f}")
            else:
                span.update(start=clock(s["start"]), end=clock(s["end"]))
            spans.append(span)
        failure = None
        if w.get("failure"):
            f = w["failure"]
            failure = {"x": x(f["at"]) if f.get("at") is not None else None,
                       "reason": f["reason"], "message": f["message"], "at": clock(f.get("at"))}
        rows.append({"kind": "worker", "name": w["name"], "rank": w["rank"],
                     "isHead": w["isHead"], "y": y, "spans": spans, "failure": failure})
        y += row
    barrier = ({"x": x(tl["barrier"]), "at": clock(tl["barrier"])}
               if tl.get("barrier") is not None else None)
    return {"width": WIDTH, "height": y + AXIS, "label": LABEL, "bar": bar, "row": row,
            "compact": compact, "workers": len(tl["workers"]),
            "rows": rows, "barrier": barrier, "rows_height": y,
            "axis": {"y": y + 14, "seconds": f"{total:.1f}"},
            "slowest": tl.get("slowest"), "notJoined": tl.get("notJoined") or [],
            "run": tl["run"], "phases": tl["phases"], "open": tl.get("end") is None}
