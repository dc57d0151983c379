"""The console's training-curve charts: the geometry of server-side SVGs (template
``_curves.html``) of a Run's scalars (:func:`rlark.services.curves.run_scalars`): one chart per
tag, step on the x axis, one line per Run (two in the comparison of two Runs), each point a
dot whose ``<title>`` gives its step and value. No JavaScript, no charting library: the charts
are redrawn with the page's live refresh, as the timeline is. Pure.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlark.services.curves import KEY_METRICS

#: the SVG's user units: width, height, left margin (value labels), bottom margin (step labels)
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 480, 200, 64, 22, 8, 10
#: dots drawn per line at most (the line itself has every point)
MAX_DOTS = 300


def default_tags(tags: Sequence[str]) -> list[str]:
    """The tags shown when none are chosen: RLinf's key metrics the Run has, in
    :data:`KEY_METRICS` order; else its first four tags."""
    chosen = [t for t in KEY_METRICS if t in tags]
    return chosen or list(tags)[:4]


def _label(x: float) -> str:
    return f"{x:.4g}"


def chart(tag: str, lines: Sequence[tuple[str, list[list[Any]]]]) -> dict[str, Any]:
    """One tag's chart: ``lines`` are ``(name, [[step, value], ...])`` (a value None, not
    finite, is left out and breaks nothing). Returns ``{"tag", "width", "height", "lines":
    [{"name", "index", "points": "x,y ...", "dots": [{"x", "y", "step", "value"}], "count"}],
    "x": {"min", "max", "y"}, "y": {"min", "max", "x"}, "empty"}``."""
    finite = [(s, v) for _, pts in lines for s, v in pts if v is not None]
    if not finite:
        return {"tag": tag, "width": WIDTH, "height": HEIGHT, "lines": [], "empty": True}
    s0, s1 = min(s for s, _ in finite), max(s for s, _ in finite)
    v0, v1 = min(v for _, v in finite), max(v for _, v in finite)
    if v0 == v1:
        v0, v1 = v0 - 0.5, v1 + 0.5
    ds = max(s1 - s0, 1)
    area_w, area_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(s: float, v: float) -> tuple[float, float]:
        return (round(LEFT + (s - s0) / ds * area_w, 1),
                round(TOP + (1 - (v - v0) / (v1 - v0)) * area_h, 1))

    out = []
    for i, (name, pts) in enumerate(lines):
        shown = [(s, v) for s, v in pts if v is not None]
        coords = [xy(s, v) for s, v in shown]
        every = max(1, -(-len(shown) // MAX_DOTS))
        dots = [{"x": c[0], "y": c[1], "step": s, "value": v}
                for k, ((s, v), c) in enumerate(zip(shown, coords))
                if k % every == 0 or k == len(shown) - 1]
        out.append({"name": name, "index": i, "count": len(shown),
                    "points": " ".join(f"{x},{y}" for x, y in coords), "dots": dots})
    return {"tag": tag, "width": WIDTH, "height": HEIGHT, "lines": out, "empty": False,
            "left": LEFT, "top": TOP, "bottom": HEIGHT - BOTTOM, "right": WIDTH - RIGHT,
            "x": {"min": s0, "max": s1}, "y": {"min": _label(v0), "max": _label(v1)}}


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
