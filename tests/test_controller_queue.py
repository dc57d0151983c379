"""One Run's activity does not make the controller pass over every other Run (issue 23, item 3).

The loop passes over every Run at a wake (an API write) and at its idle resync; in between, a
Worker whose log grew or which ended brings a pass over its own Run only. Two Runs, each with one
live Worker (a real process this test started, adopted as the Worker), Running; the loop runs
with a long idle resync. Lines appended to one Run's log are acted on (its Worker's lifecycle
takes them) by a lane over that Run alone: the other Run's lane does not run. A wake still
passes over both."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import psutil
from sqlalchemy import select

from rlark.controller.loop import Controller, changed_runs
from rlark.controller.spacing import (MAX_RESYNC_SECONDS, MAX_SPACING_SECONDS, RESYNC_WORKERS,
                                     SPACING_RATIO, PassSpacing, not_before, resync_interval)
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.services.jobs import JobService
from rlark.status import Phase
from rlark.store import JobRow, RunRow, WorkerRow
from tests.k8s_testbed import wait_for
from tests.test_local_runtime import job_yaml


class CountingController(Controller):
    """The controller, counting each Run's turns (its lane's pass over it) by Run id."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns: dict[int, int] = {}
        self._count_lock = threading.Lock()

    def _reconcile_run(self, s, run, decisions=None):
        with self._count_lock:
            self.turns[run.id] = self.turns.get(run.id, 0) + 1
        return super()._reconcile_run(s, run, decisions)


def running_with_a_live_worker(store, name: str, log_path, proc: subprocess.Popen) -> int:
    """Job ``name`` whose Run is Running, its one Worker the process ``proc`` logging to
    ``log_path``; returns the Run's id."""
    JobService(store).create(job_yaml(name, pool_workers=0))
    with store.session() as s:
        job = s.scalars(select(JobRow).where(JobRow.name == name)).one()
        run = job.runs[0]
        run.phase = job.phase = Phase.Running
        w = run.workers[0]
        w.pid, w.pid_started = proc.pid, psutil.Process(proc.pid).create_time()
        w.log_path = str(log_path)
        return run.id


def line(kind: str, **data) -> str:
    return "RLARK_EVENT " + json.dumps({"ts": 1.0, "event": kind, **data}) + "\n"


def worker_phase_said(store, run_id: int) -> str | None:
    with store.session() as s:
        w = s.scalars(select(WorkerRow).where(WorkerRow.run_id == run_id)).one()
        return (w.lifecycle or {}).get("phase")


def test_a_runs_log_lines_bring_a_pass_over_that_run_alone(store, tmp_path):
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for p in logs:
        p.write_text("")
    ctl = CountingController(store, LocalRuntime(), idle_resync_seconds=600)
    try:
        a, b = (running_with_a_live_worker(store, name, log, proc)
                for name, log, proc in zip(("busy", "idle"), logs, procs))
        ctl.start()
        wait_for("the first pass over both Runs", lambda: ctl.turns.get(a) and ctl.turns.get(b), 60)
        wait_for("the first pass's lanes to end", lambda: not ctl._busy, 60)
        before = dict(ctl.turns)
        for phase in ("Prepared", "StartingRay", "Joined"):
            with logs[0].open("a") as f:
                f.write(line("phase", phase=phase))
            wait_for(f"the busy Run's Worker to say {phase}",
                     lambda: worker_phase_said(store, a) == phase, 30)
        assert ctl.turns[a] >= before[a] + 3
        assert ctl.turns[b] == before[b]  # the idle Run was not passed over
        ctl.wake()  # an API write: a pass over every Run
        wait_for("a pass over the idle Run after a wake", lambda: ctl.turns[b] > before[b], 30)
    finally:
        ctl.stop_loop()
        for p in procs:
            p.kill()
            p.wait()


def test_changed_runs_names_the_runs_whose_workers_changed():
    before = {1: ((10, True),), 2: ((5, True), (7, True))}
    assert changed_runs(before, before) == set()
    assert changed_runs(before, {1: ((11, True),), 2: ((5, True), (7, True))}) == {1}
    assert changed_runs(before, {1: ((10, True),), 2: ((5, True), (7, False))}) == {2}
    assert changed_runs(before, {2: ((5, True), (7, True)), 3: ((0, True),)}) == {1, 3}


def test_a_runs_next_pass_for_its_workers_changes_waits_as_long_as_its_last_pass_took():
    """The spacing's arithmetic (:mod:`rlark.controller.spacing`): capped, a Run never passed
    over is due, Runs no longer watched are forgotten."""
    assert not_before(10.0, 0.2) == 10.0 + 0.2 * SPACING_RATIO
    assert not_before(10.0, 30.0) == 10.0 + MAX_SPACING_SECONDS  # a launch of 30 s: capped
    assert not_before(10.0, -1.0) == 10.0  # a clock step back never delays it
    spacing = PassSpacing(ratio=1.0, most=1.0)
    spacing.ended(1, began=100.0, ended=100.3)
    spacing.ended(2, began=100.0, ended=100.01)
    assert spacing.due({1, 2, 3}, now=100.1) == {2, 3}
    assert spacing.due({1, 2, 3}, now=100.6) == {1, 2, 3}
    spacing.keep_only({2})
    assert spacing.due({1}, now=100.0) == {1}


class SlowController(CountingController):
    """Each pass over Run :attr:`slow` takes :attr:`SLOW_PASS` seconds more (a stand-in for the
    load and commit of 1,000 Workers), and each turn's start and end are kept."""

    SLOW_PASS = 0.3

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slow: int | None = None
        self.spans: list[tuple[float, float]] = []

    def _reconcile_run(self, s, run, decisions=None):
        began = time.monotonic()
        super()._reconcile_run(s, run, decisions)
        if run.id == self.slow:
            time.sleep(self.SLOW_PASS)  # the pass's own work, not a wait for anything
            self.spans.append((began, time.monotonic()))


def test_a_run_whose_workers_keep_changing_is_not_passed_over_back_to_back(store, tmp_path):
    """A Run whose Worker writes without pause (as 1,000 Pods starting do) gets a pass no sooner
    after its last one than that pass took (issue 23 item 3): before, each pass followed the last
    at once, one lane busy throughout. Its passes go on all the while."""
    proc = subprocess.Popen(["sleep", "600"])
    log = tmp_path / "busy.log"
    log.write_text("")
    ctl = SlowController(store, LocalRuntime(), idle_resync_seconds=600)
    stop = threading.Event()

    def write() -> None:
        while not stop.wait(0.02):
            with log.open("a") as f:
                f.write("a line of the workload's output\n")

    writer = threading.Thread(target=write, daemon=True)
    try:
        ctl.slow = running_with_a_live_worker(store, "busy", log, proc)
        ctl.start()
        wait_for("the first pass", lambda: ctl.spans, 60)
        writer.start()
        wait_for("six passes over the busy Run", lambda: len(ctl.spans) >= 6, 60)
    finally:
        stop.set()
        ctl.stop_loop()
        proc.kill()
        proc.wait()
    spans = ctl.spans[:6]
    gaps = [nxt[0] - end for (_, end), nxt in zip(spans, spans[1:])]
    took = [end - began for began, end in spans]
    assert all(g >= t for g, t in zip(gaps, took)), (gaps, took)


def test_an_idle_resync_passes_over_a_large_run_less_often():
    """The resync's arithmetic: every second up to RESYNC_WORKERS live Workers, a second more
    per RESYNC_WORKERS beyond, at most MAX_RESYNC_SECONDS; a lane that began a moment after the
    pass that handed it out still counts as a whole resync ago."""
    assert resync_interval(0, 1.0) == resync_interval(RESYNC_WORKERS, 1.0) == 1.0
    assert resync_interval(5 * RESYNC_WORKERS, 1.0) == 5.0
    assert resync_interval(10**6, 1.0) == MAX_RESYNC_SECONDS
    spacing = PassSpacing()
    spacing.ended(1, began=100.02, ended=100.3)  # 1,000 Workers: every 5 s
    spacing.ended(2, began=100.01, ended=100.02)  # 3 Workers: every resync
    workers = {1: 5 * RESYNC_WORKERS, 2: 3}
    assert spacing.resync_due({1, 2, 3}, workers, now=101.0, idle_resync=1.0) == {2, 3}
    assert spacing.resync_due({1, 2}, workers, now=104.6, idle_resync=1.0) == {1, 2}


class TurnsOnly(Controller):
    """Counts each Run's turns and does nothing in them: what is tested is which Runs a pass
    hands out, not what a turn does with them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns: dict[int, int] = {}

    def _reconcile_run(self, s, run, decisions=None):
        self.turns[run.id] = self.turns.get(run.id, 0) + 1


def test_an_idle_resync_leaves_out_a_large_run_whose_turn_has_not_come(store, tmp_path, monkeypatch):
    """A Run of 600 live Workers is passed over at a wake's pass and then, when nothing wakes
    the controller, every 3 s, not every second (issue 23 item 3: a Run of 1,000 idle Workers
    cost a sixth of a core in passes that found nothing); a Run of one Worker at every one."""
    monkeypatch.setenv("RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT", "1000")
    jobs = JobService(store, runtime="kubernetes")  # (600 Workers are more than this machine takes)
    ids = {}
    for name, pool in (("small", 0), ("large", 3 * RESYNC_WORKERS - 1)):
        jobs.create(job_yaml(name, pool_workers=pool))
        with store.session() as s:
            run = s.scalars(select(JobRow).where(JobRow.name == name)).one().runs[0]
            run.phase = Phase.Running
            for w in run.workers:  # launched, as far as the store says
                w.handle, w.log_path = f"rl/{w.name}", str(tmp_path / f"{w.name}.log")
            ids[name] = run.id
    ctl = TurnsOnly(store, LocalRuntime())
    now = [1000.0]
    ctl.clock = lambda: now[0]
    try:
        ctl.reconcile_once()  # the first pass (a wake's): every Run
        ctl._fingerprint(refresh=True)
        assert ctl.turns == {ids["small"]: 1, ids["large"]: 1}
        now[0] += 1.0  # the next idle resync: nothing woke the controller
        ctl.reconcile_once(idle=True)
        assert ctl.turns == {ids["small"]: 2, ids["large"]: 1}
        now[0] += 1.0
        ctl.reconcile_once()  # an API write woke it: every Run
        assert ctl.turns == {ids["small"]: 3, ids["large"]: 2}
        for _ in range(3):  # idle resyncs: the large Run's comes 3 s after its last pass
            now[0] += 1.0
            ctl.reconcile_once(idle=True)
        assert ctl.turns == {ids["small"]: 6, ids["large"]: 3}
    finally:
        ctl.stop_loop()


def test_a_run_a_wake_asked_for_while_its_lane_was_at_work_is_passed_at_once_not_spaced(store, tmp_path):
    """A full pass (a wake's: a stop, say) finds the Run's lane at work: once that lane ends the
    Run is passed again at the next tick, not after its spacing; one asked for by its Workers'
    changes waits for its spacing (reviewed: a stop of a large Run waited up to a second more)."""
    JobService(store).create(job_yaml("busy", pool_workers=0))
    with store.session() as s:
        run_id = s.scalars(select(JobRow).where(JobRow.name == "busy")).one().runs[0].id
    ctl = TurnsOnly(store, LocalRuntime())
    try:
        for full, queue in ((True, "_requeued_now"), (False, "_requeued")):
            ctl._busy.add(run_id)  # its lane is at work
            turns = ctl.turns.get(run_id, 0)
            ctl._hand_out([run_id], {}, wait=True, full=full)
            assert ctl.turns.get(run_id, 0) == turns  # not handed out twice at once
            ctl._busy.discard(run_id)
            ctl._lane(run_id, {})  # that lane's turn, ending
            assert getattr(ctl, queue) == {run_id}, (full, ctl._requeued_now, ctl._requeued)
            ctl._requeued_now.clear()
            ctl._requeued.clear()
    finally:
        ctl.stop_loop()
