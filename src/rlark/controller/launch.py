"""The launch pass: which Pending Runs may start now (admission by free capacity, on a runtime
that has one: :mod:`rlark.controller.admission`), and starting one: its secrets opened, its
Workers placed (addresses, ports, uid), the plan committed before anything starts, then the
Workers launched (the first alone, the rest as many at once as the runtime takes:
:mod:`rlark.controller.fanout`) and their handles committed as they come, a batch at a time.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlark import settings
from rlark.controller import admission
from rlark.controller.fanout import launch_all
from rlark.controller.fencing import Deposed
from rlark.controller.phases import ACTIVE, TERMINAL, QueueWait, Transition, queue_timeout_of
from rlark.controller.rows import PLANNED, load_column, ref, utcnow
from rlark.controller.state import ControllerState
from rlark.ranks import plan_workers
from rlark.runtimes.capacity import Amounts
from rlark.runtimes.base import (HasCapacity, HasQueues, LaunchSpec, Taken, bootstrap_env,
                                 ray_resources, taken_port_ranges)
from rlark.record.outputs import resume_override, resume_point
from rlark.spec import Job, secret_refs
from rlark.status import Cause, EventType, Phase, Reason, WorkerPhase, queued_message
from rlark.store import RunRow, WorkerRow
from rlark.store.runs import add_event
from rlark.store.secrets import managed_names, open_refs
from rlark.words import plural

log = logging.getLogger("rlark.controller")


#: while a Run's Workers are launched, their handles are committed at least this often (seconds)
HANDLES_COMMIT_SECONDS = 0.5

#: seconds a resuming Run waits for the record of the Run it resumes from, once that Run's
#: Workers have all ended (its record is stored in the same pass that sees the last one go)
RESUME_RECORD_WAIT = 120.0

#: a Worker's last reported phase while its ``ray start`` is (or is about to be) at work: counted
#: against the bound on Ray nodes starting at once (None: nothing reported yet)
STARTING_RAY = frozenset({None, WorkerPhase.Starting, WorkerPhase.Prepared, WorkerPhase.StartingRay})


def wanted_resume(asked: dict | None, cause: Cause, policy_resume: bool,
                  previous: int | None) -> dict:
    """What a Run about to launch resumes from, before any checkpoint is looked for: what a user
    asked (``rlark restart --resume``: the Run's ``resume``), else, for an automatic new Run
    (cause ``Retry``: after a retryable failure, or requeued after its queue preempted the Run
    before it) of a Job with ``failurePolicy.resume``, the Run before it, ``previous``
    (``{"fromRun": previous, "automatic": True}``); ``{}``: it starts afresh. Pure."""
    if asked:
        return dict(asked)
    if cause == Cause.Retry and policy_resume and previous is not None:
        return {"fromRun": previous, "automatic": True}
    return {}


def role_demands(spec: dict) -> dict[str, Amounts]:
    """What one Worker of each role asks of the machine (:func:`ray_resources`: whole CPUs,
    memory bytes, GPUs, named devices), from a Run's spec snapshot; nothing for a spec that no
    longer parses (a spec stored by another RLark version must not stop admission)."""
    try:
        job = Job.model_validate(spec)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return {}
    out = {}
    for role in job.spec.roles:
        res = ray_resources(role)
        out[role.name] = Amounts(cpu=float(res.num_cpus or 0), memory=res.memory_bytes or 0,
                                           gpu=res.num_gpus or 0, devices=dict(res.custom))
    return out


def set_aside_stale_log(path: str) -> None:
    """A log file already at the path of a Worker about to be launched for the first time is
    another Run's (a store made again on an old ``$RLARK_HOME``): renamed to
    ``<path>.stale-<unix time>`` so its lines are never read as this Worker's."""
    if os.path.exists(path):
        stale = f"{path}.stale-{int(time.time())}"
        os.replace(path, stale)
        log.warning("a log file was already at %s (another Run's, from an earlier store on this "
                    "$RLARK_HOME): moved to %s", path, stale)


def launch_failure(exc: Exception) -> Reason:
    """The Run failure a launch error means: the ``reason`` the runtime's error names when it is
    a failure this version knows (``PolicyDenied``, ``SecretMissing``...: a retry of the same
    spec is refused too, see :attr:`rlark.status.Reason.retryable`), else ``LaunchFailed``."""
    reason = Reason.of(getattr(exc, "reason", None))
    return reason if reason is not None and Phase.Failed in reason.run_phases else Reason.LaunchFailed


class Launching(ControllerState):
    """The launch pass of :class:`~rlark.controller.loop.Controller` (admission included)."""

    # --- admission (runtimes with a capacity(): the local runtime) ------------------------------

    @property
    def _admits(self) -> bool:
        return isinstance(self.runtime, HasCapacity)

    def _demand(self, run_id: int, spec: dict | None = None):
        if run_id not in self._demands and spec is not None:
            per_role = role_demands(spec)
            counts = {r.get("name"): int(r.get("workers", 1)) for r in spec.get("spec", {}).get("roles", [])}
            total = Amounts()
            for role, amounts in per_role.items():
                total = total + amounts.times(max(counts.get(role, 0), 0))
            priority = spec.get("spec", {}).get("priority", 0)
            self._demands[run_id] = (per_role, total, sum(max(n, 0) for n in counts.values()),
                                     priority if isinstance(priority, int) else 0)
        return self._demands.get(run_id)

    def _admit(self) -> dict[int, admission.Decision]:
        """Decide this pass which Pending Runs may launch (:func:`admission.admit`): the queue is
        every Pending Run not being stopped and not waiting for an earlier Run of its Job, oldest
        first; what is held is every launched Worker not yet released, by its role's request."""
        runtime = self.runtime
        if not isinstance(runtime, HasCapacity):
            return {}
        with self._session() as s:
            pending = s.execute(
                select(RunRow.id, RunRow.job_id)
                .where(RunRow.phase == Phase.Pending, RunRow.stop_requested.is_(False))
                .order_by(RunRow.id)
            ).all()
            if not pending:
                self._demands.clear()
                return {}
            held_rows = s.execute(
                select(WorkerRow.run_id, WorkerRow.role, WorkerRow.lifecycle, RunRow.phase, RunRow.job_id)
                .join(RunRow, RunRow.id == WorkerRow.run_id)
                .where(WorkerRow.released.is_(False), PLANNED)
            ).all()
            busy_jobs = {job_id for *_, job_id in held_rows} | set(s.scalars(
                select(RunRow.job_id).where(RunRow.phase.in_(ACTIVE - {Phase.Pending}))))
            wanted = {run_id for run_id, *_ in held_rows} | {run_id for run_id, _ in pending}
            missing = wanted - self._demands.keys()
            for run_id, spec in (s.execute(select(RunRow.id, RunRow.spec).where(RunRow.id.in_(missing)))
                                 if missing else ()):
                self._demand(run_id, spec)
        for run_id in self._demands.keys() - wanted:
            del self._demands[run_id]
        held, starting = Amounts(), 0
        for run_id, role, life, run_phase, _ in held_rows:
            per_role = self._demand(run_id)
            if per_role and role in per_role[0]:
                held = held + per_role[0][role]
            life = life or {}
            if (run_phase == Phase.Starting and not life.get("joined") and not life.get("gone")
                    and life.get("phase") in STARTING_RAY):
                starting += 1
        queue = []
        for run_id, job_id in pending:
            if job_id in busy_jobs:
                continue  # its Job's earlier Run still ends (a restart): not queued yet
            _, total, nodes, priority = self._demand(run_id) or ({}, Amounts(), 0, 0)
            queue.append(admission.Candidate(run_id, total, nodes, priority))
        usage = admission.Usage(held=held, starting_nodes=starting, busy=bool(held_rows))
        return admission.admit(queue, usage, runtime.capacity())

    def _launch_later(self, s: Session, run: RunRow, exc: Exception, retry: float) -> None:
        """The runtime cannot start the Run yet but will be able to (its error carries
        ``retry_after`` seconds and a ``reason``, e.g. Kubernetes' ``WaitingForNames``): keep it
        Pending with that reason and message, an Event when the reason first appears, and try
        again after ``retry`` seconds. A stop still ends it at once."""
        reason = Reason.of(getattr(exc, "reason", None)) or Reason.WaitingToLaunch
        if run.reason != reason:
            add_event(s, run.job_id, reason, str(exc), run_number=run.number)
        run.reason, run.message = reason, str(exc)
        job = run.job
        if job.current_run_id == run.id:
            job.phase, job.reason, job.message = run.phase, run.reason, run.message
        self._launch_after[run.id] = time.monotonic() + retry

    def _wait_for_capacity(self, s: Session, run: RunRow, decision: admission.Decision) -> None:
        """Keep the Run Pending with reason ``Queued`` and its place in this machine's queue
        (an Event the first time it waits), or fail it with ``QueueTimeout`` once it has waited
        its ``failurePolicy.queueTimeoutSeconds``."""
        timeout = queue_timeout_of(self._waited(run), self._queue_timeout(run), decision.message)
        if timeout is not None:
            self._transition(s, run, timeout)
            return
        self._note_queued(s, run, decision.message)

    def _note_queued(self, s: Session, run: RunRow, message: str,
                     position: int | None = None) -> None:
        """Keep the Run Pending with reason ``Queued`` and ``message`` (what its queue says)
        and ``position`` (its place in line when the queue told it: ``rlark queue``); an Event
        the first time it is queued."""
        if run.reason != Reason.Queued:
            add_event(s, run.job_id, Reason.Queued, message, run_number=run.number)
        run.reason, run.message = Reason.Queued, message
        if run.queue_position != position:
            run.queue_position = position
        job = run.job
        if job.current_run_id == run.id:
            job.phase, job.reason, job.message = run.phase, run.reason, run.message

    @staticmethod
    def _waited(run: RunRow) -> float:
        """Seconds since the Run was created (how long it has waited to be admitted)."""
        created: datetime | None = run.created_at  # (None on a row not flushed yet)
        return max(0.0, time.time() - created.timestamp()) if created is not None else 0.0

    @staticmethod
    def _queue_timeout(run: RunRow) -> float | None:
        """The Run's ``failurePolicy.queueTimeoutSeconds`` (None: no bound, or a spec that no
        longer says)."""
        value = ((run.spec or {}).get("spec", {}).get("failurePolicy") or {}).get("queueTimeoutSeconds")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    # --- a cluster's queue (runtimes with queues: Kubernetes with Kueue) ----------------------------

    def _queue_of(self, run: RunRow) -> str | None:
        """The queue a Run about to launch waits in (:class:`HasQueues`: the project's setting,
        else the server's); None: none, or a runtime without queues."""
        if not isinstance(self.runtime, HasQueues):
            return None
        return self.runtime.queue_for(run.job.project.queue, run.namespace)

    @staticmethod
    def queued(run: RunRow) -> bool:
        """A Pending Run whose Workers were launched into its queue and wait for admission."""
        return (run.phase == Phase.Pending and run.queue is not None
                and any(w.launched for w in run.workers))

    def _queue_wait(self, s: Session, run: RunRow) -> QueueWait | None:
        """What the Run's queue says now (:meth:`HasQueues.queue_state`), for the state
        machine; while it is not admitted, its reason and message say so (``Queued``)."""
        if not isinstance(self.runtime, HasQueues) or run.queue is None:
            return None
        state = self.runtime.queue_state(run.job.name, run.uid, run.queue, run.namespace)
        waited = self._waited(run)
        if not state.admitted:
            self._note_queued(s, run, state.message, state.position)
            return QueueWait(False, state.message, waited, self._queue_timeout(run), state.failure)
        run.queue_position = None
        workers = plural(len(run.workers), "Worker")
        return QueueWait(True, f"{state.message} after {waited:.0f} s in the queue; starting "
                         f"{workers}", waited, self._queue_timeout(run))

    def _previous_runs_busy(self, s: Session, run: RunRow) -> bool:
        for other in run.job.runs:
            if other.id == run.id:
                continue
            if other.phase in ACTIVE or any(not w.released and w.launched for w in other.workers):
                if other.phase in ACTIVE and other.phase != Phase.Stopping:
                    other.stop_requested = True  # a restart replaces the active Run
                return True
        return False

    # --- launching ----------------------------------------------------------------------------------

    def _launch(self, s: Session, run: RunRow) -> None:
        try:
            self._launch_workers(s, run)
            self._launch_after.pop(run.id, None)
        except Deposed:  # its plan was not committed: another controller took over
            raise
        except Exception as exc:  # allocation or settings: fail the Run, never stay Pending
            retry = getattr(exc, "retry_after", None)
            if isinstance(retry, (int, float)) and run.phase == Phase.Pending:
                self._launch_later(s, run, exc, float(retry))
                return
            log.exception("launching run %s failed", run.id)
            self._transition(s, run, Transition(Phase.Failed, launch_failure(exc), str(exc)))

    def _run_secrets(self, s: Session, run: RunRow, job: Job) -> dict[tuple[str, str], str] | None:
        """The values of the RLark-managed secrets ``job``'s env refers to, ``(secret, key)`` ->
        value. A reference the project cannot give a value for (deleted since the submit, or, where
        the runtime has no secrets of its own, never an RLark secret) fails the Run:
        ``SecretMissing``, or ``SecretUnreadable`` when the server's key does not open it; then
        None. Where it has (:attr:`rlark.runtimes.base.Runtime.own_secrets`: Kubernetes) a name
        RLark does not manage is the runtime's (a Kubernetes Secret): left to the Pod."""
        refs = secret_refs(job)
        if not refs:
            return {}
        project_id = run.job.project_id
        try:
            with self._session() as r:  # a read of its own: the pass's session stays out of SQL
                managed = managed_names(r, project_id, (n for n, _ in refs))
                wanted = [pair for pair in refs if pair[0] in managed or not self.runtime.own_secrets]
                values = open_refs(r, project_id, wanted, self.secret_box) if (
                    wanted and self.secret_box is not None) else {}
        except ValueError as exc:  # SecretKeyError
            self._transition(s, run, Transition(Phase.Failed, Reason.SecretUnreadable, str(exc)))
            return None
        lost = [r for r in wanted if r not in values]
        if lost:
            names = ", ".join(f"key {k!r} of secret {n!r}" for n, k in lost)
            self._transition(s, run, Transition(
                Phase.Failed, Reason.SecretMissing,
                f"the Job's env or mounts take values from {names}, which project "
                f"{run.job.project.name!r} does not have (`rlark secret list`); set it and start "
                "the Job again"))
            return None
        return values

    def _ray_token(self, run: RunRow) -> str:
        """The Run's Ray GCS token: random (256 bits), made at its first launch and kept sealed
        (``runs.ray_token``), so Workers launched later (a launch resumed after a restart) get
        the same one. Without the server's secret box (a bare controller in a test) it is kept
        for this launch only."""
        if run.ray_token and self.secret_box is not None:
            try:
                return self.secret_box.open(run.ray_token, "the Run's Ray token")["token"]
            except Exception:  # noqa: BLE001 - a key that changed: the Run gets a new token
                log.warning("Run %s: its sealed Ray token could not be opened; making a new one",
                            run.uid)
        token = secrets.token_urlsafe(32)
        if self.secret_box is not None:
            run.ray_token = self.secret_box.seal({"token": token})
        return token

    def _resume(self, s: Session, run: RunRow, job: Job) -> tuple[bool, str | None]:
        """Where the Run resumes from, resolved once at its launch: ``(go on, the override to
        give its run script or None)``. Asked by ``rlark restart --resume`` (``run.resume``)
        or, for an automatic retry, by ``failurePolicy.resume``; found in the outputs the
        earlier Run's record read back (:func:`resume_point`). An asked resume that finds no
        checkpoint fails the Run (``ResumeFailed``) before anything starts; a retry's starts
        afresh, said in an Event. While the earlier Run's record is not stored yet the launch
        waits (False), at most :data:`RESUME_RECORD_WAIT` seconds."""
        before = max((r.number for r in run.job.runs if r.number < run.number), default=None)
        want = wanted_resume(run.resume, run.cause, job.spec.failure_policy.resume, before)
        if not want:
            return True, None
        if want.get("resolved"):
            return True, want.get("override")
        source = next((r for r in run.job.runs if r.number == want.get("fromRun")), None)
        if source is not None:  # its record is not loaded with the Run's (RUN_GRAPH)
            load_column(self._session, [source], "record")
        if source is not None and source.record is None:
            ended = source.finished_at.timestamp() if source.finished_at else None
            if source.phase not in TERMINAL or (
                    ended is not None and time.time() - ended < RESUME_RECORD_WAIT):
                return False, None  # its record comes with the pass that sees its last Worker go
        outputs = (source.record or {}).get("outputs") if source is not None else None
        point, notes = resume_point(outputs or [], source is not None
                                    and source.phase == Phase.Succeeded)
        if source is None or outputs is None:
            notes = [f"run {want.get('fromRun')} has no record of its outputs"] + notes
        resolved = {**want, "resolved": True, "checkpoint": None, "notes": notes[:20]}
        fail = None
        if point is not None:
            try:
                override = resume_override(point["checkpoint"])
            except ValueError as exc:
                fail = str(exc)
            else:
                resolved.update(checkpoint=point["checkpoint"], step=point["step"],
                                output=point["output"], override=override)
        elif not want.get("automatic"):
            fail = (f"run {want.get('fromRun')} left no checkpoint to resume from: "
                    + "; ".join(notes[:3]))
        run.resume = resolved
        if fail is not None:
            self._transition(s, run, Transition(Phase.Failed, Reason.ResumeFailed, fail))
            return False, None
        add_event(s, run.job_id, Reason.Resuming,
                  f"run {run.number} resumes from {point['checkpoint']} (step {point['step']}) of "
                  f"run {want.get('fromRun')}" if point is not None else
                  f"run {run.number} starts afresh: run {want.get('fromRun')} left no checkpoint "
                  f"({'; '.join(notes[:2])})",
                  run_number=run.number,
                  type=EventType.Normal if point is not None else EventType.Warning)
        return True, resolved.get("override")

    def _launch_workers(self, s: Session, run: RunRow) -> None:
        job = Job.model_validate(run.spec)
        go, override = self._resume(s, run, job)
        if not go:
            return
        secrets = self._run_secrets(s, run, job)
        if secrets is None:
            return
        if secrets and self.secret_box is not None:
            # what the Run's logs are masked with, also once a secret is deleted or changed
            run.sealed_secrets = self.secret_box.seal({f"{n}/{k}": v for (n, k), v in secrets.items()})
        planned = {w.node_rank: w for w in plan_workers(job)}
        # Placement is serialised by this single controller thread; the store tells which
        # addresses and port blocks live Workers hold (also those of other Runs).
        # A block's size follows its role (ray.workerPorts, CPUs): read from the Run's spec.
        with self._session() as r:  # a read of its own: no transaction open while place() runs
            live = r.execute(
                select(WorkerRow.node_ip, WorkerRow.port_base, WorkerRow.role, WorkerRow.run_id,
                       RunRow.worker_uid)
                .join(RunRow, WorkerRow.run_id == RunRow.id)
                .where(WorkerRow.released.is_(False), PLANNED)
            ).all()
            # each Run's spec once, not once per Worker (1,000 parses beside a Run of 1,000)
            with_ports = {run_id for _, b, _, run_id, _ in live if b is not None}
            run_specs: dict[int, dict] = dict(r.execute(select(RunRow.id, RunRow.spec).where(
                RunRow.id.in_(with_ports))).all()) if with_ports else {}
        taken = Taken(ips=frozenset(ip for ip, *_ in live if ip),
                      # (a Run deleted between the two reads holds nothing any more)
                      port_ranges=taken_port_ranges((b, run_specs[run_id], role)
                                                    for _, b, role, run_id, _ in live
                                                    if b is not None and run_id in run_specs),
                      uids=frozenset(u for *_, u in live if u is not None))
        placement = self.runtime.place(job, run.uid, list(planned.values()), taken,
                                       namespace=run.namespace)
        run.worker_uid = placement.worker_uid
        ray_token = self._ray_token(run)
        rows = sorted(run.workers, key=lambda w: w.node_rank)
        log_dir = settings.job_logs_dir(run.job.project.name, run.job.name) / str(run.number)
        queue = run.queue = self._queue_of(run)
        if queue is None:
            self._transition(s, run, Transition(Phase.Starting, Reason.Launching,
                                                f"starting {plural(len(rows), 'Worker')}"))
            run.started_at = utcnow()
        else:
            # the Workers are made now and held back by the queue until it admits them all;
            # the Run stays Pending (Queued) until then, and its join timeout counts from then
            self._note_queued(s, run, queued_message(
                queue, None, f"submitting {plural(len(rows), 'Worker')} as one group"))
        log_paths: dict[int, str] = {}
        for w in rows:
            place = placement.workers[w.node_rank]
            w.node_ip, w.port_base, w.ray_temp_dir = place.node_ip, place.port_base, place.ray_temp_dir
            w.log_path = log_paths[w.node_rank] = str(log_dir / f"{w.name}.log")
        for w in rows:
            set_aside_stale_log(log_paths[w.node_rank])
        # the plan is durable before anything starts, and the handles as they come: a server
        # that dies in between leaves Workers the next one finds (find())
        s.commit()
        with self._lanes_lock:
            self._launching.discard(run.id)  # admission counts the planned Workers from now on
        specs = []
        for w in rows:
            place = placement.workers[w.node_rank]
            env = bootstrap_env(
                job,
                planned[w.node_rank],
                run_uid=run.uid,
                head_address=placement.head_address,
                node_ip=place.node_ip,
                ray_ports=place.ray_ports,
                ray_temp_dir=place.ray_temp_dir,
                resume_override=override,
            )
            specs.append(LaunchSpec(job=job, run_uid=run.uid, worker=planned[w.node_rank], env=env,
                                    log_path=log_paths[w.node_rank], place=place,
                                    namespace=run.namespace, project=run.job.project.name,
                                    secrets=secrets, ray_token=ray_token, queue=queue))
        failure: tuple[WorkerRow, Exception] | None = None
        committed = time.monotonic()
        for i, outcome in launch_all(self.runtime.launch, specs, self.runtime.launch_concurrency):
            w = rows[i]
            if isinstance(outcome, Exception):  # e.g. the role's interpreter does not exist
                failure = failure or (w, outcome)
                continue
            w.pid, w.pid_started, w.handle = outcome.pid, outcome.pid_started, outcome.handle
            w.phase = WorkerPhase.Starting
            w.started_at = utcnow()
            if time.monotonic() - committed >= HANDLES_COMMIT_SECONDS:
                # handles durable as they come, a batch at a time: a server that dies before
                # the next batch leaves Workers the next one finds (find())
                s.commit()
                committed = time.monotonic()
        if failure is not None:
            w, exc = failure
            why = launch_failure(exc)
            w.phase, w.reason, w.message = WorkerPhase.Failed, why, str(exc)
            w.lifecycle = {**(w.lifecycle or {}), "failed": {
                "reason": why, "message": str(exc), "ts": time.time()}}
            w.released = True
            for other in rows:
                if not other.launched:
                    other.released = True  # never started: holds nothing
                    self.runtime.forget(ref(other))
            self._transition(s, run, Transition(Phase.Failed, why, f"Worker {w.name}: {exc}"))
            return
        s.commit()
        if queue is not None:
            add_event(s, run.job_id, Reason.Launched,
                      f"{plural(len(rows), 'Worker')} made in queue {queue}, held back until it "
                      f"admits them all; head {rows[0].name} at {placement.head_address}",
                      run_number=run.number)
            self._queue_wait(s, run)  # what the queue says of them already
            return
        add_event(s, run.job_id, Reason.Launched,
                  f"{plural(len(rows), 'Worker')} started; head {rows[0].name} at {placement.head_address}",
                  run_number=run.number)
