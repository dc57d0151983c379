"""The Run state machine (pure: no I/O, no clock).

Phases (ARCHITECTURE.md): ``Pending`` -> ``Starting`` -> ``Running`` -> ``Succeeded`` | ``Failed``;
``Stopping`` -> ``Stopped`` from any non-terminal phase. :func:`decide` looks at what the Workers
reported (their lifecycle lines) and what the runtime observed (alive / exit code) and returns the
transitions to make, each with a reason and a message naming the Worker. Fail closed: a Run is
``Running`` only while the head is alive and has started the run script.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Phase(str, Enum):
    pending = "Pending"
    starting = "Starting"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    stopping = "Stopping"
    stopped = "Stopped"


TERMINAL = frozenset({Phase.succeeded.value, Phase.failed.value, Phase.stopped.value})
ACTIVE = frozenset(
    {Phase.pending.value, Phase.starting.value, Phase.running.value, Phase.stopping.value}
)

#: transitions the state machine allows (from -> to); everything else is a bug
ALLOWED = {
    Phase.pending.value: {Phase.starting.value, Phase.failed.value, Phase.stopping.value, Phase.stopped.value},
    Phase.starting.value: {Phase.running.value, Phase.failed.value, Phase.stopping.value},
    Phase.running.value: {Phase.succeeded.value, Phase.failed.value, Phase.stopping.value},
    Phase.stopping.value: {Phase.stopped.value},
}


class WorkerPhase(str, Enum):
    pending = "Pending"  # not started yet
    starting = "Starting"  # process launched, nothing reported yet
    preparing = "Preparing"  # prepare script running
    waiting = "WaitingForHead"
    ray_starting = "StartingRay"
    ray_started = "RayStarted"  # its Ray node is up
    joined = "Joined"  # the head saw its node in the cluster
    running = "Running"  # head only: the run script is running
    succeeded = "Succeeded"
    failed = "Failed"
    stopped = "Stopped"  # stopped by a user's stop/restart/delete or a server shutdown
    exited = "Exited"  # its process ended
    completed = "Completed"  # stopped by RLark after its Run succeeded
    terminated = "Terminated"  # stopped by RLark after its Run failed


def has_joined(phase: str | None, lifecycle: dict | None) -> bool:
    """Whether a Worker's Ray node joined its Run's cluster, now or before it ended (what
    "Workers joined k/N" and a Task's ready count show): a joined phase, or a ``joined``
    lifecycle event from its bootstrap."""
    return phase in ("Joined", "Running", "Succeeded") or bool((lifecycle or {}).get("joined"))


@dataclass
class WorkerView:
    """One Worker as the state machine sees it."""

    name: str
    role: str
    node_rank: int
    is_head: bool
    launched: bool = False
    alive: bool = False
    exit_code: int | None = None
    failed: dict | None = None  # the bootstrap's ``failed`` line
    running: bool = False  # head: ``running`` line seen
    run_finished: dict | None = None  # head: ``run_finished`` line
    stopped: bool = False  # the bootstrap's ``stopped`` line

    @property
    def gone(self) -> bool:
        return self.launched and not self.alive

    def label(self) -> str:
        return f"Worker {self.name} (rank {self.node_rank}, role {self.role})"


@dataclass
class RunView:
    phase: str
    stop_requested: bool
    workers: list[WorkerView] = field(default_factory=list)

    @property
    def head(self) -> WorkerView | None:
        return next((w for w in self.workers if w.is_head), None)


@dataclass(frozen=True)
class Transition:
    to: str
    reason: str
    message: str
    exit_code: int | None = None


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exited"
    if code > 128:
        return f"was killed by signal {code - 128}"
    return f"exited with code {code}"


def failure_of(run: RunView) -> Transition | None:
    """The failure that ends this Run, if any, in order of evidence:

    1. the earliest ``failed`` line of any Worker (PrepareFailed, JoinTimeout rank 2, ...);
    2. the head's run script ending non-zero (``RunFailed``);
    3. a Worker process gone without a word: the head (``HeadLost``) or another (``WorkerLost``).
    """
    head = run.head
    finished_at = head.run_finished.get("ts") if head and head.run_finished else None
    reported = [
        w for w in run.workers
        if w.failed and (finished_at is None or w.failed.get("ts", 0.0) <= finished_at)
    ]
    if reported:
        first = min(reported, key=lambda w: w.failed.get("ts", 0.0))
        f = first.failed
        reason = f.get("reason", "WorkerFailed")
        message = f"{first.label()}: {f.get('message', reason)}"
        if reason in ("JoinTimeout", "NodeLost") and f.get("missing_ranks"):
            names = {w.node_rank: w.name for w in run.workers}
            missing = ", ".join(f"rank {r} ({names.get(r, '?')})" for r in f["missing_ranks"])
            what = ("did not join the Ray cluster in time" if reason == "JoinTimeout"
                    else "left the Ray cluster (Ray's health checks fail)")
            message = f"{missing} {what}; {f.get('message', '')}"
        code = f.get("exit_code")
        return Transition(Phase.failed.value, reason, message, code if isinstance(code, int) else None)
    if head and head.run_finished is not None:
        code = head.run_finished.get("exit_code")
        if code != 0:
            return Transition(
                Phase.failed.value,
                "RunFailed",
                f"the run script on {head.name} {_exit_text(code)}",
                code,
            )
        return None
    if head and head.gone and not head.stopped:
        return Transition(
            Phase.failed.value,
            "HeadLost",
            f"{head.label()} {_exit_text(head.exit_code)} before the run script finished",
            head.exit_code,
        )
    for w in run.workers:
        if not w.is_head and w.gone and not w.stopped:
            return Transition(
                Phase.failed.value,
                "WorkerLost",
                f"{w.label()} {_exit_text(w.exit_code)}; its Ray node left the cluster",
                w.exit_code,
            )
    return None


def decide(run: RunView) -> list[Transition]:
    """Transitions to apply now, in order (possibly several: Starting -> Running -> Succeeded
    when both lines arrived in one observation). Empty when nothing changes."""
    out: list[Transition] = []
    phase = run.phase

    def go(t: Transition) -> None:
        nonlocal phase
        out.append(t)
        phase = t.to

    if phase in TERMINAL:
        return out
    if phase == Phase.stopping.value:
        if all(not w.launched or w.gone for w in run.workers):
            go(Transition(Phase.stopped.value, "Stopped", "all Workers have stopped"))
        return out
    if run.stop_requested:
        if phase == Phase.pending.value:
            go(Transition(Phase.stopped.value, "StopRequested", "stopped before any Worker started"))
        else:
            go(Transition(Phase.stopping.value, "StopRequested", "stop requested; stopping Workers"))
        return out
    if phase == Phase.pending.value:
        return out  # the controller launches Workers, then records Starting
    head = run.head
    if phase == Phase.starting.value and head and head.running and not (head.gone and head.run_finished is None):
        go(Transition(Phase.running.value, "AllJoined",
                      f"all {len(run.workers)} Ray nodes joined; the run script started on {head.name}"))
    failure = failure_of(run)
    if failure is not None:
        go(failure)
        return out
    if phase == Phase.running.value and head and head.run_finished is not None:
        go(Transition(Phase.succeeded.value, "Completed",
                      f"the run script on {head.name} exited with code 0", 0))
    return out


def worker_phase(w: WorkerView, last_reported: str | None, joined: bool) -> str:
    """A Worker's phase from its lifecycle lines and liveness (for display)."""
    if w.failed:
        return WorkerPhase.failed.value
    if w.run_finished is not None:
        return (WorkerPhase.succeeded if w.run_finished.get("exit_code") == 0 else WorkerPhase.failed).value
    if w.stopped:
        return WorkerPhase.stopped.value
    if w.gone:
        return WorkerPhase.exited.value if w.exit_code in (0, 143, 137) else WorkerPhase.failed.value
    if not w.launched:
        return WorkerPhase.pending.value
    if w.running:
        return WorkerPhase.running.value
    if joined:
        return WorkerPhase.joined.value
    return last_reported or WorkerPhase.starting.value
