"""A Run's timeline (issue 25, item 1): the pure builder (services/timeline.py) on hand-built
Workers, the moments the controller keeps of lifecycle lines (controller/lifecycle.py), and the
text chart of ``rlark describe --timeline`` (cli/timeline.py). No I/O.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from rlark.bootstrap.lifecycle import lifecycle_line, moment_of
from rlark.controller.lifecycle import note_moment, parse_lifecycle
from rlark.services.timeline import PHASES, RunLife, WorkerLife, build_timeline, lives_of
from rlark.status import Phase, WorkerPhase
from rlark.store import RunRow, WorkerRow

T0 = 1_800_000_000.0  # the Run's creation, Unix seconds


def phases(row: dict) -> list[str]:
    return [s["phase"] for s in row["spans"]]


def joined_worker(name: str, rank: int, role: str, ray_started: float, *, head: bool = False,
                  **more: float) -> WorkerLife:
    """A Worker that started 1 s after the Run was created, prepared for 2 s, started Ray and
    had its node up at ``ray_started`` (seconds after T0)."""
    times = {"keeper": T0 + 1, "Preparing": T0 + 1.2, "Prepared": T0 + 3, "StartingRay": T0 + 3.1,
             "RayStarted": T0 + ray_started, **{k: T0 + v for k, v in more.items()}}
    return WorkerLife(name=name, role=role, rank=rank, is_head=head, times=times)


def test_the_worker_that_held_the_run_up_is_called_out_and_everyone_waited_for_it():
    head = joined_worker("j-head-0", 0, "head", 5, head=True, Joining=5.1, AllJoined=20.5,
                         running=21, run_finished=60, exit=61)
    fast = joined_worker("j-pool-0", 1, "pool", 6, stopped=60.5, exit=62)
    slow = joined_worker("j-pool-1", 2, "pool", 20, stopped=60.5, exit=63)
    tl = build_timeline(RunLife(number=3, created=T0, finished=T0 + 64, phase="Succeeded"),
                        [slow, head, fast], now=T0 + 100)
    assert tl["run"] == 3 and tl["start"] == T0 and tl["end"] == T0 + 64
    assert tl["barrier"] == T0 + 20.5 and tl["runStarted"] == T0 + 21
    # grouped by role (the head's role first: it has rank 0), rank order within a role
    assert [(w["role"], w["rank"]) for w in tl["workers"]] == [("head", 0), ("pool", 1), ("pool", 2)]
    assert tl["slowest"] == {"name": "j-pool-1", "role": "pool", "rank": 2,
                             "joinedAt": T0 + 20, "after": 15.0}
    assert tl["notJoined"] == []
    by_name = {w["name"]: w for w in tl["workers"]}
    for w in tl["workers"]:
        assert phases(w) == list(PHASES)
        # contiguous: each span ends where the next begins, the last at the Worker's exit
        for a, b in zip(w["spans"], w["spans"][1:]):
            assert a["end"] == b["start"] and a["start"] <= a["end"]
        assert w["failure"] is None
    joined = {n: next(s for s in w["spans"] if s["phase"] == "Joined") for n, w in by_name.items()}
    # the fast Worker waited at the barrier 15 s longer than the slow one
    assert joined["j-pool-0"]["end"] - joined["j-pool-0"]["start"] == 15.0
    assert joined["j-pool-1"]["end"] - joined["j-pool-1"]["start"] == 1.0
    assert by_name["j-head-0"]["spans"][-1] == {"phase": "Exited", "start": T0 + 60, "end": T0 + 61}
    assert by_name["j-pool-1"]["spans"][-1] == {"phase": "Exited", "start": T0 + 60.5, "end": T0 + 63}


def test_a_failed_worker_is_marked_and_its_spans_end_at_its_failure():
    head = joined_worker("j-head-0", 0, "head", 5, head=True, Joining=5.1, failed=40, exit=41)
    failed_at = T0 + 7
    broken = WorkerLife(name="j-pool-0", role="pool", rank=1,
                        times={"keeper": T0 + 1, "Preparing": T0 + 1.5, "failed": failed_at,
                               "exit": T0 + 7.5},
                        failure={"reason": "PrepareFailed",
                                 "message": "prepare script exited with code 3\nlast lines: x",
                                 "at": failed_at})
    tl = build_timeline(RunLife(number=1, created=T0, finished=T0 + 42, phase="Failed"),
                        [head, broken], now=T0 + 50)
    row = tl["workers"][1]
    assert row["failure"] == {"reason": "PrepareFailed",
                              "message": "prepare script exited with code 3", "at": failed_at}
    assert row["spans"] == [{"phase": "Pending", "start": T0, "end": T0 + 1},
                            {"phase": "Preparing", "start": T0 + 1, "end": failed_at},
                            {"phase": "Exited", "start": failed_at, "end": T0 + 7.5}]
    # it never joined: no Running span, it is named as never having joined
    assert tl["notJoined"] == ["j-pool-0"] and tl["slowest"] is None and tl["barrier"] is None
    assert phases(tl["workers"][0]) == ["Pending", "Preparing", "RayStarting", "Joined", "Exited"]


def test_a_run_still_running_has_open_spans():
    head = joined_worker("j-head-0", 0, "head", 5, head=True, AllJoined=6.5, running=7)
    pool = joined_worker("j-pool-0", 1, "pool", 6)
    waiting = WorkerLife(name="j-pool-1", role="pool", rank=2)  # not even started
    tl = build_timeline(RunLife(number=2, created=T0, phase="Running"), [head, pool, waiting],
                        now=T0 + 30)
    assert tl["end"] is None and tl["now"] == T0 + 30
    for row in tl["workers"][:2]:
        assert row["spans"][-1] == {"phase": "Running", "start": T0 + 7, "end": None}
    assert tl["workers"][2]["spans"] == [{"phase": "Pending", "start": T0, "end": None}]
    assert tl["notJoined"] == ["j-pool-1"]


def test_a_worker_clock_behind_the_server_keeps_the_spans_in_order():
    # the Worker's machine is 2 s behind the server's: its first moments precede the Run's creation
    skewed = WorkerLife(name="j-head-0", role="head", rank=0, is_head=True,
                        times={"keeper": T0 - 2, "StartingRay": T0 - 1, "RayStarted": T0 + 1})
    spans = build_timeline(RunLife(number=1, created=T0, phase="Starting"), [skewed],
                           now=T0 + 2)["workers"][0]["spans"]
    starts = [s["start"] for s in spans]
    assert starts == sorted(starts) and starts[0] == T0
    assert phases({"spans": spans}) == ["Pending", "Preparing", "RayStarting", "Joined"]


def test_the_controller_keeps_the_first_moment_of_each_known_kind_only():
    life: dict = {}
    lines = [lifecycle_line("keeper", ts=T0 + 1, protected=True, uid=1000),
             lifecycle_line("phase", ts=T0 + 2, phase="StartingRay"),
             lifecycle_line("phase", ts=T0 + 3, phase="RayStarted", ray_node_id="ab"),
             lifecycle_line("phase", ts=T0 + 4, phase="MyOwnPhase"),  # not a moment RLark keeps
             lifecycle_line("nodes", ts=T0 + 5, joined=[{"node_rank": 0}], missing=[1]),
             lifecycle_line("nodes", ts=T0 + 6, joined=[{"node_rank": 0}, {"node_rank": 1}],
                            missing=[]),
             lifecycle_line("nodes", ts=T0 + 7, joined=[{"node_rank": 0}, {"node_rank": 1}],
                            missing=[]),
             lifecycle_line("phase", ts=T0 + 8, phase="StartingRay"),  # again: the first stays
             lifecycle_line("running", ts=T0 + 9, pid=12),
             lifecycle_line("phase", ts=math.inf, phase="Joining")]  # no usable time
    events, _ = parse_lifecycle("".join(x + "\n" for x in lines).encode(), 0)
    for ev in events:
        note_moment(life, ev)
    assert life["times"] == {"keeper": T0 + 1, "StartingRay": T0 + 2, "RayStarted": T0 + 3,
                             "AllJoined": T0 + 6, "running": T0 + 9}
    assert moment_of({"event": "facts", "ts": T0}) is None


def test_stored_rows_become_a_timeline():
    utc = timezone.utc
    run = RunRow(number=4, phase=Phase.Failed, created_at=datetime.fromtimestamp(T0, utc),
                 finished_at=datetime.fromtimestamp(T0 + 30, utc))
    run.workers = [
        WorkerRow(name="j-head-0", role="head", index=0, node_rank=0, is_head=True,
                  phase=WorkerPhase.Failed,
                  lifecycle={"times": {"keeper": T0 + 1, "StartingRay": T0 + 2, "failed": T0 + 4,
                                       "bogus": "x"},
                             "failed": {"reason": "RayStartFailed", "message": "no GCS",
                                        "ts": T0 + 4}},
                  finished_at=datetime.fromtimestamp(T0 + 5, utc)),
        # failed before it wrote a line (the runtime could not launch it)
        WorkerRow(name="j-pool-0", role="pool", index=0, node_rank=1, is_head=False,
                  phase=WorkerPhase.Failed, reason=None, message="no such interpreter",
                  lifecycle={}),
    ]
    life, workers = lives_of(run)
    tl = build_timeline(life, workers, now=T0 + 40)
    head, pool = tl["workers"]
    assert head["spans"] == [{"phase": "Pending", "start": T0, "end": T0 + 1},
                             {"phase": "Preparing", "start": T0 + 1, "end": T0 + 2},
                             {"phase": "RayStarting", "start": T0 + 2, "end": T0 + 4},
                             {"phase": "Exited", "start": T0 + 4, "end": T0 + 5}]
    assert head["failure"] == {"reason": "RayStartFailed", "message": "no GCS", "at": T0 + 4}
    assert pool["spans"] == [{"phase": "Pending", "start": T0, "end": T0 + 30}]
    assert pool["failure"] == {"reason": "", "message": "no such interpreter", "at": None}
    assert tl["end"] == T0 + 30 and tl["phase"] == "Failed"


def test_the_text_chart_has_a_row_per_worker_scaled_to_the_width_and_names_the_slowest():
    from rlark.cli.timeline import BARS, chart_lines
    from rlark.console.i18n import Translator

    head = joined_worker("j-head-0", 0, "head", 5, head=True, AllJoined=20.5, running=21,
                         run_finished=60, exit=61)
    slow = joined_worker("j-pool-1", 2, "pool", 20, stopped=60.5, exit=63)
    broken = WorkerLife(name="j-pool-0", role="pool", rank=1,
                        times={"keeper": T0 + 1, "failed": T0 + 30, "exit": T0 + 31},
                        failure={"reason": "NodeLost", "message": "gone", "at": T0 + 30})
    tl = build_timeline(RunLife(number=3, created=T0, finished=T0 + 64, phase="Failed"),
                        [head, slow, broken], now=T0 + 100)
    for width in (80, 160):
        lines = [line.plain for line in chart_lines(tl, width)]
        # rows and axis fit (the legend and the call-outs may wrap)
        assert all(len(line) <= width for line in lines[:-3]), lines
        rows = {line.split()[1]: line for line in lines
                if len(line.split()) > 1 and line.split()[1].startswith("j-")}
        assert set(rows) == {"j-head-0", "j-pool-0", "j-pool-1"}
        assert lines.index("head") < lines.index(rows["j-head-0"]) < lines.index("pool")
        assert lines.index("pool") < lines.index(rows["j-pool-0"]) < lines.index(rows["j-pool-1"])
        # every phase the head went through is drawn in its own character (a span narrower
        # than a column may hide under the next: at 160 columns none is); the barrier column
        # is at the same place in every row; the failure is marked and named
        if width == 160:
            assert all(BARS[p][0] in rows["j-head-0"] for p in PHASES), rows["j-head-0"]
        assert len({row.index("|") for row in rows.values()}) == 1
        assert "!" in rows["j-pool-0"] and rows["j-pool-0"].rstrip().endswith("NodeLost")
        assert lines[-2].startswith("Slowest to join: j-pool-1 (rank 2, role pool)")
        assert "15.0 s after the first" in lines[-2]
        assert lines[-1] == "Ray node never came up: j-pool-0"
    # scaled to the width: the head's Running bar grows with it
    assert chart_lines(tl, 160)[2].plain.count("#") > chart_lines(tl, 80)[2].plain.count("#")
    zh = [line.plain for line in chart_lines(tl, 100, Translator("zh-CN"))]
    assert zh[-2].startswith("最慢加入：j-pool-1")


def test_the_text_chart_in_chinese_names_phases_and_reasons_in_chinese():
    from rlark.cli.timeline import chart_lines
    from rlark.console.i18n import Translator
    from tests.english import english_words

    broken = WorkerLife(name="j-head-0", role="head", rank=0, is_head=True,
                        times={"keeper": T0 + 1, "failed": T0 + 3, "exit": T0 + 4},
                        failure={"reason": "PrepareFailed", "message": "exit 3", "at": T0 + 3})
    tl = build_timeline(RunLife(number=1, created=T0, finished=T0 + 5, phase="Failed"), [broken],
                        now=T0 + 9)
    text = "\n".join(line.plain for line in chart_lines(tl, 100, Translator("zh-CN")))
    assert english_words(text, {"j-head-0", "head"}) == [], text


def _many(n: int) -> dict:
    t0 = 1_767_000_000.0
    workers = [WorkerLife(name=f"big-{i}", role="head" if i == 0 else "pool", rank=i,
                          is_head=i == 0,
                          times={"keeper": t0 + 1, "StartingRay": t0 + 2 + i % 7,
                                 "RayStarted": t0 + 10 + i % 13, "exit": t0 + 100},
                          failure={"reason": "NodeLost", "message": "gone", "at": t0 + 50}
                          if i == 7 else None)
               for i in range(n)]
    times = {"RayStarted": t0 + 3, "AllJoined": t0 + 23, "running": t0 + 24, "exit": t0 + 100}
    workers[0] = WorkerLife(name="big-0", role="head", rank=0, is_head=True, times=times)
    return build_timeline(RunLife(number=1, created=t0, finished=t0 + 101, phase=Phase.Failed),
                          workers, now=t0 + 200)


def test_a_thousand_worker_timeline_is_drawn_compact_one_row_and_one_tooltip_per_worker():
    """Issue 25, item 7 (bench/console_charts.py): a 1,000-Worker Run's timeline drawn in full
    is 17 elements and 1.5 KB a Worker; compact, one row per Worker (a band carrying its one
    tooltip with its spans' times) and the bars of each phase one path, a subpath per span, at
    the row's height: some 3 elements a Worker, every span still drawn, and ranks beside the
    rows (item 1: rank shown)."""
    import re

    from rlark.console import timeline_chart
    from rlark.console.i18n import Translator
    from rlark.console.pages import env

    small = timeline_chart.chart(_many(4))
    assert not small["compact"] and small["row"] == timeline_chart.ROW and small["paths"] == []
    tl = _many(1000)
    c = timeline_chart.chart(tl)
    assert c["compact"] and c["row"] <= 6 and c["height"] <= 1000 * 6 + 2 * 20 + 22 + 1
    html = env.get_template("_timeline.html").render(timeline=c, t=Translator("en"))
    svg = re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)
    rows = re.findall(r'<g class="tl-row" data-worker="big-(\d+)" data-rank="(\d+)">'
                      r'<title>([^<]*)</title><rect class="tl-hit" y="(\d+)" width="1000" '
                      r'height="6"/>', svg)
    assert [int(r[0]) for r in rows] == list(range(1000))
    assert svg.count("<title>") == 1000 + 1  # the rows' and the barrier's
    assert svg.count("<rect ") == 1000 and len(re.findall(r"<[a-z]", svg)) < 3 * 1000 + 100
    # every span a subpath of its phase's path, at its Worker's row
    row_y = {f"big-{r[0]}": int(r[3]) for r in rows}
    paths = dict(re.findall(r'<path class="tl-(\w+)" data-phase="\w+" d="([^"]+)"/>', svg))
    assert list(paths) == [p for p in PHASES if any(s["phase"] == p for w in tl["workers"]
                                                   for s in w["spans"])]
    for phase, d in paths.items():
        bars = re.findall(r"M(\d+) (\d+)h(\d+)v(\d+)h-(\d+)z", d)
        assert "".join(f"M{x} {y}h{w}v{b}h-{w2}z" for x, y, w, b, w2 in bars) == d
        want = sorted((row_y[w["name"]], s["start"]) for w in tl["workers"]
                      for s in w["spans"] if s["phase"] == phase)
        assert sorted(int(b[1]) for b in bars) == [y for y, _ in want], phase
        assert all(b[2] == b[4] and int(b[2]) >= 1 and b[3] == "5" for b in bars)
    assert len(svg) < 400 * 1000  # drawn in full: 1.5 MB; an element per span: 590 KB
    head = rows[0][2]
    assert head.startswith("big-0 (rank 0): Pending 0.0–3.0; Joined 3.0–24.0;")
    assert "Running 24.0–100.0;" in head
    assert re.search(r'<g class="tl-row" data-worker="big-7" [^>]*>.*?<path class="tl-failure" '
                     rf'data-reason="NodeLost" d="M\d+(\.\d)? {row_y["big-7"]}l3 6h-6z"/></g>', svg)
    # an axis of ranks: each role's first Worker and every 50th rank, beside its row
    ticks = re.findall(r'<text class="tl-tick tl-rank-tick" x="214" y="(\d+)" '
                       r'text-anchor="end">(\d+)</text>', svg)
    assert [int(r) for _, r in ticks] == [0, 1, *range(50, 1000, 50)]
    assert all(int(y) == row_y[f"big-{r}"] + 6 for y, r in ticks)
    assert "1000 Workers: drawn compact" in html


def test_a_compact_rows_texts_are_escaped():
    """The compact rows are written in Python, not by the template: what a Worker reported
    (a failure's reason) is still text, never markup."""
    from rlark.console import timeline_chart
    from rlark.console.i18n import Translator

    tl = _many(101)
    tl["workers"][7] = {**tl["workers"][7],
                        "failure": {**tl["workers"][7]["failure"], "reason": '<i>"&\''}}
    svg = str(timeline_chart.compact_rows(timeline_chart.chart(tl), Translator("en")))
    assert "<i>" not in svg and svg.count('data-reason="&lt;i&gt;&#34;&amp;&#39;"') == 1
    assert "failure: &lt;i&gt;&#34;&amp;&#39; " in svg
