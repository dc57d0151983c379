"""The console's training-curve charts: the geometry of server-side SVGs (template
``_curves.html``) of a Run's scalars (:func:`rlark.services.curves.run_scalars`): one chart per
tag, step on the x axis, one line per Run (two in the comparison of two Runs), each point a
dot whose ``<title>`` gives its step and value. No JavaScript, no charting library: the charts
are redrawn with the page's live refresh, as the timeline is. Pure.
"""

from __future__ import annotations

from typing import Any, Sequence

from markupsafe import Markup, escape

from rlark.services.curves import KEY_METRICS

#: the SVG's user units: width, height, left margin (value labels), bottom margin (step labels)
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 480, 200, 64, 22, 8, 10
#: dots drawn per line at most (the line has at most two points per unit of width: per_pixel)
MAX_DOTS = 300


def default_tags(tags: Sequence[str]) -> list[str]:
    """The tags shown when none are chosen: RLinf's key metrics the Run has, in
    :data:`KEY_METRICS` order; else its first four tags."""
    chosen = [t for t in KEY_METRICS if t in tags]
    return chosen or list(tags)[:4]


def _label(x: float) -> str:
    return f"{x:.4g}"


def per_pixel(points: Sequence[tuple[float, float]], s0: float, ds: float,
              width: float) -> list[tuple[float, float]]:
    """The points of one line worth drawing ``width`` units wide: ``points`` are ``(step,
    value)`` by step (``s0``: the chart's first step, ``ds``: its step range); per unit-wide
    column of steps only its lowest and highest value (in step order; one point when they are
    the same) are kept, so a spike stays drawn and a line never has more than ``2 * width``
    points (a 10,000-point series is some 800, not 10,000 SVG coordinates). Pure."""
    if len(points) <= 2 * width:
        return list(points)
    out: list[tuple[float, float]] = []
    column, lo, hi = None, None, None
    scale = width / ds
    for s, v in points:
        c = int((s - s0) * scale)
        if c != column:
            if lo is not None and hi is not None:
                out.extend(sorted({lo, hi}))
            column, lo, hi = c, (s, v), (s, v)
            continue
        if lo is None or v < lo[1]:
            lo = (s, v)
        if hi is None or v > hi[1]:
            hi = (s, v)
    if lo is not None and hi is not None:
        out.extend(sorted({lo, hi}))
    return out


def chart(tag: str, lines: Sequence[tuple[str, list[list[Any]]]]) -> dict[str, Any]:
    """One tag's chart: ``lines`` are ``(name, [[step, value], ...])`` (a value None, not
    finite, is left out and breaks nothing). Returns ``{"tag", "width", "height", "lines":
    [{"name", "index", "points": "x,y ...", "dots": [{"x", "y", "step", "value"}], "count": points
    finite, "drawn": points drawn (:func:`per_pixel`)}],
    "x": {"min", "max", "y"}, "y": {"min", "max", "x"}, "empty"}``."""
    finites = [[(s, v) for s, v in pts if v is not None] for _, pts in lines]
    if not any(finites):
        return {"tag": tag, "width": WIDTH, "height": HEIGHT, "lines": [], "empty": True}
    steps = [s for pts in finites for s, _ in pts]
    values = [v for pts in finites for _, v in pts]
    s0, s1 = min(steps), max(steps)
    v0, v1 = min(values), max(values)
    if v0 == v1:
        v0, v1 = v0 - 0.5, v1 + 0.5
    ds = max(s1 - s0, 1)
    area_w, area_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    kx, ky = area_w / ds, area_h / (v1 - v0)

    def xy(s: float, v: float) -> tuple[float, float]:
        return round(LEFT + (s - s0) * kx, 1), round(TOP + (v1 - v) * ky, 1)

    out = []
    for i, ((name, _), finite_pts) in enumerate(zip(lines, finites)):
        shown = per_pixel(finite_pts, s0, ds, area_w)
        coords = [xy(s, v) for s, v in shown]
        every = max(1, -(-len(shown) // MAX_DOTS))
        dots = [{"x": c[0], "y": c[1], "step": s, "value": v}
                for k, ((s, v), c) in enumerate(zip(shown, coords))
                if k % every == 0 or k == len(shown) - 1]
        out.append({"name": name, "index": i, "count": len(finite_pts), "drawn": len(shown),
                    "points": " ".join(f"{x},{y}" for x, y in coords), "dots": dots})
    return {"tag": tag, "width": WIDTH, "height": HEIGHT, "lines": out, "empty": False,
            "left": LEFT, "top": TOP, "bottom": HEIGHT - BOTTOM, "right": WIDTH - RIGHT,
            "x": {"min": s0, "max": s1}, "y": {"min": _label(v0), "max": _label(v1)}}


def dots_svg(line: dict[str, Any], step: str) -> Markup:
    """A line's dots (:func:`chart`'s ``dots``) as SVG: per dot a ``circle.cv-dot`` with its
    ``data-step`` and ``data-value`` and a ``<title>`` (``<run> · <step> <n>: <value>``; ``step``:
    the word, in the page's language) shown on hover; every text escaped. Written here, not in
    the template: 10 charts of 300 dots through Jinja took 0.3 s of the Curves tab's server time
    (bench/console_charts.py)."""
    name, cls, word = escape(line["name"]), f"cv-dot cv-{line['index']}", escape(step)
    return Markup("".join(
        f'<circle class="{cls}" cx="{d["x"]}" cy="{d["y"]}" r="2.5" data-step="{d["step"]}" '
        f'data-value="{d["value"]}"><title>{name} · {word} {d["step"]}: {d["value"]}</title>'
        "</circle>" for d in line["dots"]))


def charts(runs: Sequence[tuple[str, dict[str, Any]]], chosen: Sequence[str]) -> dict[str, Any]:
    """The Curves section: ``runs`` are ``(name, scalars)`` (one Run; two to overlay),
    ``chosen`` the tags asked for (none: :func:`default_tags`). Returns ``{"charts", "tags":
    every tag of any Run, "chosen", "runs": [{"name", "why", "path", "notes", "index"}]}``."""
    tags = sorted({t for _, data in runs for t in data.get("tags") or []})
    shown = [t for t in chosen if t in tags] or default_tags(tags)
    return {"charts": [chart(t, [(name, data["scalars"].get(t) or []) for name, data in runs])
                       for t in shown],
            "tags": tags, "chosen": shown,
            "runs": [{"name": name, "index": i, "why": data.get("why"), "path": data.get("path"),
                      "notes": data.get("notes") or []} for i, (name, data) in enumerate(runs)]}
