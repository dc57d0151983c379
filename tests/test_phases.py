"""The Run state machine (``decide`` / ``failure_of``), table-driven.

Every row starts from three Workers of Job ``ppo`` (``ppo-head-0`` rank 0, ``ppo-pool-0`` rank 1,
``ppo-pool-1`` rank 2), all launched and alive, changes some of them, and names the transitions
``decide`` must return. Every returned chain must be allowed by ``ALLOWED``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from rlark.controller.phases import (
    ALLOWED,
    Phase,
    TERMINAL,
    RunView,
    WorkerView,
    decide,
    failure_of,
    is_ready,
    memory_text,
    settle,
)

NAMES = {0: "ppo-head-0", 1: "ppo-pool-0", 2: "ppo-pool-1"}


def workers(**changes: dict) -> list[WorkerView]:
    """``workers(r1=dict(alive=False))``: the three Workers, with rank 1 changed."""
    out = []
    for rank, name in NAMES.items():
        w = WorkerView(
            name=name,
            role="head" if rank == 0 else "pool",
            node_rank=rank,
            is_head=rank == 0,
            launched=True,
            alive=True,
        )
        out.append(replace(w, **changes.get(f"r{rank}", {})))
    return out


def failed(reason: str, message: str, ts: float = 10.0, **details) -> dict:
    """A bootstrap ``failed`` lifecycle line."""
    return {"event": "failed", "ts": ts, "reason": reason, "message": message, **details}


def finished(code: int, ts: float = 10.0, **oom) -> dict:
    return {"event": "run_finished", "ts": ts, "exit_code": code, **oom}


#: what a keeper adds to a line when the OOM killer killed in the Worker's memory cgroup (1Gi)
OOM = dict(oom_kills=1, memory_limit=1 << 30)


RUNNING_HEAD = dict(running=True)
GONE = dict(alive=False)
NOT_LAUNCHED = dict(launched=False, alive=False)


@dataclass
class Case:
    id: str
    phase: str
    workers: list[WorkerView]
    expected: list[tuple[str, str]]  # (to, reason) in order
    stop: bool = False
    in_message: list[str] = field(default_factory=list)  # must appear in the last message
    exit_code: int | None = None  # of the last transition


CASES = [
    # --- Starting -> Running ----------------------------------------------------------------------
    Case("starting-nothing-reported", "Starting", workers(), []),
    Case("starting-head-running-alive", "Starting", workers(r0=RUNNING_HEAD), [("Running", "AllJoined")],
         in_message=["ppo-head-0", "3"]),
    Case("starting-head-running-but-gone", "Starting",
         workers(r0=dict(running=True, alive=False, exit_code=1)), [("Failed", "HeadLost")],
         in_message=["ppo-head-0", "rank 0", "exited with code 1"], exit_code=1),
    Case("starting-workers-joined-but-no-running-line", "Starting", workers(r0=dict(running=False)), []),
    # --- Running -> Succeeded / Failed -------------------------------------------------------------
    Case("running-steady", "Running", workers(r0=RUNNING_HEAD), []),
    Case("running-succeeded", "Running", workers(r0=dict(running=True, run_finished=finished(0))),
         [("Succeeded", "Completed")], in_message=["ppo-head-0", "code 0"], exit_code=0),
    Case("running-succeeded-head-already-gone", "Running",
         workers(r0=dict(running=True, run_finished=finished(0), alive=False, exit_code=0)),
         [("Succeeded", "Completed")], exit_code=0),
    Case("running-succeeded-pool-torn-down-after", "Running",
         workers(r0=dict(running=True, run_finished=finished(0)), r1=dict(alive=False, exit_code=143)),
         [("Succeeded", "Completed")], exit_code=0),
    Case("running-run-failed-7", "Running", workers(r0=dict(running=True, run_finished=finished(7))),
         [("Failed", "RunFailed")], in_message=["ppo-head-0", "exited with code 7"], exit_code=7),
    Case("running-run-killed", "Running", workers(r0=dict(running=True, run_finished=finished(137))),
         [("Failed", "RunFailed")], in_message=["killed by signal 9"], exit_code=137),
    # the OOM killer: a SIGKILL with OOM kills counted by the keeper, in the Worker's own cgroup
    Case("running-run-oom-killed", "Running",
         workers(r0=dict(running=True, run_finished=finished(137, **OOM))),
         [("Failed", "OOMKilled")],
         in_message=["ppo-head-0", "rank 0", "run script", "OOM killer", "limit of 1Gi",
                     "resources.memory"], exit_code=137),
    Case("running-run-oom-killed-without-a-limit", "Running",
         workers(r0=dict(running=True, run_finished=finished(137, oom_kills=2))),
         [("Failed", "OOMKilled")], in_message=["ppo-head-0", "the machine ran out of memory"],
         exit_code=137),
    # OOM kills of other processes while the run script ended otherwise, or a line the workload
    # could have written (its channel unprotected): the run script's own status
    Case("running-run-exit-1-despite-oom-kills", "Running",
         workers(r0=dict(running=True, run_finished=finished(1, **OOM))),
         [("Failed", "RunFailed")], in_message=["exited with code 1"], exit_code=1),
    Case("running-run-oom-line-not-believed-untrusted", "Running",
         workers(r0=dict(running=True, run_finished=finished(137, **OOM), trusted=False,
                         alive=False, exit_code=137)),
         [("Failed", "RunFailed")], in_message=["killed by signal 9"], exit_code=137),
    Case("prepare-oom-killed", "Starting",
         workers(r2=dict(failed=failed("PrepareFailed", "prepare script was killed by signal 9",
                                       exit_code=137, status=80, **OOM))),
         [("Failed", "OOMKilled")],
         in_message=["ppo-pool-1", "rank 2", "prepare script", "OOM killer", "limit of 1Gi"],
         exit_code=137),
    Case("prepare-killed-without-oom-kills", "Starting",
         workers(r2=dict(failed=failed("PrepareFailed", "prepare script was killed by signal 9",
                                       exit_code=137, status=80))),
         [("Failed", "PrepareFailed")], in_message=["killed by signal 9"], exit_code=137),
    Case("node-lost-with-oom-kills-says-so", "Running",
         workers(r0=RUNNING_HEAD, r1=dict(joined=True, failed=failed(
             "NodeLost", "ray exited", exit_code=1, oom_kills=3, memory_limit=512 << 20))),
         [("Failed", "NodeLost")],
         in_message=["ppo-pool-0", "OOM killer killed 3 of this Worker's processes",
                     "memory limit 512Mi"],
         exit_code=1),
    Case("starting-running-succeeded-in-one-call", "Starting",
         workers(r0=dict(running=True, run_finished=finished(0), alive=False, exit_code=0)),
         [("Running", "AllJoined"), ("Succeeded", "Completed")], exit_code=0),
    Case("starting-running-failed-in-one-call", "Starting",
         workers(r0=dict(running=True, run_finished=finished(7))),
         [("Running", "AllJoined"), ("Failed", "RunFailed")], exit_code=7),
    # --- failures reported by a Worker ---------------------------------------------------------------
    Case("prepare-failed", "Starting",
         workers(r2=dict(failed=failed("PrepareFailed", "prepare script exited with code 3", exit_code=3))),
         [("Failed", "PrepareFailed")],
         in_message=["ppo-pool-1", "rank 2", "prepare script exited with code 3"], exit_code=3),
    Case("prepare-failed-worker-also-gone", "Starting",
         workers(r2=dict(alive=False, exit_code=80,
                         failed=failed("PrepareFailed", "prepare script exited with code 3", exit_code=3))),
         [("Failed", "PrepareFailed")], in_message=["ppo-pool-1"], exit_code=3),
    Case("join-timeout", "Starting",
         workers(r0=dict(failed=failed("JoinTimeout", "rank 2 did not join within 120 s",
                                       missing_ranks=[2], joined_ranks=[0, 1]))),
         [("Failed", "JoinTimeout")], in_message=["rank 2", "ppo-pool-1"]),
    Case("join-timeout-two-ranks", "Starting",
         workers(r0=dict(failed=failed("JoinTimeout", "ranks 1, 2 did not join", missing_ranks=[1, 2]))),
         [("Failed", "JoinTimeout")], in_message=["rank 1 (ppo-pool-0)", "rank 2 (ppo-pool-1)"]),
    Case("earliest-failed-line-wins", "Running",
         workers(r0=RUNNING_HEAD,
                 r1=dict(failed=failed("NodeLost", "ray exited", ts=20.0)),
                 r2=dict(failed=failed("PrepareFailed", "prepare exited", ts=5.0, exit_code=3))),
         [("Failed", "PrepareFailed")], in_message=["ppo-pool-1"], exit_code=3),
    Case("failed-line-beats-silent-loss", "Running",
         workers(r0=RUNNING_HEAD, r1=dict(alive=False, exit_code=137),
                 r2=dict(failed=failed("NodeLost", "ray exited"), joined=True)),
         [("Failed", "NodeLost")], in_message=["ppo-pool-1"]),
    Case("failed-line-beats-run-failed", "Running",
         workers(r0=dict(running=True, run_finished=finished(1)),
                 r1=dict(failed=failed("NodeLost", "ray exited"), joined=True)),
         [("Failed", "NodeLost")], in_message=["ppo-pool-0"]),
    # --- Workers gone without a word -------------------------------------------------------------
    Case("worker-lost-signal-9", "Running", workers(r0=RUNNING_HEAD, r1=dict(alive=False, exit_code=137)),
         [("Failed", "WorkerLost")], in_message=["ppo-pool-0", "rank 1", "killed by signal 9"], exit_code=137),
    Case("worker-lost-while-starting", "Starting", workers(r2=dict(alive=False, exit_code=1)),
         [("Failed", "WorkerLost")], in_message=["ppo-pool-1", "rank 2", "exited with code 1"], exit_code=1),
    Case("worker-lost-exit-unknown", "Running", workers(r0=RUNNING_HEAD, r2=GONE),
         [("Failed", "WorkerLost")], in_message=["rank 2"]),
    Case("head-lost", "Running", workers(r0=dict(running=True, alive=False, exit_code=137)),
         [("Failed", "HeadLost")], in_message=["ppo-head-0", "rank 0", "killed by signal 9"], exit_code=137),
    Case("head-lost-beats-worker-lost", "Running",
         workers(r0=dict(running=True, alive=False, exit_code=1), r1=GONE),
         [("Failed", "HeadLost")], in_message=["ppo-head-0"], exit_code=1),
    Case("not-launched-is-not-lost", "Starting", workers(r2=NOT_LAUNCHED), []),
    # --- stop ---------------------------------------------------------------------------------------
    Case("stop-from-pending", "Pending", workers(r0=NOT_LAUNCHED, r1=NOT_LAUNCHED, r2=NOT_LAUNCHED),
         [("Stopped", "StopRequested")], stop=True),
    # a queued Run's Workers exist (held back by the queue): they are stopped, then it is Stopped
    Case("stop-from-queued", "Pending", workers(), [("Stopping", "StopRequested")], stop=True),
    Case("stop-from-starting", "Starting", workers(), [("Stopping", "StopRequested")], stop=True),
    Case("stop-from-running", "Running", workers(r0=RUNNING_HEAD), [("Stopping", "StopRequested")], stop=True),
    Case("stop-beats-failure", "Running", workers(r0=RUNNING_HEAD, r1=GONE),
         [("Stopping", "StopRequested")], stop=True),
    Case("stopping-worker-still-alive", "Stopping", workers(r0=GONE, r1=GONE), [], stop=True),
    Case("stopping-all-gone", "Stopping", workers(r0=GONE, r1=GONE, r2=GONE), [("Stopped", "Stopped")], stop=True),
    Case("stopping-unlaunched-count-as-gone", "Stopping",
         workers(r0=GONE, r1=GONE, r2=NOT_LAUNCHED), [("Stopped", "Stopped")], stop=True),
    Case("stopping-ignores-failures", "Stopping",
         workers(r1=dict(failed=failed("NodeLost", "x"))), [], stop=True),
    # --- nothing happens ------------------------------------------------------------------------------
    Case("pending-waits-for-launch", "Pending",
         workers(r0=NOT_LAUNCHED, r1=NOT_LAUNCHED, r2=NOT_LAUNCHED), []),
    *[
        Case(f"terminal-{phase.lower()}-never-changes", phase,
             workers(r0=dict(running=True, alive=False, exit_code=1, run_finished=finished(0)),
                     r1=dict(failed=failed("NodeLost", "x")), r2=GONE),
             [], stop=True)
        for phase in sorted(TERMINAL)
    ],
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_decide(case: Case):
    run = RunView(phase=case.phase, stop_requested=case.stop, workers=case.workers)
    out = decide(run)
    assert [(t.to, t.reason) for t in out] == case.expected
    current = case.phase
    for t in out:
        assert t.to in ALLOWED.get(current, set()), f"{current} -> {t.to} is not allowed"
        assert t.message
        current = t.to
    if out:
        for piece in case.in_message:
            assert piece in out[-1].message, out[-1].message
        assert out[-1].exit_code == case.exit_code


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if not c.stop])
def test_decide_is_pure(case: Case):
    """Same view, same answer; and the view is not modified."""
    run = RunView(phase=case.phase, stop_requested=False, workers=case.workers)
    before = repr(run)
    assert decide(run) == decide(run)
    assert repr(run) == before


def test_terminal_phases_have_no_way_out():
    assert not (TERMINAL & set(ALLOWED))
    for targets in ALLOWED.values():
        assert targets <= {"Starting", "Running", "Succeeded", "Failed", "Stopping", "Stopped"}


def test_failure_of_healthy_run_is_none():
    run = RunView(phase="Running", stop_requested=False, workers=workers(r0=RUNNING_HEAD))
    assert failure_of(run) is None


def test_failure_of_success_is_none_even_with_workers_gone():
    run = RunView(
        phase="Running",
        stop_requested=False,
        workers=workers(r0=dict(run_finished=finished(0)), r1=GONE, r2=GONE),
    )
    assert failure_of(run) is None


def test_failure_of_stopped_worker_is_not_lost():
    """A Worker that said ``stopped`` before it went was stopped on purpose."""
    run = RunView(
        phase="Running",
        stop_requested=False,
        workers=workers(r0=RUNNING_HEAD, r1=dict(alive=False, stopped=True, exit_code=143)),
    )
    assert failure_of(run) is None


def test_failure_of_unknown_missing_rank_is_named():
    run = RunView(
        phase="Starting",
        stop_requested=False,
        workers=workers(r0=dict(failed=failed("JoinTimeout", "m", missing_ranks=[7]))),
    )
    assert "rank 7 (?)" in failure_of(run).message


def test_failure_after_successful_run_does_not_fail_it():
    run = RunView(
        phase="Running",
        stop_requested=False,
        workers=workers(
            r0=dict(running=True, run_finished=finished(0, ts=10.0)),
            r1=dict(alive=False, exit_code=86, failed=failed("NodeLost", "ray exited", ts=15.0)),
        ),
    )
    assert [(t.to, t.reason) for t in decide(run)] == [("Succeeded", "Completed")]


# --- the Run's join deadline (from launch, every rank) ------------------------------------------


def timed(now: float, phase: str = "Starting", **changes) -> RunView:
    """Launched at t=100 with joinTimeoutSeconds 60; observed at ``now``."""
    return RunView(phase=phase, stop_requested=False, workers=workers(**changes), now=now,
                   launched_at=100.0, join_timeout=60.0)


PREPARING_HEAD = dict(reported_phase="Preparing")
JOINED = dict(joined=True, reported_phase="RayStarted")


def test_join_deadline_names_a_head_still_in_its_prepare_script():
    run = timed(160.0, r0=PREPARING_HEAD, r1=dict(reported_phase="StartingRay"),
                r2=dict(reported_phase="StartingRay"))
    [t] = decide(run)
    assert (t.to, t.reason) == ("Failed", "JoinTimeout")
    assert t.message.startswith(
        "rank 0 (ppo-head-0), rank 1 (ppo-pool-0), rank 2 (ppo-pool-1) did not join the Ray "
        "cluster within 60 s of the launch (spec.failurePolicy.joinTimeoutSeconds)")
    assert "ppo-head-0: Preparing; ppo-pool-0: StartingRay" in t.message
    assert t.blamed == ("ppo-head-0", "ppo-pool-0", "ppo-pool-1") and t.worker == "ppo-head-0"


def test_join_deadline_names_only_the_missing_ranks():
    run = timed(170.0, r0=JOINED, r1=JOINED, r2=dict(reported_phase="Preparing"))
    [t] = decide(run)
    assert t.reason == "JoinTimeout" and t.message.startswith("rank 2 (ppo-pool-1) did not join")
    assert t.blamed == ("ppo-pool-1",)


@pytest.mark.parametrize("now, changes", [
    (159.9, dict(r0=PREPARING_HEAD)),  # not yet
    (200.0, dict(r0=JOINED, r1=JOINED, r2=JOINED)),  # all joined: the run script is starting
])
def test_join_deadline_not_due(now, changes):
    assert decide(timed(now, **changes)) == []


def test_join_deadline_only_while_starting():
    assert decide(timed(500.0, phase="Running", r0=dict(running=True, joined=True))) == []
    assert decide(RunView(phase="Starting", stop_requested=False, workers=workers())) == []


def test_a_workers_own_failure_comes_before_the_deadline():
    run = timed(170.0, r1=dict(failed=failed("PrepareFailed", "prepare script exited with code 1",
                                             exit_code=1, status=1)))
    [t] = decide(run)
    assert (t.reason, t.blamed, t.worker) == ("PrepareFailed", ("ppo-pool-0",), "ppo-pool-0")


def test_every_failure_names_the_worker_whose_lines_explain_it():
    cases = [
        (workers(r0=dict(running=True, run_finished=finished(3))), "ppo-head-0"),  # RunFailed
        (workers(r0=dict(running=True, alive=False, exit_code=137)), "ppo-head-0"),  # HeadLost
        (workers(r0=RUNNING_HEAD, r2=dict(alive=False, exit_code=1)), "ppo-pool-1"),  # WorkerLost
        (workers(r0=dict(failed=failed("JoinTimeout", "m", missing_ranks=[2, 1]))), "ppo-pool-1"),
    ]
    for ws, name in cases:
        t = failure_of(RunView(phase="Running", stop_requested=False, workers=ws))
        assert t.worker == name, t


# --- Workers settle with their Run ------------------------------------------------------------------


def _w(rank: int = 1, **changes) -> WorkerView:
    return workers(**{f"r{rank}": changes})[rank]


@pytest.mark.parametrize("worker, run_phase, run_reason, blamed, expected", [
    # the head's run script decides its own end
    (_w(0, running=True, run_finished=finished(0)), "Succeeded", "Completed", (),
     ("Succeeded", "Completed", "the run script exited with code 0", 0)),
    (_w(0, running=True, run_finished=finished(7), alive=False, exit_code=7), "Failed", "RunFailed",
     ("ppo-head-0",), ("Failed", "RunFailed", "the run script exited with code 7", 7)),
    # ... or the kernel's OOM killer ended it (counted by its keeper)
    (_w(0, running=True, run_finished=finished(137, **OOM), alive=False, exit_code=137), "Failed",
     "OOMKilled", ("ppo-head-0",),
     ("Failed", "OOMKilled", "the run script was killed by the kernel's OOM killer (signal 9): "
      "the Worker's memory use reached its limit of 1Gi; raise resources.memory", 137)),
    (_w(2, failed=failed("PrepareFailed", "prepare script was killed by signal 9", exit_code=137,
                         status=80, **OOM)), "Failed", "OOMKilled", ("ppo-pool-1",),
     ("Failed", "OOMKilled", "the prepare script was killed by the kernel's OOM killer (signal 9): "
      "the Worker's memory use reached its limit of 1Gi; raise resources.memory", 80)),
    # Workers RLark ends because the Run is over: no 143/137, a reason
    (_w(1), "Succeeded", "Completed", (),
     ("Completed", "StoppedByRLark", "stopped by RLark: its Run succeeded", None)),
    (_w(1), "Failed", "RunFailed", ("ppo-head-0",),
     ("Terminated", "StoppedByRLark", "stopped by RLark: its Run failed", None)),
    (_w(1, alive=False, stopped=True, exit_code=143), "Stopped", "Stopped", (),
     ("Stopped", "StoppedByRLark", "stopped by RLark: its Run was stopped", None)),
    (_w(1, alive=False, exit_code=137), "Stopped", "ServerShutdown", (),
     ("Stopped", "StoppedByRLark", "stopped by RLark: its Run was stopped", None)),
    # its own failure: its reason, and the status its failed line announced while still alive
    (_w(2, failed=failed("PrepareFailed", "prepare script exited with code 3", exit_code=3, status=3)),
     "Failed", "PrepareFailed", ("ppo-pool-1",), ("Failed", "PrepareFailed", "prepare script exited with code 3", 3)),
    (_w(2, alive=False, exit_code=80, failed=failed("PrepareFailed", "m", status=3)),
     "Failed", "PrepareFailed", ("ppo-pool-1",), ("Failed", "PrepareFailed", "m", 80)),
    # named by the Run's failure
    (_w(1, alive=False, exit_code=137), "Failed", "WorkerLost", ("ppo-pool-0",),
     ("Failed", "WorkerLost", "was killed by signal 9 before its Run ended", 137)),
    (_w(0, reported_phase="Preparing"), "Failed", "JoinTimeout", ("ppo-head-0",),
     ("Failed", "JoinTimeout", "its Ray node did not join the cluster in time; stopped by RLark", None)),
    # ended on its own before the Run did, not what ended it
    (_w(1, alive=False, exit_code=0), "Succeeded", "Completed", (), ("Exited", None, "exited with code 0", 0)),
    # never launched
    (_w(2, launched=False, alive=False), "Stopped", "StopRequested", (),
     ("Stopped", "NotLaunched", "never started: its Run was stopped first", None)),
    (_w(2, launched=False, alive=False), "Failed", "LaunchFailed", (),
     ("Terminated", "NotLaunched", "never started: its Run failed first", None)),
])
def test_settle(worker, run_phase, run_reason, blamed, expected):
    out = settle(worker, run_phase, run_reason, frozenset(blamed))
    assert (out.phase, out.reason, out.message, out.exit_code) == expected


@pytest.mark.parametrize("run_phase, phase, lifecycle, ready", [
    ("Running", "Joined", {}, True),
    ("Starting", "StartingRay", {"joined": True}, True),
    ("Starting", "StartingRay", {}, False),
    ("Succeeded", "Succeeded", {"joined": True}, True),
    ("Succeeded", "Completed", {"joined": True}, True),
    ("Stopped", "Stopped", {"joined": True}, False),  # a stopped Run has no ready Workers
    ("Failed", "Terminated", {"joined": True}, False),
    ("Failed", "Failed", {"joined": True}, False),
])
def test_is_ready(run_phase, phase, lifecycle, ready):
    assert is_ready(run_phase, phase, lifecycle) is ready


def test_a_ray_start_that_ends_before_its_node_joined_is_a_failed_start():
    line = failed("NodeLost", "`ray start --block` exited with code 1: this Ray node is gone",
                  exit_code=1)
    run = RunView(phase="Starting", stop_requested=False, workers=workers(r1=dict(failed=line)))
    [t] = decide(run)
    assert (t.reason, t.blamed) == ("RayStartFailed", ("ppo-pool-0",))
    assert t.message == ("Worker ppo-pool-0 (rank 1, role pool): `ray start` exited with code 1 "
                         "before its node joined the Ray cluster")
    # once it had joined, the same line is a lost node
    run = RunView(phase="Running", stop_requested=False,
                  workers=workers(r0=RUNNING_HEAD, r1=dict(failed=line, joined=True)))
    assert [x.reason for x in decide(run)] == ["NodeLost"]


@pytest.mark.parametrize("size, text", [
    (1 << 30, "1Gi"), (1500 << 20, "1500Mi"), (64 << 10, "64Ki"), (999997440, "976560Ki"),
    (1000, "1000 bytes"),
])
def test_memory_text_is_a_kubernetes_quantity_where_one_fits(size, text):
    assert memory_text(size) == text


# --- a Run waiting in its queue (Kubernetes with Kueue), and preemption ---------------------------


def _queued(admitted: bool, waited: float = 10.0, timeout: float | None = None,
            message: str = "queued in team: insufficient unused quota", **kw) -> RunView:
    from rlark.controller.phases import QueueWait

    return RunView(phase=Phase.Pending, stop_requested=kw.pop("stop", False),
                   workers=kw.pop("ws", None) or workers(),
                   queue=QueueWait(admitted, message, waited, timeout), **kw)


def test_a_queued_run_stays_pending_until_its_queue_admits_it():
    assert decide(_queued(False)) == []
    assert decide(RunView(phase=Phase.Pending, stop_requested=False, workers=workers())) == []
    [t] = decide(_queued(True, message="admitted by Kueue LocalQueue team (ClusterQueue cq)"))
    assert (t.to, t.reason) == ("Starting", "Launching")
    assert t.message == "admitted by Kueue LocalQueue team (ClusterQueue cq)"


def test_a_queue_wait_has_its_own_bound_default_none():
    assert decide(_queued(False, waited=10_000.0, timeout=None)) == []
    assert decide(_queued(False, waited=59.0, timeout=60.0)) == []
    [t] = decide(_queued(False, waited=60.0, timeout=60.0))
    assert (t.to, t.reason) == ("Failed", "QueueTimeout")
    assert t.message == ("not admitted within 60 s (spec.failurePolicy.queueTimeoutSeconds); "
                         "last: queued in team: insufficient unused quota")
    assert not t.reason.retryable
    # admitted at the last moment: it starts
    [t] = decide(_queued(True, waited=60.0, timeout=60.0))
    assert t.to == "Starting"


def test_a_queued_worker_deleted_by_someone_else_fails_the_run():
    ws = workers(r2=dict(alive=False, failed={"reason": "WorkerLost", "message": "Pod deleted",
                                               "ts": 1.0}))
    [t] = decide(_queued(True, ws=ws))
    assert (t.to, t.reason) == ("Failed", "WorkerLost")


def test_a_preemption_is_the_runs_failure_whatever_the_workers_said_as_they_went():
    said = "Kueue preempted the Run's Pod group by Workload ns/big-1: Preempted to accommodate"
    ws = workers(
        # the head saw rank 1's node go first and said so, before RLark saw the Pods' condition
        r0=dict(running=True, failed={"reason": "NodeLost", "message": "node lost", "ts": 5.0,
                                      "missing_ranks": [1]}),
        r1=dict(alive=False, preempted={"message": said, "ts": 7.0}),
        r2=dict(preempted={"message": said, "ts": 6.0}))
    [t] = decide(RunView(phase=Phase.Running, stop_requested=False, workers=ws))
    assert (t.to, t.reason, t.message) == ("Failed", "Preempted", said)
    assert t.blamed == ("ppo-pool-0",) and t.at == 7.0  # the first rank it reached
    assert not t.reason.retryable  # its own policy (failurePolicy.onPreemption) decides


def test_a_head_copying_its_outputs_out_is_waited_for_not_failed_by_the_nodes_its_end_took():
    """Issue 22: the head's run script ended (at t=10) and its keeper copies its copy-mode
    mounts out before it says ``run_finished``; meanwhile the other Workers lose the head's Ray
    node and fail (NodeLost). That ends the Run; the head's result decides how."""
    lost = dict(alive=False, exit_code=86, joined=True,
                failed=failed("NodeLost", "ray exited", ts=15.0))

    def run(head: dict, other: dict = lost) -> RunView:
        return RunView(phase="Running", stop_requested=False,
                       workers=workers(r0=dict(running=True, **head), r1=other, r2=GONE))

    assert decide(run(dict(copying_out=10.0))) == []
    assert [(t.to, t.reason) for t in decide(run(dict(copying_out=10.0, run_finished=finished(
        0, ts=10.0))))] == [("Succeeded", "Completed")]
    # the copy out failed: the head's own failure is the Run's
    [t] = decide(run(dict(copying_out=10.0, failed=failed("MountFailed", "copy out failed",
                                                          ts=70.0))))
    assert (t.to, t.reason) == ("Failed", "MountFailed")
    # a Worker that failed before the run script ended fails the Run as ever
    early = dict(lost, failed=failed("NodeLost", "ray exited", ts=5.0))
    assert [(t.to, t.reason) for t in decide(run(dict(copying_out=10.0), early))] == [
        ("Failed", "NodeLost")]
    # a head gone without saying its result; a head whose lines are within the workload's
    # reach (its copying_out is not believed)
    assert [(t.to, t.reason) for t in decide(run(dict(copying_out=10.0, alive=False,
                                                      exit_code=137)))] == [("Failed", "NodeLost")]
    assert [(t.to, t.reason) for t in decide(run(dict(copying_out=10.0, trusted=False)))] == [
        ("Failed", "NodeLost")]


def test_the_copying_out_line_is_read_and_reaches_the_heads_view():
    from rlark.controller.lifecycle import check_event
    from rlark.controller.observe import worker_view
    from rlark.store import RunRow, WorkerRow

    line = {"event": "copying_out", "ts": 12.5, "run_ended": 12.25}
    assert check_event(line) == line
    assert check_event({**line, "run_ended": "soon"}) is None
    assert check_event({**line, "run_ended": True}) is None
    run = RunRow(channel="keeper")
    head = WorkerRow(name="ppo-head-0", role="head", index=0, node_rank=0, is_head=True,
                     lifecycle={"copying_out": 12.25, "keeper": {"protected": True}})
    head.run = run
    assert worker_view(head).copying_out == 12.25
    head.lifecycle = {"copying_out": "12"}
    assert worker_view(head).copying_out is None
