"""The status vocabulary: every phase, reason, cause and condition RLark stores or shows (one
source of truth; everything else imports these names and never spells them as strings).

* :class:`Phase`: a Run's (and its Job's, and each Task's) phase.
* :class:`WorkerPhase`: a Worker's phase (what its bootstrap reported, then how it ended).
* :class:`Reason`: why a Run or Worker is in its phase, or what an Event or condition is about.
  Each reason knows the Run phases and Worker phases it may come with and whether an automatic
  retry (``spec.failurePolicy.maxRestarts``) may follow a Run that failed with it.
* :class:`Cause` (why a Run exists), :class:`Desired` (what the user asked of a Job),
  :class:`EventType` (Normal/Warning, as Kubernetes Events).
* :class:`Condition` and :class:`ConditionType`: observations beside a Run's phase
  (``AllJoined``, ``HeadReady``, ``ReconcileError``), each with a status, a reason, a message and
  the time its status last changed, as Kubernetes' ``metav1.Condition``.

Every enum is a :class:`~enum.StrEnum` whose members are named as their values
(``Phase.Running == "Running"``), so JSON, the API and the CLI keep showing the same strings.

Phases are a closed set: the database refuses any other value (CHECK constraints, migration
0009). Reasons are a growing vocabulary (runtimes add failure reasons), so their columns are
checked when written (:class:`rlark.store.models.ReasonType` accepts only :class:`Reason`) but
not by the database; a reason an older or newer RLark wrote that this version does not know
still reads, as an *unrecognised* reason (:meth:`Reason.unrecognised`: its text kept, no
phases, no retry), and is shown as written.

Pure: standard library only (the CLI imports it at start-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Mapping, Sequence


class Phase(StrEnum):
    """A Run's phase (ARCHITECTURE.md "Run state machine"); a Job shows its current Run's, a
    Task its Run's (``Failed`` when one of its Workers failed)."""

    Pending = "Pending"  # accepted, nothing started
    Starting = "Starting"  # Workers launched, Ray nodes joining
    Running = "Running"  # every Ray node joined, the run script started on the head
    Succeeded = "Succeeded"  # the run script exited 0
    Failed = "Failed"  # a deterministic failure, with a reason naming the Worker
    Stopping = "Stopping"  # a stop was asked for; Workers are being stopped
    Stopped = "Stopped"


TERMINAL: frozenset[Phase] = frozenset({Phase.Succeeded, Phase.Failed, Phase.Stopped})
ACTIVE: frozenset[Phase] = frozenset({Phase.Pending, Phase.Starting, Phase.Running, Phase.Stopping})


class WorkerPhase(StrEnum):
    """A Worker's phase: while its Run is active, what its bootstrap last reported (``phase``
    lifecycle lines, bootstrap/worker.py) or what the controller saw; once its Run is over, how
    it ended (``controller.phases.settle``)."""

    Pending = "Pending"  # not started yet
    Starting = "Starting"  # process launched, nothing reported yet
    Preparing = "Preparing"  # prepare script running
    Prepared = "Prepared"  # prepare script done
    WaitingForHead = "WaitingForHead"
    StartingRay = "StartingRay"
    RayStarted = "RayStarted"  # its Ray node is up
    Joining = "Joining"  # head: waiting for every Ray node to join
    Joined = "Joined"  # the head saw its node in the cluster
    Running = "Running"  # head only: the run script is running
    Succeeded = "Succeeded"
    Failed = "Failed"
    Stopped = "Stopped"  # stopped by a user's stop/restart/delete or a server shutdown
    Exited = "Exited"  # its process ended
    Completed = "Completed"  # stopped by RLark after its Run succeeded
    Terminated = "Terminated"  # stopped by RLark after its Run failed


#: the phases a Worker's bootstrap reports in its ``phase`` lifecycle lines
REPORTED_WORKER_PHASES: frozenset[WorkerPhase] = frozenset({
    WorkerPhase.Preparing, WorkerPhase.Prepared, WorkerPhase.WaitingForHead,
    WorkerPhase.StartingRay, WorkerPhase.RayStarted, WorkerPhase.Joining})

#: Worker phases in which its Ray node has joined the Run's cluster
_JOINED_WORKER_PHASES = frozenset({WorkerPhase.Joined, WorkerPhase.Running, WorkerPhase.Succeeded})


class Cause(StrEnum):
    """Why a Run exists."""

    Submitted = "Submitted"  # the Job's first Run
    Started = "Started"  # `rlark start`
    Restarted = "Restarted"  # `rlark restart`
    Updated = "Updated"  # `rlark apply` of a new spec
    Retry = "Retry"  # automatic: after a failed Run (maxRestarts), a preempted one (onPreemption)


class Desired(StrEnum):
    """What the user last asked of a Job."""

    Running = "Running"  # submit, start, restart, apply
    Stopped = "Stopped"  # stop, delete


class EventType(StrEnum):
    """An Event's type, as Kubernetes Events."""

    Normal = "Normal"
    Warning = "Warning"


class Reason(StrEnum):
    """Why a Run, Job or Worker is in its phase; what an Event or a condition is about.

    :attr:`run_phases` and :attr:`worker_phases` say where a reason may appear as a status
    (the controller refuses a Run transition whose reason does not belong to its phase);
    :attr:`retryable` whether an automatic retry may follow a Run that failed with it."""

    # --- a Run waiting to start (Pending); a Job's reason is its new Run's cause at first
    Submitted = "Submitted"
    Started = "Started"
    Restarted = "Restarted"
    Updated = "Updated"
    Retry = "Retry"
    #: a new Run queued by ``failurePolicy.onPreemption: Requeue`` after its Run was preempted
    Requeued = "Requeued"
    #: in a queue, not admitted yet: the local runtime's admission queue (this machine is full)
    #: or a Kueue LocalQueue on Kubernetes; the message names the queue, the place when it is
    #: known and what the Run waits for (:func:`queued_message`)
    Queued = "Queued"
    #: a Run of an earlier RLark version that waited for this machine's capacity (now ``Queued``)
    WaitingForCapacity = "WaitingForCapacity"
    WaitingForNames = "WaitingForNames"  # kubernetes: the previous Run's objects still exist
    WaitingToLaunch = "WaitingToLaunch"  # a runtime said "not yet" without saying why
    # --- Starting, Running
    Launching = "Launching"
    WaitingForWorkers = "WaitingForWorkers"
    AllJoined = "AllJoined"
    # --- Succeeded (Run), Succeeded/Completed (Worker)
    Completed = "Completed"
    # --- Failed: reported by a Worker's bootstrap (its ``failed`` line)
    BadConfig = "BadConfig"
    PrepareFailed = "PrepareFailed"
    PrepareTimeout = "PrepareTimeout"
    RayStartFailed = "RayStartFailed"
    HeadUnreachable = "HeadUnreachable"
    JoinTimeout = "JoinTimeout"
    RankMismatch = "RankMismatch"
    NodeLost = "NodeLost"
    RayTooOld = "RayTooOld"  # a Ray without token authentication where the server requires it
    # --- Failed: reported by a Worker's keeper (bootstrap/keeper.py)
    SandboxFailed = "SandboxFailed"  # the Worker's mount namespace could not be built
    MonitorLost = "MonitorLost"  # the node monitor ended while the run script ran
    # --- Failed: seen by the controller (a Worker silent or stopped for too long)
    WorkerUnresponsive = "WorkerUnresponsive"
    # --- Failed: seen by the controller
    RunFailed = "RunFailed"  # the run script exited non-zero
    HeadLost = "HeadLost"
    WorkerLost = "WorkerLost"
    WorkerFailed = "WorkerFailed"  # a Worker failed without a reason this version knows
    LaunchFailed = "LaunchFailed"
    LaunchInterrupted = "LaunchInterrupted"
    SpecUnreadable = "SpecUnreadable"
    SecretMissing = "SecretMissing"  # the Job's env takes a value its project's secrets lack
    SecretUnreadable = "SecretUnreadable"  # this server cannot open its project's secrets
    #: the server's policy refuses the launch, nothing was started (a Pod policy, Workers that
    #: would run as the server's user on a server of several users, a path Workers may not read)
    PolicyDenied = "PolicyDenied"
    ServerNamespace = "ServerNamespace"  # kubernetes: a Run made for the server's own namespace
    #: a Run asked to resume (``rlark restart --resume``) finds no checkpoint in the outputs of
    #: the Run it resumes from (or cannot pass it on): nothing was started
    ResumeFailed = "ResumeFailed"
    # --- Failed: known to the runtime (Kubernetes: runtimes/kubernetes/status.py)
    ImagePull = "ImagePull"
    Unschedulable = "Unschedulable"
    MountFailed = "MountFailed"
    ContainerCreateFailed = "ContainerCreateFailed"
    ContainerStartFailed = "ContainerStartFailed"
    OOMKilled = "OOMKilled"
    Evicted = "Evicted"
    CrashLoop = "CrashLoop"
    AdmissionRejected = "AdmissionRejected"
    Forbidden = "Forbidden"
    #: the queue (Kueue) took the Run's admission back to make room for another workload and
    #: deleted its Pods; the message names that workload when Kueue says which
    Preempted = "Preempted"
    #: the Run waited in its queue for longer than ``failurePolicy.queueTimeoutSeconds``
    QueueTimeout = "QueueTimeout"
    # --- Stopping, Stopped
    StopRequested = "StopRequested"
    ServerShutdown = "ServerShutdown"
    Stopped = "Stopped"
    # --- a Worker RLark ended because its Run was over
    StoppedByRLark = "StoppedByRLark"
    RunEnded = "RunEnded"  # it ended by itself after its Run had (its head's Ray went first)
    NotLaunched = "NotLaunched"
    # --- Events only
    Launched = "Launched"
    NodeJoined = "NodeJoined"
    Adopted = "Adopted"
    ServerStopped = "ServerStopped"
    CleanupFailed = "CleanupFailed"
    StopFailed = "StopFailed"
    ExceedsHostCapacity = "ExceedsHostCapacity"
    DeleteRequested = "DeleteRequested"
    SpecUpdated = "SpecUpdated"
    WorkerWarning = "WorkerWarning"
    RayWorkerPortsExhausted = "RayWorkerPortsExhausted"
    #: a Worker's `ray start` ended before its node was up, and the Worker starts it once more
    RayStartRetried = "RayStartRetried"
    #: a lifecycle line says what the runtime's own observation contradicts (not believed)
    LifecycleContradiction = "LifecycleContradiction"
    ReportsDropped = "ReportsDropped"  # the keeper dropped reports of the workload (malformed, too fast)
    WarningsSuppressed = "WarningsSuppressed"  # a Worker reported more warnings than RLark keeps
    Resuming = "Resuming"  # a Run resumes from a checkpoint of an earlier Run (or finds none)
    # --- conditions only
    HeadStarting = "HeadStarting"  # HeadReady False: launched, its Ray head is not up yet
    RayHeadStarted = "RayHeadStarted"  # HeadReady True
    ReconcileFailed = "ReconcileFailed"  # ReconcileError True
    Reconciled = "Reconciled"  # ReconcileError False
    ChecksPassed = "ChecksPassed"  # RecordVerified True: no check of the run record failed
    ChecksFailed = "ChecksFailed"  # RecordVerified False: a check failed (message names it)
    Responding = "Responding"  # Responsive True: every launched Worker shows signs of life

    @property
    def run_phases(self) -> frozenset[Phase]:
        """The Run (and Job) phases this reason may come with; empty: never a Run's reason."""
        return _STATUS.get(self, _NO_STATUS)[0]

    @property
    def worker_phases(self) -> frozenset[WorkerPhase]:
        """The Worker phases this reason may come with; empty: never a Worker's reason."""
        return _STATUS.get(self, _NO_STATUS)[1]

    @property
    def retryable(self) -> bool:
        """Whether an automatic retry (``maxRestarts``) may follow a Run that failed with this
        reason. False for a reason that is not a Run failure, and for a failure a new Run of the
        same stored spec would repeat exactly (its Workers' environment is wrong, its spec cannot
        be read)."""
        return self in _RETRYABLE

    @property
    def known(self) -> bool:
        """False for an unrecognised reason read from the store (:meth:`unrecognised`)."""
        return self._name_ in type(self)._member_map_

    @classmethod
    def of(cls, value: object) -> Reason | None:
        """The member named ``value`` (a reason from a lifecycle line or an API); None when
        ``value`` is not a reason this version knows."""
        if isinstance(value, cls):  # Reason(member) would hand back an unrecognised one too
            return value if value.known else None
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None

    @classmethod
    def unrecognised(cls, value: str) -> Reason:
        """A reason read from the store that this version does not know (written by another RLark
        version): a stand-in with the stored text as its value, no phases and no retry, so the
        row still reads and shows what was written. The same object for the same text."""
        member = cls.of(value)
        if member is not None:
            return member
        found = _UNRECOGNISED.get(value)
        if found is None:
            found = str.__new__(cls, value)
            found._name_ = value
            found._value_ = value
            _UNRECOGNISED[value] = found
        return found


_UNRECOGNISED: dict[str, Reason] = {}
_NO_STATUS: tuple[frozenset[Phase], frozenset[WorkerPhase]] = (frozenset(), frozenset())


def _status_table() -> dict[Reason, tuple[frozenset[Phase], frozenset[WorkerPhase]]]:
    P, W, R = Phase, WorkerPhase, Reason
    failed: tuple[set[Phase], set[WorkerPhase]] = ({P.Failed}, {W.Failed})
    pending: tuple[set[Phase], set[WorkerPhase]] = ({P.Pending}, set())
    table: dict[Reason, tuple[set[Phase], set[WorkerPhase]]] = {
        R.Submitted: pending, R.Started: pending, R.Restarted: pending, R.Updated: pending,
        R.Retry: pending, R.Requeued: pending, R.Queued: pending, R.WaitingForCapacity: pending,
        R.WaitingForNames: pending,
        R.WaitingToLaunch: pending,
        R.Launching: ({P.Starting}, set()),
        R.WaitingForWorkers: ({P.Starting}, set()),
        R.AllJoined: ({P.Starting, P.Running}, set()),
        R.Completed: ({P.Succeeded}, {W.Succeeded}),
        R.StopRequested: ({P.Stopping, P.Stopped}, set()),
        R.ServerShutdown: ({P.Stopping, P.Stopped}, set()),
        R.Stopped: ({P.Stopped}, set()),
        R.StoppedByRLark: (set(), {W.Completed, W.Terminated, W.Stopped}),
        R.RunEnded: (set(), {W.Completed, W.Terminated, W.Stopped}),
        R.NotLaunched: (set(), {W.Terminated, W.Stopped}),
        # the runtime could not stop the Worker (e.g. RBAC refuses deleting its Pod)
        R.StopFailed: (set(), {W.Failed}),
    }
    for r in (R.BadConfig, R.PrepareFailed, R.PrepareTimeout, R.RayStartFailed,
              R.HeadUnreachable, R.JoinTimeout, R.RankMismatch, R.NodeLost, R.RayTooOld,
              R.SandboxFailed, R.MonitorLost, R.WorkerUnresponsive, R.RunFailed,
              R.HeadLost, R.WorkerLost, R.WorkerFailed, R.LaunchFailed, R.LaunchInterrupted,
              R.SpecUnreadable, R.SecretMissing, R.SecretUnreadable, R.PolicyDenied,
              R.ServerNamespace, R.ResumeFailed, R.ImagePull, R.Unschedulable,
              R.MountFailed, R.ContainerCreateFailed, R.ContainerStartFailed, R.OOMKilled, R.Evicted,
              R.CrashLoop, R.AdmissionRejected, R.Forbidden, R.Preempted, R.QueueTimeout):
        table[r] = failed
    return {r: (frozenset(runs), frozenset(workers)) for r, (runs, workers) in table.items()}


_STATUS = _status_table()
#: Run failures after which a retry may follow: every failure but those a new Run of the same
#: spec repeats exactly (until someone changes the server's settings or the project's secrets)
_RETRYABLE = frozenset(r for r, (runs, _) in _STATUS.items() if Phase.Failed in runs) - {
    Reason.BadConfig, Reason.SpecUnreadable, Reason.SecretMissing, Reason.SecretUnreadable,
    Reason.RayTooOld, Reason.SandboxFailed, Reason.PolicyDenied, Reason.ServerNamespace,
    # a new Run would wait in the same queue again; a preempted Run follows its Job's own
    # failurePolicy.onPreemption instead (controller/transitions.py)
    Reason.QueueTimeout, Reason.Preempted, Reason.ResumeFailed}


def reported_reason(value: object, message: str = "", *,
                    worker: bool = False) -> tuple[Reason, str]:
    """A failure reason from a Worker's ``failed`` lifecycle line (or a runtime's failure), and
    its message, for its Run (or with ``worker`` for the Worker itself): the reason itself when
    this version knows it as a reason of a ``Failed`` Run (Worker); else ``WorkerFailed`` with
    the reported text kept at the front of the message (a bootstrap of another RLark version
    may report a reason this one does not know)."""
    reason = Reason.of(value)
    # (phases of different enums compare equal by value: ask the right set)
    failed = (WorkerPhase.Failed in reason.worker_phases if worker
              else Phase.Failed in reason.run_phases) if reason is not None else False
    if reason is not None and failed:
        return reason, message
    if value in (None, ""):
        return Reason.WorkerFailed, message
    return Reason.WorkerFailed, f"{value}: {message}" if message else str(value)


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


#: the name of the local runtime's admission queue in a ``Queued`` message and ``rlark queue``
MACHINE_QUEUE = "this machine's queue"


def queued_message(queue: str, position: int | None = None, waiting_for: str = "") -> str:
    """The message of a Run ``Queued`` (the one wording of every runtime's queue):
    ``queued in <queue>, 2nd in line: <what it waits for>``; the place only when the queue
    reports one, what it waits for only when known."""
    text = f"queued in {queue}"
    if position is not None:
        text += f", {ordinal(position)} in line"
    return f"{text}: {waiting_for}" if waiting_for else text


def worker_phase_of(value: object) -> WorkerPhase | None:
    """A Worker phase from a ``phase`` lifecycle line; None for one this version does not know."""
    try:
        return WorkerPhase(value) if isinstance(value, str) else None
    except ValueError:
        return None


def has_joined(phase: WorkerPhase | str | None, lifecycle: Mapping[str, Any] | None) -> bool:
    """Whether a Worker's Ray node joined its Run's cluster, now or before it ended: a joined
    phase, or a ``joined`` lifecycle event from its bootstrap."""
    return phase in _JOINED_WORKER_PHASES or bool((lifecycle or {}).get("joined"))


def is_ready(run_phase: Phase | str | None, phase: WorkerPhase | str | None,
             lifecycle: Mapping[str, Any] | None) -> bool:
    """Whether a Worker counts as ready in "Workers ready k/N" and a Task's ready count.

    While its Run is active: its Ray node joined (:func:`has_joined`). Once the Run is over:
    only a Worker that did its part to the end (``Succeeded``, or ``Completed``: stopped by RLark
    after its Run succeeded); a stopped or failed Run shows no ready Workers.
    """
    if run_phase in TERMINAL:
        return phase in (WorkerPhase.Succeeded, WorkerPhase.Completed)
    return has_joined(phase, lifecycle)


# --- conditions -----------------------------------------------------------------------------------


class ConditionType(StrEnum):
    """What a Run's conditions say, beside its phase (KubeRay's ``RayClusterStatus.Conditions``
    are the model)."""

    AllJoined = "AllJoined"  # every Ray node of the Run joined its cluster
    HeadReady = "HeadReady"  # the head's Ray node (GCS) is up, so the others can join
    ReconcileError = "ReconcileError"  # the controller's last pass over the Run failed
    RecordVerified = "RecordVerified"  # the run record's checks passed (False: one failed)
    #: every launched Worker shows signs of life (its keeper's heartbeat; its processes not
    #: stopped); False: one is silent or stopped (a frozen Worker is invisible otherwise)
    Responsive = "Responsive"


@dataclass(frozen=True)
class Condition:
    """One condition of a Run: ``status`` True or False, a ``reason`` (CamelCase), a message,
    and when ``status`` last changed (``last_transition_time``: ISO 8601 UTC, ``...Z``).
    Stored in ``runs.conditions`` as ``{type, status, reason, message, lastTransitionTime}``
    (status as ``"True"``/``"False"``, as Kubernetes)."""

    type: ConditionType
    status: bool
    reason: Reason
    message: str
    last_transition_time: str

    def to_dict(self) -> dict[str, str]:
        return {"type": self.type.value, "status": "True" if self.status else "False",
                "reason": self.reason.value, "message": self.message,
                "lastTransitionTime": self.last_transition_time}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Condition | None:
        """A stored condition; None for one of a type this version does not know."""
        try:
            kind = ConditionType(str(d.get("type")))
        except ValueError:
            return None
        reason = d.get("reason") or ""
        return cls(kind, d.get("status") == "True",
                   Reason.of(reason) or Reason.unrecognised(str(reason)),
                   str(d.get("message") or ""), str(d.get("lastTransitionTime") or ""))


def conditions_of(stored: Sequence[object] | None) -> list[Condition]:
    """The conditions in a stored ``runs.conditions`` list (entries that are not a condition of
    a type this version knows are left out)."""
    out = []
    for d in stored or ():
        c = Condition.from_dict(d) if isinstance(d, Mapping) else None
        if c is not None:
            out.append(c)
    return out


def set_condition(stored: Sequence[object] | None, kind: ConditionType, status: bool,
                  reason: Reason, message: str, now: str) -> list[dict[str, str]] | None:
    """``stored`` with condition ``kind`` set (pure; Kubernetes' ``meta.SetStatusCondition``
    rules): its time changes only when its status does. Returns the new list, or None when
    nothing changed (so the caller writes nothing). ``now``: ISO 8601 UTC."""
    current = conditions_of(stored)
    old = next((c for c in current if c.type is kind), None)
    if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
        return None
    when = old.last_transition_time if old is not None and old.status == status else now
    new = Condition(kind, status, reason, message, when)
    out = [new if c.type is kind else c for c in current]
    if old is None:
        out.append(new)
    order = list(ConditionType)
    return [c.to_dict() for c in sorted(out, key=lambda c: order.index(c.type))]


def text_of(value: StrEnum | None) -> str:
    """An enum member as plain ``str`` for views, records and YAML (``""`` for None): views are
    plain JSON-ready data, and YAML's safe dumper refuses str subclasses."""
    return "" if value is None else str.__str__(value)
