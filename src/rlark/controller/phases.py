"""The Run state machine (pure: no I/O, no clock).

Phases (ARCHITECTURE.md): ``Pending`` -> ``Starting`` -> ``Running`` -> ``Succeeded`` | ``Failed``;
``Stopping`` -> ``Stopped`` from any non-terminal phase. :func:`decide` looks at what the Workers
reported (their lifecycle lines) and what the runtime observed (alive / exit code) and returns the
transitions to make, each with a reason and a message naming the Worker. Fail closed: a Run is
``Running`` only while the head is alive and has started the run script.

The clock comes in as data (:attr:`RunView.now`): the join deadline is the Run's, counted from its
launch, and :func:`decide` enforces it for every rank, the head included. When a Run ends,
:func:`settle` gives every Worker its final phase, reason and exit code (nothing about a Worker
changes after its Run is terminal).
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


#: the reason of a Worker RLark itself ended because its Run was over (not a failure of its own)
STOPPED_BY_RLARK = "StoppedByRLark"


def has_joined(phase: str | None, lifecycle: dict | None) -> bool:
    """Whether a Worker's Ray node joined its Run's cluster, now or before it ended: a joined
    phase, or a ``joined`` lifecycle event from its bootstrap."""
    return phase in ("Joined", "Running", "Succeeded") or bool((lifecycle or {}).get("joined"))


def is_ready(run_phase: str | None, phase: str | None, lifecycle: dict | None) -> bool:
    """Whether a Worker counts as ready in "Workers ready k/N" and a Task's ready count.

    While its Run is active: its Ray node joined (:func:`has_joined`). Once the Run is over:
    only a Worker that did its part to the end (``Succeeded``, or ``Completed``: stopped by RLark
    after its Run succeeded); a stopped or failed Run shows no ready Workers.
    """
    if run_phase in TERMINAL:
        return phase in (WorkerPhase.succeeded.value, WorkerPhase.completed.value)
    return has_joined(phase, lifecycle)


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
    joined: bool = False  # the head saw its Ray node in the cluster
    reported_phase: str | None = None  # the last ``phase`` line (Preparing, StartingRay, ...)

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
    #: seconds since the epoch: now, and when the Run's Workers were launched (None: not yet)
    now: float | None = None
    launched_at: float | None = None
    #: spec.failurePolicy.joinTimeoutSeconds: every rank must have joined this long after launch
    join_timeout: float | None = None

    @property
    def head(self) -> WorkerView | None:
        return next((w for w in self.workers if w.is_head), None)


@dataclass(frozen=True)
class Transition:
    to: str
    reason: str
    message: str
    exit_code: int | None = None
    #: the Workers this failure is about (a missing rank, the one that reported); the first one's
    #: last log lines explain it
    blamed: tuple[str, ...] = ()

    @property
    def worker(self) -> str | None:
        """The Worker whose last log lines go with this failure (None: no Worker to blame)."""
        return self.blamed[0] if self.blamed else None


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

    The transition's ``worker`` is the Worker to blame: the one that reported, or for a missing
    rank the first Worker that did not join (its log says why).
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
        blame = (first.name,)
        if reason == "NodeLost" and not f.get("missing_ranks") and not first.joined:
            # its own `ray start` ended before its node ever joined (e.g. Ray's "The current
            # node timed out during startup"): a failed start, not a lost node
            reason = "RayStartFailed"
            message = (f"{first.label()}: `ray start` exited with code {f.get('exit_code')} "
                       "before its node joined the Ray cluster")
        if reason in ("JoinTimeout", "NodeLost") and f.get("missing_ranks"):
            names = {w.node_rank: w.name for w in run.workers}
            missing = ", ".join(f"rank {r} ({names.get(r, '?')})" for r in f["missing_ranks"])
            what = ("did not join the Ray cluster in time" if reason == "JoinTimeout"
                    else "left the Ray cluster (Ray's health checks fail)")
            message = f"{missing} {what}; {f.get('message', '')}"
            blame = tuple(names[r] for r in f["missing_ranks"] if r in names) or blame
        code = f.get("exit_code")
        return Transition(Phase.failed.value, reason, message,
                          code if isinstance(code, int) else None, blamed=blame)
    if head and head.run_finished is not None:
        code = head.run_finished.get("exit_code")
        if code != 0:
            return Transition(
                Phase.failed.value,
                "RunFailed",
                f"the run script on {head.name} {_exit_text(code)}",
                code,
                blamed=(head.name,),
            )
        return None
    if head and head.gone and not head.stopped:
        return Transition(
            Phase.failed.value,
            "HeadLost",
            f"{head.label()} {_exit_text(head.exit_code)} before the run script finished",
            head.exit_code,
            blamed=(head.name,),
        )
    for w in run.workers:
        if not w.is_head and w.gone and not w.stopped:
            return Transition(
                Phase.failed.value,
                "WorkerLost",
                f"{w.label()} {_exit_text(w.exit_code)}; its Ray node left the cluster",
                w.exit_code,
                blamed=(w.name,),
            )
    return None


def join_deadline(run: RunView) -> float | None:
    """When every rank must have joined: launch + ``joinTimeoutSeconds`` (None: not launched)."""
    if run.launched_at is None or run.join_timeout is None:
        return None
    return run.launched_at + run.join_timeout


def join_timeout_of(run: RunView) -> Transition | None:
    """``JoinTimeout`` when a Starting Run's join deadline (:func:`join_deadline`) has passed and
    some rank's Ray node has not joined, whatever that Worker is doing (a head still in its
    prepare script included). Names every missing rank with what it last reported; the Worker
    to blame is the first missing rank."""
    deadline = join_deadline(run)
    if run.phase != Phase.starting.value or deadline is None or run.now is None or run.now < deadline:
        return None
    head = run.head
    if head is not None and head.running:
        return None  # every node joined and the run script started
    missing = sorted((w for w in run.workers if not w.joined), key=lambda w: w.node_rank)
    if not missing:
        return None  # all joined; the head is starting the run script now
    ranks = ", ".join(f"rank {w.node_rank} ({w.name})" for w in missing)
    doing = "; ".join(
        f"{w.name}: {w.reported_phase or ('not started' if not w.launched else 'starting')}"
        for w in missing)
    return Transition(
        Phase.failed.value, "JoinTimeout",
        f"{ranks} did not join the Ray cluster within {run.join_timeout:g} s of the launch "
        f"(spec.failurePolicy.joinTimeoutSeconds); last reported: {doing}",
        blamed=tuple(w.name for w in missing),
    )


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
                      f"all {len(run.workers)} Ray node{'s' if len(run.workers) != 1 else ''} joined; "
                      f"the run script started on {head.name}"))
    failure = failure_of(run) or join_timeout_of(run)
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


@dataclass(frozen=True)
class Settled:
    """A Worker's final status once its Run is over."""

    phase: str
    reason: str
    message: str
    exit_code: int | None


#: what a Worker's own ``failed`` line or run script may have ended it with; everything else
#: about a Worker whose Run ended while it was still alive is RLark's doing
_RLARK_ENDED = {
    Phase.succeeded.value: (WorkerPhase.completed.value, "its Run succeeded"),
    Phase.failed.value: (WorkerPhase.terminated.value, "its Run failed"),
    Phase.stopped.value: (WorkerPhase.stopped.value, "its Run was stopped"),
}


#: why a Worker the Run's failure names, still alive when the Run failed, is to blame
_BLAMED_ALIVE = {
    "JoinTimeout": "its Ray node did not join the cluster in time",
    "NodeLost": "Ray saw its node leave the cluster",
}


def settle(w: WorkerView, run_phase: str, run_reason: str = "",
           blamed: tuple[str, ...] | frozenset[str] = ()) -> Settled:
    """The final phase, reason, message and exit code of a Worker whose Run just reached the
    terminal ``run_phase`` (pure; applied once, nothing about the Worker changes afterwards).

    * A Worker that ended the Run on its own keeps its own outcome: its ``failed`` line
      (reason and message; exit code: the one it exited with, else the status the bootstrap
      announced in that line), or the head's run script (``Succeeded``/``Failed`` with the
      script's exit code).
    * A Worker the Run's failure names (``blamed``: a rank that did not join, a lost head...) is
      ``Failed`` with the Run's reason, and the code it exited with if it is gone.
    * A Worker RLark ends because its Run is over, or that ended while its Run was stopping, is
      ``Completed`` / ``Terminated`` / ``Stopped`` with reason ``StoppedByRLark`` and no exit
      code: the 143 or 137 it may exit with is RLark's signal, not the Worker's result.
    * A Worker never launched is ``Terminated``/``Stopped`` with reason ``NotLaunched``.
    """
    phase_if_ended, why = _RLARK_ENDED.get(run_phase, (WorkerPhase.stopped.value, "its Run ended"))

    def code(line_code: int | None) -> int | None:
        return w.exit_code if w.gone and w.exit_code is not None else line_code

    if w.failed:
        status = w.failed.get("status")
        return Settled(WorkerPhase.failed.value, w.failed.get("reason", "WorkerFailed"),
                       w.failed.get("message", ""), code(status if isinstance(status, int) else None))
    if w.run_finished is not None:
        ran = w.run_finished.get("exit_code")
        ok = ran == 0
        return Settled(WorkerPhase.succeeded.value if ok else WorkerPhase.failed.value,
                       "Completed" if ok else "RunFailed", f"the run script {_exit_text(ran)}",
                       code(ran if isinstance(ran, int) else None))
    if not w.launched:
        return Settled(phase_if_ended, "NotLaunched", f"never started: {why} first", None)
    if w.name in blamed:
        if w.gone:
            return Settled(WorkerPhase.failed.value, run_reason or "WorkerLost",
                           f"{_exit_text(w.exit_code)} before its Run ended", w.exit_code)
        what = _BLAMED_ALIVE.get(run_reason, f"{run_reason or 'its Run failed'} (named by the Run)")
        return Settled(WorkerPhase.failed.value, run_reason or "WorkerFailed",
                       f"{what}; stopped by RLark", None)
    if w.gone and not w.stopped and run_phase != Phase.stopped.value:
        # ended without a word, but not what ended the Run (e.g. after the run script finished)
        return Settled(WorkerPhase.exited.value, "", _exit_text(w.exit_code), w.exit_code)
    return Settled(phase_if_ended, STOPPED_BY_RLARK, f"stopped by RLark: {why}", None)
