"""``rlark describe JOB --timeline``: a Run's timeline (``GET .../timeline``, built by
:mod:`rlark.services.timeline`) as a text chart: one row per Worker grouped by role, one bar per
span in a character and colour of its own (readable without colour too), scaled to the
terminal's width, the join barrier as a ``|`` column, a failure as ``!``, and the Worker that
held the Run up named under the chart. Pure: :func:`chart_lines` builds the lines.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text

from rlark.services.timeline import RAY_STARTING
from rlark.status import WorkerPhase

#: each span's bar: (character, colour); distinct characters, so a chart pasted without colour
#: still reads
BARS = {WorkerPhase.Pending: (".", "yellow"), WorkerPhase.Preparing: ("-", "blue"),
        RAY_STARTING: ("=", "magenta"), WorkerPhase.Joined: ("~", "cyan"),
        WorkerPhase.Running: ("#", "green"), WorkerPhase.Exited: ("_", "bright_black")}
BARRIER = ("|", "bold white")
FAILURE = ("!", "bold red")
#: the narrowest bar area drawn, in characters, however narrow the terminal
MIN_BAR = 20


def _seconds(value: float) -> str:
    return f"{value:.1f}"


def chart_lines(tl: dict[str, Any], width: int, t=None) -> list[Text]:
    """The chart of the timeline ``tl`` in at most ``width`` columns (the bar area at least
    :data:`MIN_BAR`): a title line, per role a header and one row per Worker (rank, name,
    bars), an axis, a legend and the call-outs (the slowest Worker to join; Workers whose Ray
    node never came up). ``t``: a :class:`rlark.console.i18n.Translator` (English without).
    Pure."""
    if t is None:
        from rlark.console.i18n import Translator

        t = Translator("en")
    start = tl["start"]
    end = tl["end"] if tl.get("end") is not None else tl["now"]
    # a Worker whose clock runs ahead of the server's may report moments after "now"
    end = max([end] + [m for w in tl["workers"] for s in w["spans"]
                       for m in (s["start"], s["end"]) if m is not None])
    total = max(end - start, 1e-3)
    workers = tl["workers"]
    label_w = max([len(f"{w['rank']:>4}  {w['name']}") for w in workers] + [8]) + 2
    # a failed Worker's reason follows its bars: room for the longest
    reason_w = max([cell_len(t.reason(w["failure"]["reason"]) if t.locale != "en"
                             else w["failure"]["reason"]) + 2
                    for w in workers if w.get("failure")] + [0])
    bar_w = max(width - label_w - reason_w, MIN_BAR)

    def col(at: float) -> int:
        return min(bar_w - 1, max(0, int((at - start) / total * bar_w)))

    key = "tl.length" if tl.get("end") is not None else "tl.lengthSoFar"
    # as describe names them: codes in English, the catalog's words in Chinese
    phase = t.phase(tl["phase"]) if t.locale != "en" else tl["phase"]
    lines = [Text.assemble((t("tl.run", n=tl["run"], phase=phase), "bold"), "  ",
                           t(key, seconds=_seconds(end - start)))]
    role = None
    for w in workers:
        if w["role"] != role:
            role = w["role"]
            lines.append(Text(role, style="bold"))
        cells: list[tuple[str, str]] = [(" ", "")] * bar_w
        for span in w["spans"]:
            char, style = BARS.get(span["phase"], ("?", ""))
            a = col(span["start"])
            b = col(span["end"] if span["end"] is not None else end)
            for i in range(a, max(b, a + 1)):
                cells[i] = (char, style)
        if tl.get("barrier") is not None:
            cells[col(tl["barrier"])] = BARRIER
        failure = w.get("failure")
        if failure and failure.get("at") is not None:
            cells[col(failure["at"])] = FAILURE
        row = Text(f"{w['rank']:>4}  {w['name']}".ljust(label_w))
        for char, style in cells:
            row.append(char, style=style)
        if failure:
            reason = t.reason(failure["reason"]) if t.locale != "en" else failure["reason"]
            row.append(f"  {reason}", style="red")
        lines.append(row)
    axis = Text(" " * label_w + "0 s".ljust(bar_w - 8) + f"{_seconds(total)} s".rjust(8))
    lines.append(axis)
    legend = Text(" " * label_w)
    for phase, (char, style) in BARS.items():
        legend.append(char * 2, style=style)
        legend.append(f" {t('tl.phase.' + phase)}  ")
    legend.append(BARRIER[0], style=BARRIER[1])
    legend.append(f" {t('tl.barrier')}  ")
    legend.append(FAILURE[0], style=FAILURE[1])
    legend.append(f" {t('tl.failure')}")
    lines.append(legend)
    if tl.get("slowest"):
        s = tl["slowest"]
        lines.append(Text(t("tl.slowest", name=s["name"], rank=s["rank"], role=s["role"],
                            after=_seconds(s["after"])), style="bold"))
    if tl.get("notJoined") and workers:
        lines.append(Text(t("tl.notJoined", names=", ".join(tl["notJoined"])), style="yellow"))
    return lines
