"""The Job page's timeline chart: the geometry of a server-side SVG (template
``_timeline.html``) of a Run's timeline (:func:`rlark.services.timeline.build_timeline`): per
role a header, per Worker a row of spans coloured by phase, the join barrier as a vertical line,
failures marked; each span carries what its ``<title>`` shows on hover (phase, times, length).
No JavaScript: the chart is redrawn with the page's live refresh. Pure.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from markupsafe import Markup, escape

#: the SVG's user units: its width (the browser scales it to the card), the label column, a
#: row's height and a span bar's height
WIDTH, LABEL, ROW, BAR = 1000, 220, 20, 14
#: room under the rows for the time axis
AXIS = 22
#: more Workers than this and the chart is drawn compact: thin rows without a text label, one
#: tooltip per row (its spans' times, in seconds from the Run's creation) instead of one per
#: span, and the bars of each phase one SVG path for all rows (a subpath per span) under a
#: transparent band per row that carries its tooltip: 1,000 Workers drawn in full are 1.5 MB of
#: SVG and 2.5 s to show; an element per span, 8,000 elements (bench/console_charts.py)
COMPACT_ROWS = 100
#: a compact row's height and bar
COMPACT_ROW, COMPACT_BAR = 6, 5
#: a compact chart shows the rank of each role's first Worker and of every RANK_TICK-th one
#: beside its row (an axis of ranks; every row's rank is in its tooltip)
RANK_TICK = 50


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
    "workers", "bar", "row", "paths"}``. Times are shown as :func:`clock` text; an open span (its
    Worker still in it) ends at ``now``. Every span is at least one unit wide, so a short one
    stays visible. With more than :data:`COMPACT_ROWS` Workers, ``compact``: rows
    :data:`COMPACT_ROW` high, spans with ``since`` and ``until`` (seconds from the Run's
    creation) in place of ``start`` and ``end``, and ``paths``: ``[{"phase", "d"}]``, per phase
    (in the order of ``phases``) the SVG path data of all its spans' bars, one closed subpath
    (``M x y h w v bar h -w z``, whole units) per span; otherwise ``paths`` is empty."""
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
    bars: dict[str, list[str]] = {}
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
            x0, x1 = x(s["start"]), x(stop)
            span = {"phase": s["phase"], "open": s["end"] is None,
                    "seconds": f"{stop - s['start']:.1f}"}
            if compact:  # whole units (a unit is about a pixel): 1,000 rows' bytes count
                span.update(x=round(x0), w=max(round(x1 - x0), 1),
                            since=f"{s['start'] - start:.1f}", until=f"{stop - start:.1f}")
            else:
                span.update(x=x0, w=max(round(x1 - x0, 1), 1.0), start=clock(s["start"]),
                            end=clock(s["end"]))
            spans.append(span)
        failure = None
        if w.get("failure"):
            f = w["failure"]
            failure = {"x": x(f["at"]) if f.get("at") is not None else None,
                       "reason": f["reason"], "message": f["message"], "at": clock(f.get("at"))}
        rows.append({"kind": "worker", "name": w["name"], "rank": w["rank"],
                     "isHead": w["isHead"], "y": y, "spans": spans, "failure": failure})
        if compact:
            for span in spans:
                bars.setdefault(span["phase"], []).append(
                    f"M{span['x']} {y}h{span['w']}v{bar}h-{span['w']}z")
        y += row
    barrier = ({"x": x(tl["barrier"]), "at": clock(tl["barrier"])}
               if tl.get("barrier") is not None else None)
    return {"width": WIDTH, "height": y + AXIS, "label": LABEL, "bar": bar, "row": row,
            "compact": compact, "workers": len(tl["workers"]),
            "rows": rows, "barrier": barrier, "rows_height": y,
            "paths": [{"phase": p, "d": "".join(bars[p])} for p in tl["phases"] if p in bars],
            "axis": {"y": y + 14, "seconds": f"{total:.1f}"},
            "slowest": tl.get("slowest"), "notJoined": tl.get("notJoined") or [],
            "run": tl["run"], "phases": tl["phases"], "open": tl.get("end") is None}


def compact_rows(c: dict[str, Any], t: Callable[..., str]) -> Markup:
    """The SVG of a compact chart's (:func:`chart`, ``compact``) rows: per role its heading, per
    Worker a ``<g class="tl-row">`` holding its tooltip (``<title>``: the Worker, its rank and its
    spans' times; ``t``: the page's translator, asked once per phase, not once per span) and the
    transparent band that shows it on hover, its failure's marker, and for a role's first Worker
    and every :data:`RANK_TICK`-th rank that rank beside the row. Every text escaped.
    Written here, not in the template: 1,000 rows through Jinja, six translations a row, took
    0.9 s of the page's 1.4 s on the server (bench/console_charts.py)."""
    label = {p: t("tl.phase." + p) for p in c["phases"]}
    still, failure = t("tl.open"), t("tl.failure")
    out: list[str] = []
    first = False
    for r in c["rows"]:
        if r["kind"] == "role":
            out.append(f'<text class="tl-role" x="4" y="{r["y"] + 14}" translate="no">'
                       f'{escape(r["role"])}</text>')
            first = True
            continue
        if first or r["rank"] % RANK_TICK == 0:
            out.append(f'<text class="tl-tick tl-rank-tick" x="{c["label"] - 6}" '
                       f'y="{r["y"] + c["row"]}" text-anchor="end">{r["rank"]}</text>')
        first = False
        tip = [t("tl.rowTitle", worker=r["name"], rank=r["rank"])]
        tip += [f" {label.get(s['phase'], s['phase'])} {s['since']}–{s['until']}"
                + (f" ({still})" if s["open"] else "") + ";" for s in r["spans"]]
        f = r["failure"]
        if f:
            tip.append(f" {failure}: {f['reason']} {f['at']}")
        mark = (f'<path class="tl-failure" data-reason="{escape(f["reason"])}" '
                f'd="M{f["x"]} {r["y"]}l3 6h-6z"/>' if f and f["x"] is not None else "")
        out.append(f'<g class="tl-row" data-worker="{escape(r["name"])}" data-rank="{r["rank"]}">'
                   f'<title>{escape("".join(tip))}</title><rect class="tl-hit" y="{r["y"]}" '
                   f'width="{c["width"]}" height="{c["row"]}"/>{mark}</g>')
    return Markup("\n".join(out))
