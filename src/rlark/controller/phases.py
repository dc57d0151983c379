"""The Run state machine (pure: no I/O, no clock).

Long because: it is the whole state machine — every Worker report and runtime observation a
Run's phase turns on, and their precedence (preemption, copy out, queue waits) — kept in one
place so that the order of the rules can be read and tested as one table.

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
from typing import Any

from rlark.controller.exits import exit_text as _exit_text, memory_text, oom_killed, oom_note
from rlark.status import (
    ACTIVE,
    TERMINAL,
    ConditionType,
    Phase,
    Reason,
    WorkerPhase,
    has_joined,
    is_ready,
    reported_reason,
)

__all__ = ["ACTIVE", "ALLOWED", "TERMINAL", "Phase", "Reason", "WorkerPhase", "RunView",
           "WorkerView", "Transition", "Settled", "decide", "failure_of", "join_deadline",
           "join_timeout_of", "settle", "worker_phase", "has_joined", "is_ready", "ConditionUpdate",
           "observed_conditions", "failure_conditions", "run_result", "unresponsive",
           "UNRESPONSIVE_AFTER", "oom_killed", "oom_note", "memory_text", "QueueWait",
           "queue_timeout_of"]

#: transitions the state machine allows (from -> to); everything else is a bug
ALLOWED: dict[Phase, frozenset[Phase]] = {
    Phase.Pending: frozenset({Phase.Starting, Phase.Failed, Phase.Stopping, Phase.Stopped}),
    Phase.Starting: frozenset({Phase.Running, Phase.Failed, Phase.Stopping}),
    Phase.Running: frozenset({Phase.Succeeded, Phase.Failed, Phase.Stopping}),
    Phase.Stopping: frozenset({Phase.Stopped}),
}


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
    failed: dict[str, Any] | None = None  # the bootstrap's (or the runtime's) ``failed`` line
    running: bool = False  # head: ``running`` line seen
    running_at: float | None = None  # head: when the keeper started the run script (its line's ts)
    run_finished: dict[str, Any] | None = None  # head: ``run_finished`` line
    #: head: when its run script ended by itself while its keeper holds ``run_finished`` until
    #: its copy-mode mounts are copied out (the ``copying_out`` line's ``run_ended``)
    copying_out: float | None = None
    stopped: bool = False  # the bootstrap's ``stopped`` line
    joined: bool = False  # the head saw its Ray node in the cluster
    reported_phase: WorkerPhase | None = None  # the last ``phase`` line (Preparing, StartingRay, ...)
    #: its lifecycle lines are out of the workload's reach (its keeper said its channel is
    #: protected, or an older Run's lines carry the Run's token): ``run_finished`` is believed
    #: at once; else only once the runtime saw the Worker's own exit status
    trusted: bool = True
    #: its keeper's heartbeat (seconds; None: it sends none, e.g. an older keeper), when RLark
    #: last read a line of it (server clock), and since when its keeper says its workload's
    #: processes are stopped (None: they are not)
    heartbeat: float | None = None
    last_seen: float | None = None
    stopped_since: float | None = None
    #: the runtime saw its queue take the Run's admission back and delete its Pod (Kueue's
    #: preemption): ``{"message", "ts"}``; it explains every other failure that follows
    preempted: dict[str, Any] | None = None

    @property
    def gone(self) -> bool:
        return self.launched and not self.alive

    def label(self) -> str:
        return f"Worker {self.name} (rank {self.node_rank}, role {self.role})"


@dataclass(frozen=True)
class QueueWait:
    """What the queue says of a Run whose Workers wait in it for admission: ``admitted`` (the
    whole group may start now), ``message`` (while queued: the ``Queued`` message; once
    admitted: what admitted it), ``waited`` (seconds since the Run was created) and
    ``timeout`` (``failurePolicy.queueTimeoutSeconds``; None: no bound); ``failure``: RLark
    cannot follow the queue (``(reason, message)``, e.g. ``Forbidden``): the Run fails."""

    admitted: bool
    message: str
    waited: float
    timeout: float | None = None
    failure: tuple[Reason, str] | None = None


@dataclass
class RunView:
    phase: Phase
    stop_requested: bool
    workers: list[WorkerView] = field(default_factory=list)
    #: seconds since the epoch: now, and when the Run's Workers were launched (None: not yet)
    now: float | None = None
    launched_at: float | None = None
    #: spec.failurePolicy.joinTimeoutSeconds: every rank must have joined this long after launch
    join_timeout: float | None = None
    #: spec.failurePolicy.unresponsiveTimeoutSeconds (0 or None: never fail for it)
    unresponsive_timeout: float | None = None
    #: a Pending Run whose Workers exist and wait in a queue for admission (Kubernetes with
    #: Kueue); None: not such a Run
    queue: QueueWait | None = None

    @property
    def head(self) -> WorkerView | None:
        return next((w for w in self.workers if w.is_head), None)


@dataclass(frozen=True)
class Transition:
    """A change of a Run's phase, with its reason (strings are taken as the enums' values and
    refused with ValueError when they are not one)."""

    to: Phase
    reason: Reason
    message: str
    exit_code: int | None = None
    #: the Workers this failure is about (a missing rank, the one that reported); the first one's
    #: last log lines explain it
    blamed: tuple[str, ...] = ()
    #: when it happened (seconds since the epoch) as the Workers' own lines say, where they say
    #: (a Run that ended while no server watched it ended then, not when a server read it)
    at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "to", Phase(self.to))
        object.__setattr__(self, "reason", Reason(self.reason))

    @property
    def worker(self) -> str | None:
        """The Worker whose last log lines go with this failure (None: no Worker to blame)."""
        return self.blamed[0] if self.blamed else None


def run_result(head: WorkerView) -> int | None:
    """The head's run script exit status as RLark believes it: its keeper's ``run_finished``
    when the line is out of the workload's reach (:attr:`WorkerView.trusted`); otherwise the
    exit status the runtime observed once the head is gone (the keeper exits with the run
    script's status), so a forged line decides nothing. None: not known (yet)."""
    if head.run_finished is None:
        return None
    if head.trusted:
        code = head.run_finished.get("exit_code")
        return code if isinstance(code, int) else None
    return head.exit_code if head.gone else None


def failure_of(run: RunView) -> Transition | None:
    """The failure that ends this Run, if any, in order of evidence:

    0. its queue preempted it (``Preempted``: the runtime saw Kueue delete its Pods), which
       explains whatever the Workers reported as their Pods went;
    1. the earliest ``failed`` line of any Worker (PrepareFailed, JoinTimeout rank 2, ...;
       ``OOMKilled`` for a prepare script the kernel's OOM killer killed: :func:`oom_killed`);
    2. the head's run script ending non-zero (``RunFailed``; ``OOMKilled`` when the kernel's
       OOM killer killed it);
    3. a Worker process gone without a word: the head (``HeadLost``) or another (``WorkerLost``).

    The transition's ``worker`` is the Worker to blame: the one that reported, or for a missing
    rank the first Worker that did not join (its log says why).
    """
    head = run.head
    preempted = sorted((w for w in run.workers if w.preempted), key=lambda w: w.node_rank)
    if preempted:
        # the queue deleted every Pod of the Run: whatever the Workers said as they went
        # (a node lost, a join that failed) followed from it
        first = preempted[0]
        said = str((first.preempted or {}).get("message") or "")
        return Transition(Phase.Failed, Reason.Preempted, said or f"{first.label()} was preempted",
                          blamed=(first.name,), at=_when(first.preempted))
    finished_at = head.run_finished.get("ts") if head and head.run_finished else None
    # a head whose run script ended by itself and whose keeper now copies its outputs out: its
    # Ray node is gone, so the other Workers' nodes fail (NodeLost); that is the Run ending,
    # not a failure of it, and the Run's result waits for the head (its keeper's line is out of
    # the workload's reach, and it exits within RLARK_OBJECT_SYNC_SECONDS)
    copying = (head is not None and head.trusted and head.run_finished is None
               and head.copying_out is not None and not head.gone)
    cut = finished_at if finished_at is not None else head.copying_out if copying and head else None
    reported = [
        w for w in run.workers
        if w.failed and (cut is None or w.failed.get("ts", 0.0) <= cut
                         or (copying and w.is_head))
    ]
    if reported:
        first = min(reported, key=lambda w: (w.failed or {}).get("ts", 0.0))
        f = first.failed or {}
        reason, said = reported_reason(f.get("reason"), str(f.get("message") or ""))
        message = f"{first.label()}: {said or reason}"
        blame: tuple[str, ...] = (first.name,)
        if reason == Reason.NodeLost and not f.get("missing_ranks") and not first.joined:
            # its own `ray start` ended before its node ever joined (e.g. Ray's "The current
            # node timed out during startup"): a failed start, not a lost node
            reason = Reason.RayStartFailed
            message = (f"{first.label()}: `ray start` exited with code {f.get('exit_code')} "
                       "before its node joined the Ray cluster")
        if reason in (Reason.JoinTimeout, Reason.NodeLost) and f.get("missing_ranks"):
            names = {w.node_rank: w.name for w in run.workers}
            missing = ", ".join(f"rank {r} ({names.get(r, '?')})" for r in f["missing_ranks"])
            what = ("did not join the Ray cluster in time" if reason == Reason.JoinTimeout
                    else "left the Ray cluster (Ray's health checks fail)")
            message = f"{missing} {what}; {f.get('message', '')}"
            blame = tuple(names[r] for r in f["missing_ranks"] if r in names) or blame
        code = f.get("exit_code")
        oom = oom_killed(f, code, "the prepare script") if reason == Reason.PrepareFailed else None
        if oom is not None:
            reason, message = Reason.OOMKilled, f"{first.label()}: {oom}"
        else:
            message += oom_note(f)
        return Transition(Phase.Failed, reason, message,
                          code if isinstance(code, int) else None, blamed=blame, at=_when(f))
    if head and head.run_finished is not None:
        code = run_result(head)
        if code is None and not head.gone:
            return None  # the runtime has not seen the head exit yet
        oom = oom_killed(head.run_finished, code, "the run script") if head.trusted else None
        if oom is not None:
            return Transition(Phase.Failed, Reason.OOMKilled, f"{head.label()}: {oom}", code,
                              blamed=(head.name,), at=_when(head.run_finished))
        if code != 0:
            return Transition(
                Phase.Failed,
                Reason.RunFailed,
                f"the run script on {head.name} {_exit_text(code)}",
                code,
                blamed=(head.name,),
                at=_when(head.run_finished),
            )
        return None
    if copying:
        return None
    if head and head.gone and not head.stopped:
        return Transition(
            Phase.Failed,
            Reason.HeadLost,
            f"{head.label()} {_exit_text(head.exit_code)} before the run script finished",
            head.exit_code,
            blamed=(head.name,),
        )
    for w in run.workers:
        if not w.is_head and w.gone and not w.stopped:
            return Transition(
                Phase.Failed,
                Reason.WorkerLost,
                f"{w.label()} {_exit_text(w.exit_code)}; its Ray node left the cluster",
                w.exit_code,
                blamed=(w.name,),
            )
    return None


def _when(line: dict[str, Any] | None) -> float | None:
    """A lifecycle line's own time (``ts``), when it has a number there."""
    ts = (line or {}).get("ts")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


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
    if run.phase != Phase.Starting or deadline is None or run.now is None or run.now < deadline:
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
        Phase.Failed, Reason.JoinTimeout,
        f"{ranks} did not join the Ray cluster within {run.join_timeout:g} s of the launch "
        f"(spec.failurePolicy.joinTimeoutSeconds); last reported: {doing}",
        blamed=tuple(w.name for w in missing),
        at=deadline,
    )


#: seconds of silence (no line from a Worker whose keeper sends heartbeats) or of stopped
#: processes after which a Worker counts as unresponsive: its Run's Responsive condition turns
#: False (three of the keeper's 10 s heartbeats)
UNRESPONSIVE_AFTER = 30.0


def silence(w: WorkerView, now: float) -> tuple[float, str] | None:
    """How long ``w`` has shown no sign of life, and what that means, for a launched Worker still
    alive whose keeper sends heartbeats: since RLark last read a line of it, or since its keeper
    said its processes are stopped, whichever is longer. None when it is not silent at all."""
    if not w.heartbeat or not w.launched or w.gone or w.last_seen is None:
        return None
    quiet = (now - w.last_seen, f"no line from its keeper since {_clock(w.last_seen)} (it "
                                 f"sends one every {w.heartbeat:g} s)")
    if w.stopped_since is not None and now - w.stopped_since > quiet[0]:
        return now - w.stopped_since, f"its processes are stopped since {_clock(w.stopped_since)}"
    return quiet


def _clock(ts: float) -> str:
    """``2026-12-01T16:07:08Z``: a time in messages that do not change while it stays true."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unresponsive(run: RunView, bound: float = UNRESPONSIVE_AFTER) -> list[tuple[WorkerView, float, str]]:
    """The Workers silent for at least ``bound`` seconds (:func:`silence`), ``(worker, seconds,
    why)`` in rank order."""
    if run.now is None:
        return []
    out = []
    for w in sorted(run.workers, key=lambda x: x.node_rank):
        quiet = silence(w, run.now)
        if quiet is not None and quiet[0] >= bound:
            out.append((w, quiet[0], quiet[1]))
    return out


def unresponsive_failure(run: RunView) -> Transition | None:
    """``WorkerUnresponsive`` when a Worker of a Starting or Running Run has been silent for
    ``failurePolicy.unresponsiveTimeoutSeconds``: a frozen Worker (SIGSTOP, a hung machine)
    answers nothing and would hold its Run forever otherwise."""
    limit = run.unresponsive_timeout
    if not limit or run.phase not in (Phase.Starting, Phase.Running):
        return None
    found = unresponsive(run, max(limit, UNRESPONSIVE_AFTER))
    if not found:
        return None
    names = "; ".join(f"{w.label()}: {why}" for w, _, why in found)
    return Transition(Phase.Failed, Reason.WorkerUnresponsive,
                      f"{names}; failurePolicy.unresponsiveTimeoutSeconds is {limit:g} s",
                      blamed=tuple(w.name for w, _, _ in found))


def queue_timeout_of(waited: float, timeout: float | None, message: str) -> Transition | None:
    """``QueueTimeout`` once a Run not yet admitted has waited ``waited`` seconds, at least its
    ``failurePolicy.queueTimeoutSeconds`` (``timeout``; None: no bound); ``message``: what its
    queue said last (the ``Queued`` message)."""
    if timeout is None or waited < timeout:
        return None
    return Transition(Phase.Failed, Reason.QueueTimeout,
                      f"not admitted within {timeout:g} s (spec.failurePolicy.queueTimeoutSeconds); "
                      f"last: {message}")


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
    if phase == Phase.Stopping:
        if all(not w.launched or w.gone for w in run.workers):
            go(Transition(Phase.Stopped, Reason.Stopped, "all Workers have stopped"))
        return out
    if run.stop_requested:
        if phase == Phase.Pending and not any(w.launched and not w.gone for w in run.workers):
            go(Transition(Phase.Stopped, Reason.StopRequested, "stopped before any Worker started"))
        else:  # (a queued Run's Workers exist, waiting for admission: they are stopped too)
            go(Transition(Phase.Stopping, Reason.StopRequested, "stop requested; stopping Workers"))
        return out
    if phase == Phase.Pending:
        queue = run.queue
        if queue is None:
            return out  # the controller launches Workers, then records Starting
        failure = failure_of(run)  # a queued Worker deleted meanwhile, by someone else
        if failure is None and queue.failure is not None:
            failure = Transition(Phase.Failed, *queue.failure)
        if failure is not None:
            go(failure)
        elif queue.admitted:
            go(Transition(Phase.Starting, Reason.Launching, queue.message))
        else:
            timeout = queue_timeout_of(queue.waited, queue.timeout, queue.message)
            if timeout is not None:
                go(timeout)
        return out
    head = run.head
    if phase == Phase.Starting and head and head.running and not (head.gone and head.run_finished is None):
        go(Transition(Phase.Running, Reason.AllJoined,
                      f"all {len(run.workers)} Ray node{'s' if len(run.workers) != 1 else ''} joined; "
                      f"the run script started on {head.name}", at=head.running_at))
    failure = failure_of(run) or join_timeout_of(run) or unresponsive_failure(run)
    if failure is not None:
        go(failure)
        return out
    if phase == Phase.Running and head and run_result(head) == 0:
        go(Transition(Phase.Succeeded, Reason.Completed,
                      f"the run script on {head.name} exited with code 0", 0,
                      at=_when(head.run_finished)))
    return out


def worker_phase(w: WorkerView, last_reported: WorkerPhase | None, joined: bool) -> WorkerPhase:
    """A Worker's phase from its lifecycle lines and liveness (for display)."""
    if w.failed:
        return WorkerPhase.Failed
    if w.run_finished is not None and (w.trusted or w.gone):
        return WorkerPhase.Succeeded if run_result(w) == 0 else WorkerPhase.Failed
    if w.stopped:
        return WorkerPhase.Stopped
    if w.gone:
        return WorkerPhase.Exited if w.exit_code in (0, 143, 137) else WorkerPhase.Failed
    if not w.launched:
        return WorkerPhase.Pending
    if w.running:
        return WorkerPhase.Running
    if joined:
        return WorkerPhase.Joined
    return last_reported or WorkerPhase.Starting


@dataclass(frozen=True)
class Settled:
    """A Worker's final status once its Run is over (``reason`` None: nothing to say, e.g. a
    Worker that exited on its own after its run script finished)."""

    phase: WorkerPhase
    reason: Reason | None
    message: str
    exit_code: int | None


#: what a Worker's own ``failed`` line or run script may have ended it with; everything else
#: about a Worker whose Run ended while it was still alive is RLark's doing
_RLARK_ENDED = {
    Phase.Succeeded: (WorkerPhase.Completed, "its Run succeeded"),
    Phase.Failed: (WorkerPhase.Terminated, "its Run failed"),
    Phase.Stopped: (WorkerPhase.Stopped, "its Run was stopped"),
}


#: why a Worker the Run's failure names, still alive when the Run failed, is to blame
_BLAMED_ALIVE = {
    Reason.JoinTimeout: "its Ray node did not join the cluster in time",
    Reason.NodeLost: "Ray saw its node leave the cluster",
}


def settle(w: WorkerView, run_phase: Phase, run_reason: Reason | None = None,
           blamed: tuple[str, ...] | frozenset[str] = (), ended_at: float | None = None) -> Settled:
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
    * A Worker whose own failure came after its Run had ended (``ended_at``: a pool Worker
      left waiting for a head that had finished, seen only when a server read both lines) is
      ``Completed`` / ``Terminated`` / ``Stopped`` with reason ``RunEnded``: it went with its Run.
    """
    phase_if_ended, why = _RLARK_ENDED.get(run_phase, (WorkerPhase.Stopped, "its Run ended"))
    late = _when(w.failed)
    if w.failed and ended_at is not None and late is not None and late > ended_at \
            and not w.is_head:
        said = str(w.failed.get("message") or w.failed.get("reason") or "")
        return Settled(phase_if_ended, Reason.RunEnded,
                       f"ended after its Run ({why}){': ' + said if said else ''}", None)

    def code(line_code: int | None) -> int | None:
        return w.exit_code if w.gone and w.exit_code is not None else line_code

    if w.failed:
        status = w.failed.get("status")
        reason, message = reported_reason(w.failed.get("reason"), str(w.failed.get("message") or ""),
                                          worker=True)
        oom = (oom_killed(w.failed, w.failed.get("exit_code"), "the prepare script")
               if reason == Reason.PrepareFailed else None)
        if oom is not None:
            reason, message = Reason.OOMKilled, oom
        return Settled(WorkerPhase.Failed, reason, message,
                       code(status if isinstance(status, int) else None))
    if w.run_finished is not None:
        believed = run_result(w)
        ran = believed if believed is not None else w.run_finished.get("exit_code")
        ok = ran == 0
        oom = oom_killed(w.run_finished, ran, "the run script") if w.trusted else None
        if oom is not None:
            return Settled(WorkerPhase.Failed, Reason.OOMKilled, oom, code(ran))
        return Settled(WorkerPhase.Succeeded if ok else WorkerPhase.Failed,
                       Reason.Completed if ok else Reason.RunFailed,
                       f"the run script {_exit_text(ran)}",
                       code(ran if isinstance(ran, int) else None))
    if not w.launched:
        return Settled(phase_if_ended, Reason.NotLaunched, f"never started: {why} first", None)
    if w.name in blamed:
        if w.gone:
            return Settled(WorkerPhase.Failed, run_reason or Reason.WorkerLost,
                           f"{_exit_text(w.exit_code)} before its Run ended", w.exit_code)
        what = (_BLAMED_ALIVE.get(run_reason) if run_reason else None) or (
            f"{run_reason or 'its Run failed'} (named by the Run)")
        return Settled(WorkerPhase.Failed, run_reason or Reason.WorkerFailed,
                       f"{what}; stopped by RLark", None)
    if w.gone and not w.stopped and run_phase != Phase.Stopped:
        # ended without a word, but not what ended the Run (e.g. after the run script finished)
        return Settled(WorkerPhase.Exited, None, _exit_text(w.exit_code), w.exit_code)
    return Settled(phase_if_ended, Reason.StoppedByRLark, f"stopped by RLark: {why}", None)


# --- conditions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConditionUpdate:
    """A condition to set on a Run (:func:`rlark.status.set_condition` keeps its time)."""

    type: ConditionType
    status: bool
    reason: Reason
    message: str


def observed_conditions(run: RunView) -> list[ConditionUpdate]:
    """``AllJoined`` and ``HeadReady`` as the Workers show them now (pure), for a Run that is
    ``Starting`` or ``Running``; nothing in any other phase (before the launch there is nothing
    to say; once the Run stops or ends, its conditions stay as last observed, but for what its
    failure names: :func:`failure_conditions`).

    * AllJoined: True when every Worker's Ray node joined and none is gone; else False with
      ``WaitingForWorkers`` (the ranks still missing) or the loss (``HeadLost``/``WorkerLost``).
    * HeadReady: True once the head's Ray node is up (``RayStarted``/``Joining`` reported, its node
      joined, or the run script started) while it is alive; else False with ``HeadStarting``
      (what it last reported) or ``HeadLost``.
    """
    if run.phase not in (Phase.Starting, Phase.Running):
        return []
    out = []
    total = len(run.workers)
    gone = [w for w in run.workers if w.gone]
    missing = sorted((w for w in run.workers if not (w.joined or (w.is_head and w.running))),
                     key=lambda w: w.node_rank)
    if gone:
        first = min(gone, key=lambda w: w.node_rank)
        out.append(ConditionUpdate(
            ConditionType.AllJoined, False, Reason.HeadLost if first.is_head else Reason.WorkerLost,
            f"{first.label()} {_exit_text(first.exit_code)}"))
    elif missing:
        ranks = ", ".join(f"rank {w.node_rank} ({w.name})" for w in missing)
        out.append(ConditionUpdate(
            ConditionType.AllJoined, False, Reason.WaitingForWorkers,
            f"{total - len(missing)}/{total} Ray nodes joined; waiting for {ranks}"))
    else:
        out.append(ConditionUpdate(ConditionType.AllJoined, True, Reason.AllJoined,
                                   f"{total}/{total} Ray nodes joined"))
    head = run.head
    quiet = unresponsive(run)
    if quiet:
        out.append(ConditionUpdate(
            ConditionType.Responsive, False, Reason.WorkerUnresponsive,
            "; ".join(f"rank {w.node_rank} ({w.name}): {why}" for w, _, why in quiet)))
    elif any(w.heartbeat and w.launched and not w.gone for w in run.workers):
        out.append(ConditionUpdate(ConditionType.Responsive, True, Reason.Responding,
                                   "every launched Worker shows signs of life"))
    if head is not None and head.launched:
        if head.gone:
            out.append(ConditionUpdate(ConditionType.HeadReady, False, Reason.HeadLost,
                                       f"{head.label()} {_exit_text(head.exit_code)}"))
        elif (head.running or head.joined
              or head.reported_phase in (WorkerPhase.RayStarted, WorkerPhase.Joining)):
            out.append(ConditionUpdate(ConditionType.HeadReady, True, Reason.RayHeadStarted,
                                       f"the Ray head on {head.name} is up"))
        else:
            doing = head.reported_phase or WorkerPhase.Starting
            out.append(ConditionUpdate(ConditionType.HeadReady, False, Reason.HeadStarting,
                                       f"{head.name}: {doing}"))
    return out


#: the condition a Run failure with this reason is about
_FAILURE_CONDITION = {
    Reason.WorkerUnresponsive: ConditionType.Responsive,
    Reason.HeadLost: ConditionType.HeadReady,
    Reason.WorkerLost: ConditionType.AllJoined,
    Reason.NodeLost: ConditionType.AllJoined,
    Reason.JoinTimeout: ConditionType.AllJoined,
    Reason.LaunchInterrupted: ConditionType.AllJoined,
}


def failure_conditions(t: Transition) -> list[ConditionUpdate]:
    """What a Run's failure says about its conditions: a lost head, HeadReady False; a lost
    node or one that never joined, AllJoined False (with the failure's reason and first line)."""
    kind = _FAILURE_CONDITION.get(t.reason) if t.to == Phase.Failed else None
    if kind is None:
        return []
    return [ConditionUpdate(kind, False, t.reason, t.message.split("\n", 1)[0])]
