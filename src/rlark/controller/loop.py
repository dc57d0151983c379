"""The reconcile loop: desired Job state vs what the Workers report and the runtime observes.

Each pass takes every Run that is active (or still has Workers to tear down) and reconciles it in
a lane of its own (a thread of a bounded pool, so one Job's slow runtime call never delays
another's). A lane works in three steps, as dstack's background tasks do: **load** the Run's rows
(:data:`RUN_GRAPH`) and end that read transaction (:func:`end_read`); **act** with no transaction
open: read the Workers' new lifecycle lines, ask the runtime whether they are alive, let the pure
state machine (:mod:`rlark.controller.phases`) decide, launch or stop Workers; **apply** what
changed in one short transaction guarded by the Job's and Run's version columns (a request that
changed them meanwhile makes the pass write nothing; the next one decides again). A launch
applies its plan before it starts anything, and each Worker's handle as soon as it exists.
Services wake the loop (:meth:`Controller.wake`) so a submit is acted on at once.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable
from datetime import datetime, timezone

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, joinedload, object_session, selectinload
from sqlalchemy.orm.exc import StaleDataError

from rlark import settings
from rlark.controller import admission
from rlark.controller.lifecycle import (check_event, merge_facts, node_table_facts, read_new_events,
                                       read_tail, with_tail)
from rlark.controller.phases import (
    ACTIVE,
    ALLOWED,
    TERMINAL,
    ConditionUpdate,
    RunView,
    Transition,
    WorkerView,
    decide,
    failure_conditions,
    is_ready,
    observed_conditions,
    settle,
    worker_phase,
)
from rlark.ranks import plan_workers
from rlark.runtimes.base import (AdoptSpec, HasCapacity, LaunchSpec, Observed, Runtime, Taken,
                                 WorkerRef, bootstrap_env, ray_resources, taken_port_ranges)
from rlark.services.logs import job_log_dirs, remove_dirs
from rlark.services.records import finish_record, record_condition
from rlark.spec import Job, secret_refs
from rlark.status import (Cause, ConditionType, Desired, EventType, Phase, Reason, WorkerPhase,
                          conditions_of, reported_reason, set_condition, worker_phase_of)
from rlark.store import ControllerStateRow, JobRow, RunRow, Store, WorkerRow
from rlark.store.runs import add_event, new_run
from rlark.words import plural

if TYPE_CHECKING:
    from rlark.secretbox import SecretBox

log = logging.getLogger("rlark.controller")

#: what a pass reads of a Run, loaded up front (``s.get(RunRow, id, options=RUN_GRAPH)``) so that
#: acting on it needs no SQL: its Workers and Tasks, its Job with the Job's project and every Run
#: of the Job with their Workers (a restart waits for the previous Run's Workers), and each
#: Worker's Run (filled from the identity map, no query)
RUN_GRAPH = (
    selectinload(RunRow.workers),
    selectinload(RunRow.tasks),
    joinedload(RunRow.job).joinedload(JobRow.project),
    joinedload(RunRow.job).selectinload(JobRow.runs).selectinload(RunRow.workers),
)


def end_read(s: Session) -> None:
    """End the read transaction that loading opened, keeping every loaded row: nothing is
    pending yet (autoflush is off and nothing was changed) and nothing expires
    (``expire_on_commit=False``), so the pass then acts (runtime calls, log reads) with no
    transaction open and applies what it changed in one short transaction at the end, guarded
    by the Job's and Run's version columns (:class:`StaleDataError` when a request changed them
    meanwhile: nothing of the pass is written)."""
    if s.new or s.dirty or s.deleted:
        raise RuntimeError("end_read() after a change: it would write it (a bug)")
    s.commit()


#: SQL form of WorkerRow.launched
LAUNCHED = or_(WorkerRow.pid.is_not(None), WorkerRow.handle.is_not(None))
#: SQL: launched, or planned for a launch under way (its log path is set before it starts)
PLANNED = or_(LAUNCHED, WorkerRow.log_path.is_not(None))

#: a Worker's last reported phase while its ``ray start`` is (or is about to be) at work: counted
#: against the bound on Ray nodes starting at once (None: nothing reported yet)
STARTING_RAY = frozenset({None, WorkerPhase.Starting, WorkerPhase.Prepared, WorkerPhase.StartingRay})

#: seconds between two passes when nothing happens (a pass also comes at once on a wake, a
#: log line or a Worker's end): the precision of deadlines such as the join timeout
IDLE_RESYNC_SECONDS = 1.0

#: seconds a shutdown waits for killed Workers to be seen gone
KILL_WAIT_SECONDS = 5.0

#: Runs reconciled at once (threads of the lane pool); a Run is never in two lanes
LANES = 8

#: seconds between two heartbeats of the controller in the store (ControllerStateRow): the
#: precision of the window a restarted server gives for a Worker that ended while it was down
HEARTBEAT_SECONDS = 2.0


def iso_time(ts: float | None) -> str:
    """Seconds since the epoch -> ``2026-12-01T04:12:03Z`` (``unknown`` for None)."""
    if ts is None:
        return "unknown"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def role_demands(spec: dict) -> dict[str, admission.Amounts]:
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
        out[role.name] = admission.Amounts(cpu=float(res.num_cpus or 0), memory=res.memory_bytes or 0,
                                           gpu=res.num_gpus or 0, devices=dict(res.custom))
    return out


def when(at: float | None, run: RunRow) -> datetime:
    """The time a transition happened: ``at`` (a Worker line's own time) when it lies between
    the Run's launch and now (a Worker's clock may be off; RLark's own bounds it), else now."""
    now = utcnow()
    if at is None:
        return now
    try:
        stamp = datetime.fromtimestamp(at, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return now
    start = run.started_at or run.created_at
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    return now if stamp > now or stamp < start else stamp


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


def ref(w: WorkerRow) -> WorkerRef:
    """The runtime's handle on a Worker row."""
    return WorkerRef(name=w.name, pid=w.pid, pid_started=w.pid_started, handle=w.handle,
                     run_uid=w.run.uid,
                     node_ip=w.node_ip, port_base=w.port_base, uid=w.run.worker_uid)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def set_conditions(run: RunRow, updates: list[ConditionUpdate], now: float | None = None) -> None:
    """Apply ``updates`` to ``run.conditions`` (:func:`rlark.status.set_condition`: a condition's
    time changes only with its status); the column is assigned only when something changed, so
    an unchanged pass writes nothing. ``now``: seconds since the epoch (default: now)."""
    when = iso_time(time.time() if now is None else now)
    current = run.conditions
    for u in updates:
        changed = set_condition(current, u.type, u.status, u.reason, u.message, when)
        if changed is not None:
            current = changed
    if current is not run.conditions:
        run.conditions = current


def consecutive_retries(runs: list[RunRow], run: RunRow) -> int:
    """How many automatic retries led up to ``run`` since the last Run a user (or a submit)
    started: maxRestarts is a budget per start, not per Job lifetime."""
    count = 0
    for r in sorted((r for r in runs if r.number <= run.number), key=lambda r: r.number, reverse=True):
        if r.cause != Cause.Retry:
            break
        count += 1
    return count


class Controller:
    """Runs the reconcile loop in a background thread (``start``/``shutdown``) or step by step
    (``reconcile_once``, used by tests)."""

    def __init__(self, store: Store, runtime: Runtime, tick_seconds: float = 0.1,
                 on_shutdown: Callable[[], None] | None = None,
                 stop_runs_on_exit: bool = False, idle_resync_seconds: float = IDLE_RESYNC_SECONDS,
                 may_act: Callable[[], bool] | None = None,
                 adopt_cause: str = "the RLark server restarted",
                 secret_box: "SecretBox | None" = None):
        self.store = store
        #: opens the RLark-managed secrets a Run's env refers to when it launches (None: a Run
        #: that refers to one fails with SecretMissing)
        self.secret_box = secret_box
        #: asked before each pass and each Run's turn: False stops this controller from acting
        #: (a leader whose Lease ran out: :mod:`rlark.controller.leader`); None: always acts
        self.may_act = may_act
        #: why this controller adopts the active Runs (said in their ``Adopted`` Event)
        self.adopt_cause = adopt_cause
        #: shutdown() stops every active Run (else they keep running and the next server adopts
        #: them: a restart or upgrade of the server never ends a training Run)
        self.stop_runs_on_exit = stop_runs_on_exit
        #: Worker id -> (last heartbeat of the previous server, adoption time): Workers adopted
        #: after a restart and not yet observed; one found gone ended in that window
        self._adopted: dict[int, tuple[float | None, float]] = {}
        self._last_beat = 0.0
        self._on_shutdown = on_shutdown
        self.runtime = runtime
        self.tick = tick_seconds
        #: with replicas (leader election) a Job submitted to a follower reaches the leader only
        #: at its idle resync (:meth:`wake` is in-process): keep it short, or give the replicas
        #: a way to wake each other first
        self.idle_resync = idle_resync_seconds
        #: (log path, WorkerRef) of every live Worker, for _fingerprint
        self._watched: list[tuple[str | None, WorkerRef]] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._adopted_checked = False
        self._logged: dict[tuple, float] = {}
        #: run id -> (one Worker's demand per role, the whole Run's demand, its Worker count)
        self._demands: dict[int, tuple[dict[str, admission.Amounts], admission.Amounts, int]] = {}
        #: run id -> time.monotonic() before which its launch is not tried again (the runtime
        #: said "not yet": e.g. Kubernetes names still held by the Job's previous Run)
        self._launch_after: dict[int, float] = {}
        #: lanes: Runs reconciled at once, each by one thread; which are at work, which launch
        self._pool = ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="rlark-run")
        self._lanes_lock = threading.Lock()
        self._busy: set[int] = set()
        self._launching: set[int] = set()

    # --- thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rlark-controller", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile_once(wait=False)
                seen = self._fingerprint(refresh=True)
            except Exception as exc:  # keep the loop alive; the next pass retries
                self._log_failure("reconcile pass failed", exc)
                seen = None
            # the next pass comes when something happened: a wake (an API write, a lane that
            # moved its Run), a Worker's log grew (lifecycle lines) or a Worker ended, or at the
            # idle resync (deadlines: join timeout, stop grace)
            resync = time.monotonic() + self.idle_resync
            while not self._stop.is_set() and time.monotonic() < resync:
                if self._wake.wait(self.tick):
                    break
                try:
                    if seen is not None and self._fingerprint() != seen:
                        break
                except Exception as exc:  # e.g. the database is gone for a moment
                    self._log_failure("watching Workers failed", exc)
                    break
            self._wake.clear()

    def _fingerprint(self, refresh: bool = False) -> tuple:
        """What changes when a Worker does something: the size of each live Worker's log and
        whether the runtime sees it alive (cheap: a stat and a process or cache lookup each).
        ``refresh``: read the Workers to watch from the store again (after a pass)."""
        if refresh or self._watched is None:
            with self._session() as s:
                rows = s.scalars(select(WorkerRow).where(WorkerRow.released.is_(False), LAUNCHED)).all()
                self._watched = [(w.log_path, ref(w)) for w in rows]
        out = []
        for path, r in self._watched:
            try:
                size = os.stat(path).st_size if path else -1
            except OSError:
                size = -1
            out.append((size, self.runtime.observe(r).alive))
        return tuple(out)

    def _log_failure(self, what: str, exc: Exception) -> None:
        """A traceback the first time, then one line a minute for the same failure (a damaged
        database fails every pass; the log must stay readable)."""
        key = (what, type(exc).__name__, str(exc)[:200])
        now = time.monotonic()
        last = self._logged.get(key)
        if last is None:
            log.exception(what)
        elif now - last < 60:
            return
        else:
            log.error("%s (again): %s: %s", what, type(exc).__name__, str(exc)[:200])
        self._logged[key] = now

    def _acting(self) -> bool:
        return self.may_act is None or self.may_act()

    def stop_loop(self, wait: bool = True) -> None:
        """Stop the loop (``wait``: and return once its pass in progress ended). Nothing is
        written and no Worker is touched: a leader that lost its Lease leaves every Run to the
        new leader, which adopts them."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if wait and thread is not None:
            thread.join(timeout=30)
            self._thread = None
        # lanes at work finish their pass first (each asks may_act before it begins)
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def status(self) -> dict:
        """For ``/healthz``: a single server (no leader election) always reconciles."""
        return {"leaderElection": False, "leading": True, "reconciling": self._thread is not None}

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop the loop. By default active Runs carry on: their Workers keep running, each Run
        gets a ``ServerStopped`` Event, and the next server on this store adopts them
        (:meth:`_adopt_after_restart`). With ``stop_runs_on_exit`` every Worker this server
        started is stopped and its Run ends ``Stopped`` with reason ``ServerShutdown``."""
        self.stop_loop()
        if not self.stop_runs_on_exit:
            self._detach()
            return
        with self._session() as s:
            runs = s.scalars(select(RunRow).where(RunRow.phase.in_(ACTIVE))
                             .options(*RUN_GRAPH)).unique().all()
            end_read(s)
            for run in runs:
                if run.phase != Phase.Stopping:
                    self._transition(
                        s, run, Transition(Phase.Stopping, Reason.ServerShutdown,
                                           "the RLark server is shutting down")
                    )
                for w in run.workers:
                    if w.launched and not w.released:
                        self.runtime.signal_stop(ref(w))
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not self._teardown_pass(force=False):
                break
            time.sleep(0.1)
        # SIGKILL for what outlived the grace; the killed processes end at once but are seen
        # gone (reaped) a moment later: record each Worker's end, bounded
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while self._teardown_pass(force=True) and time.monotonic() < deadline:
            time.sleep(0.1)
        with self._session() as s:
            stopping = s.scalars(select(RunRow).where(RunRow.phase == Phase.Stopping)
                                 .options(*RUN_GRAPH)).unique().all()
            end_read(s)
            for run in stopping:
                self._transition(s, run, Transition(Phase.Stopped, Reason.ServerShutdown,
                                                    "stopped because the RLark server shut down"))
                self._finish(s, run)
        if self._on_shutdown is not None:
            self._on_shutdown()

    def _detach(self) -> None:
        """Leave every active Run to the next server: a last heartbeat, a ``ServerStopped``
        Event per Run, and a log line saying how many carry on."""
        self._beat(force=True)
        with self._session() as s:
            runs = s.scalars(select(RunRow).where(RunRow.phase.in_(ACTIVE - {Phase.Pending}))).all()
            for run in runs:
                add_event(s, run.job_id, Reason.ServerStopped,
                          "the RLark server stopped; the Run's Workers keep running and the next "
                          "server on this store adopts them", run_number=run.number)
            names = sorted({run.job.name for run in runs})
        if names:
            log.warning("%s keep running without a server (%s); start `rlark server` on the same "
                        "store to adopt them (or use --stop-runs-on-exit to stop Runs on exit)",
                        plural(len(names), "Job"), ", ".join(names[:10]))
        if self._on_shutdown is not None:
            self._on_shutdown()

    def _beat(self, force: bool = False) -> None:
        """Record in the store that this controller is alive now (at most every
        :data:`HEARTBEAT_SECONDS` unless ``force``)."""
        now = time.time()
        if not force and now - self._last_beat < HEARTBEAT_SECONDS:
            return
        with self._session() as s:
            row = s.get(ControllerStateRow, 1)
            if row is None:
                row = ControllerStateRow(id=1, owner="")
                s.add(row)
            row.heartbeat_at = now
        self._last_beat = now

    def _teardown_pass(self, force: bool) -> bool:
        """Observe/kill Workers of every Run; return True while some Worker is still alive."""
        alive = False
        with self._session() as s:
            workers = s.scalars(select(WorkerRow).where(WorkerRow.released.is_(False))
                                .options(joinedload(WorkerRow.run))).all()
            end_read(s)
            for w in workers:
                if not w.launched:
                    w.released = True
                    continue
                if force:
                    self.runtime.kill(ref(w))
                if self._observe_release(w):
                    continue
                alive = True
        return alive

    # --- one pass ---------------------------------------------------------------------------------

    def _session(self):
        # autoflush off: nothing is written before the commit at the end of a block, so no write
        # transaction is open while the controller calls a process or an API
        return self.store.session(autoflush=False)

    def reconcile_once(self, wait: bool = True) -> None:
        """One pass over every Run that needs attention: each Run in its own lane (a thread of
        a pool of :data:`LANES`), so one Run's slow runtime call never delays another's
        transitions. ``wait``: return when every lane of this pass is done (tests step the
        controller this way); the loop thread does not wait for a lane still at work. Nothing
        at all while :attr:`may_act` says no."""
        if not self._acting():
            return
        if not self._adopted_checked:
            self._adopt_after_restart()
            self._adopted_checked = True
        with self._session() as s:
            ids = s.scalars(
                select(RunRow.id)
                .where(
                    or_(
                        RunRow.phase.in_(ACTIVE),
                        RunRow.id.in_(
                            select(WorkerRow.run_id).where(WorkerRow.released.is_(False), LAUNCHED)
                        ),
                    )
                )
                .order_by(RunRow.id)
            ).all()
        with self._lanes_lock:
            launching = bool(self._launching)
        try:
            # while a launch is under way its Workers are not in the store yet: admit nothing
            # new until they are, so capacity is never counted twice
            decisions = {} if launching and self._admits else self._admit()
        except Exception as exc:  # e.g. a bad RLARK_MAX_STARTING_NODES: nothing is admitted
            decisions = {}
            self._log_failure("admitting Pending Runs failed", exc)
        futures = []
        for run_id in ids:
            if not self._acting():
                break
            with self._lanes_lock:
                if run_id in self._busy:
                    continue  # its lane is still at work (a slow runtime call): not waited for
                self._busy.add(run_id)
            futures.append(self._pool.submit(self._lane, run_id, decisions))
        if wait:
            for f in futures:
                f.result()
        if not self._acting():
            return
        try:
            self._finalize_deletes()
        except StaleDataError:
            log.info("a Job changed while its delete was being finished; the next pass retries")
        self._beat()

    def _lane(self, run_id: int, decisions: dict[int, admission.Decision]) -> None:
        """Reconcile one Run in its own session, on a thread of the lane pool; wake the loop
        when the Run changed phase or freed Workers (that may let another Run move on)."""
        moved = False
        try:
            if not self._acting():
                return
            with self._session() as s:
                # load -> act -> apply: the Run's rows are read here, the pass acts on them with
                # no transaction open (runtime calls, log reads), the block's commit applies it
                run = s.get(RunRow, run_id, options=RUN_GRAPH)
                end_read(s)
                if run is not None:
                    before = (run.phase, sum(w.released for w in run.workers))
                    self._reconcile_run(s, run, decisions)
                    moved = before != (run.phase, sum(w.released for w in run.workers))
                    if any(c.type == ConditionType.ReconcileError and c.status
                           for c in conditions_of(run.conditions)):
                        set_conditions(run, [ConditionUpdate(
                            ConditionType.ReconcileError, False, Reason.Reconciled,
                            "the controller's last pass over the Run succeeded")])
        except StaleDataError:
            # a request changed the Run or its Job during this pass (a stop, a restart): nothing
            # of the pass was written; the next pass decides again on fresh rows
            log.info("run %s changed during its pass; reconciling it again", run_id)
            moved = True
        except Exception as exc:
            self._log_failure(f"reconciling run {run_id} failed", exc)
            self._note_reconcile_error(run_id, exc)
        finally:
            with self._lanes_lock:
                self._busy.discard(run_id)
                self._launching.discard(run_id)
            if moved:
                self._wake.set()

    def _note_reconcile_error(self, run_id: int, exc: Exception) -> None:
        """The Run's pass failed (a runtime call raised, its log could not be read...): its
        ``ReconcileError`` condition says so, in a session of its own (the pass's was rolled
        back); the next pass that succeeds clears it. Written only when it changes."""
        try:
            with self._session() as s:
                run = s.get(RunRow, run_id)
                if run is not None:
                    set_conditions(run, [ConditionUpdate(
                        ConditionType.ReconcileError, True, Reason.ReconcileFailed,
                        f"{type(exc).__name__}: {str(exc)[:500]}")])
        except Exception as again:  # noqa: BLE001 - e.g. the database itself is what failed
            self._log_failure(f"recording the failed pass of run {run_id} failed", again)

    def _adopt_after_restart(self) -> None:
        """Take over every Run an earlier server process left Starting, Running or Stopping: each
        launched Worker is handed to the runtime again (:meth:`Runtime.adopt`), a Worker whose
        handle never reached the store (the server died between launching and committing) is
        looked for (:meth:`Runtime.find`), and the Run carries on from the lifecycle lines at the
        stored log offsets. A Worker found gone on its first observation ended while nobody
        watched: ``WorkerLost`` with the window (:meth:`_observe`). A Starting Run with a Worker
        that never started fails with ``LaunchInterrupted`` (its retry policy applies)."""
        now = time.time()
        with self._session() as s:
            beat = s.get(ControllerStateRow, 1)
            since = beat.heartbeat_at if beat is not None else None
            # active Runs, and ended ones whose Workers were still being stopped
            runs = s.scalars(
                select(RunRow).where(or_(
                    RunRow.phase.in_(ACTIVE - {Phase.Pending}),
                    RunRow.id.in_(select(WorkerRow.run_id).where(WorkerRow.released.is_(False),
                                                                 LAUNCHED))))
                .order_by(RunRow.id).options(*RUN_GRAPH)
            ).unique().all()
            end_read(s)  # finding and adopting Workers calls the runtime: no transaction open
            for run in runs:
                ending = run.phase == Phase.Stopping or run.phase in TERMINAL
                try:
                    job = Job.model_validate(run.spec)
                except ValueError:  # a spec this version cannot read: watch nothing, stop it
                    job = None
                adopted, missing = 0, []
                launched_at = run.started_at.timestamp() if run.started_at else None
                for w in run.workers:
                    if w.released:
                        continue
                    if not w.launched and w.log_path and job is not None:
                        found = self.runtime.find(run.uid, w.name, run.namespace)
                        if found is not None:
                            w.pid, w.pid_started, w.handle = found.pid, found.pid_started, found.handle
                            w.phase, w.started_at = WorkerPhase.Starting, w.started_at or utcnow()
                    if not w.launched:
                        missing.append(w)
                        continue
                    if job is None:
                        self.runtime.kill(ref(w))
                        continue
                    self.runtime.adopt(AdoptSpec(ref=ref(w), job=job, is_head=w.is_head,
                                                 log_path=w.log_path, namespace=run.namespace,
                                                 launched_at=launched_at, role=w.role))
                    if ending:
                        # the earlier server may have asked already; this runtime does not know
                        # it did (a Pod it deletes is not "lost")
                        self.runtime.signal_stop(ref(w))
                    else:
                        self._adopted[w.id] = (since, now)
                    # silence while no server read its lines is not the Worker's
                    w.lifecycle = {**(w.lifecycle or {}), "seen_at": time.time()}
                    adopted += 1
                add_event(s, run.job_id, Reason.Adopted,
                          f"{self.adopt_cause} (last heartbeat {iso_time(since)}); it "
                          f"watches the Run's {plural(adopted, 'Worker')} again",
                          run_number=run.number)
                for w in missing:
                    w.released = True  # never started: nothing to watch or free
                    self.runtime.forget(ref(w))
                if job is None and not ending:
                    self._transition(s, run, Transition(
                        Phase.Failed, Reason.SpecUnreadable,
                        "this RLark version cannot read the Run's stored spec; its Workers were "
                        "stopped"))
                elif missing and run.phase == Phase.Starting:
                    ranks = ", ".join(f"rank {w.node_rank} ({w.name})" for w in missing)
                    self._transition(s, run, Transition(
                        Phase.Failed, Reason.LaunchInterrupted,
                        f"the RLark server stopped while launching the Run; {ranks} never "
                        "started", blamed=tuple(w.name for w in missing)))

    def _reconcile_run(self, s: Session, run: RunRow,
                       decisions: dict[int, admission.Decision] | None = None) -> None:
        job = run.job
        if run.phase == Phase.Pending and not run.stop_requested:
            if self._previous_runs_busy(s, run):
                return
            if self._launch_after.get(run.id, 0.0) > time.monotonic():
                return
            decision = (decisions or {}).get(run.id)
            if self._admits and decision is None:
                return  # not in this pass's queue (submitted meanwhile): the next pass decides
            if decision is not None and not decision.admit:
                self._wait_for_capacity(s, run, decision)
                return
            if decision is not None and decision.oversized:
                add_event(s, run.job_id, Reason.ExceedsHostCapacity,
                          "this Run asks for more than this machine has ("
                          + "; ".join(decision.oversized) + "); it starts now because no other "
                          "Run's Workers are running", run_number=run.number, type=EventType.Warning)
            with self._lanes_lock:
                self._launching.add(run.id)
            self._launch(s, run)
            if run.phase not in TERMINAL:
                return
            # the launch failed (LaunchFailed): end it now, what it had created included
        if run.phase in ACTIVE:
            self._observe(s, run)
            view = self._view(run)
            # what the Workers show now, also when this same pass ends the Run (a Run that starts
            # and finishes between two passes still says all its nodes joined); a failure's own
            # conditions (set by its transition) come after
            self._set_observed_conditions(s, run, observed_conditions(view))
            for t in decide(view):
                self._transition(s, run, t)
            if run.phase in (Phase.Starting, Phase.Running) and run.phase != view.phase:
                set_conditions(run, observed_conditions(replace(view, phase=run.phase)))
        if run.phase in TERMINAL or run.phase == Phase.Stopping:
            self._teardown(s, run)
        if run.phase in TERMINAL and all(w.released or not w.launched for w in run.workers):
            self._finish(s, run)
        self._sync_tasks(run)
        if job.current_run_id == run.id:
            job.phase, job.reason, job.message = run.phase, run.reason, run.message

    # --- admission (runtimes with a capacity(): the local runtime) ------------------------------

    @property
    def _admits(self) -> bool:
        return isinstance(self.runtime, HasCapacity)

    def _demand(self, run_id: int, spec: dict | None = None):
        if run_id not in self._demands and spec is not None:
            per_role = role_demands(spec)
            counts = {r.get("name"): int(r.get("workers", 1)) for r in spec.get("spec", {}).get("roles", [])}
            total = admission.Amounts()
            for role, amounts in per_role.items():
                total = total + amounts.times(max(counts.get(role, 0), 0))
            self._demands[run_id] = (per_role, total, sum(max(n, 0) for n in counts.values()))
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
        held, starting = admission.Amounts(), 0
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
            _, total, nodes = self._demand(run_id) or ({}, admission.Amounts(), 0)
            queue.append(admission.Candidate(run_id, total, nodes))
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
        """Keep the Run Pending with reason ``WaitingForCapacity`` and its place in the queue;
        an Event the first time it waits."""
        if run.reason != admission.REASON:
            add_event(s, run.job_id, admission.REASON, decision.message, run_number=run.number)
        run.reason, run.message = admission.REASON, decision.message
        job = run.job
        if job.current_run_id == run.id:
            job.phase, job.reason, job.message = run.phase, run.reason, run.message

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

    @staticmethod
    def _set_observed_conditions(s: Session, run: RunRow, updates: list[ConditionUpdate]) -> None:
        """:func:`set_conditions`, with an Event when ``Responsive`` turns False (a Warning naming
        the silent Workers) or True again."""
        before = next((c.get("status") for c in run.conditions or []
                       if c.get("type") == ConditionType.Responsive), None)
        set_conditions(run, updates)
        for u in updates:
            if u.type != ConditionType.Responsive or str(u.status) == str(before) \
                    or (before is None and u.status):
                continue
            add_event(s, run.job_id, u.reason, u.message, run_number=run.number,
                      type=EventType.Normal if u.status else EventType.Warning)

    def _launch(self, s: Session, run: RunRow) -> None:
        try:
            self._launch_workers(s, run)
            self._launch_after.pop(run.id, None)
        except Exception as exc:  # allocation or settings: fail the Run, never stay Pending
            retry = getattr(exc, "retry_after", None)
            if isinstance(retry, (int, float)) and run.phase == Phase.Pending:
                self._launch_later(s, run, exc, float(retry))
                return
            log.exception("launching run %s failed", run.id)
            self._transition(s, run, Transition(Phase.Failed, launch_failure(exc), str(exc)))

    def _run_secrets(self, s: Session, run: RunRow, job: Job) -> dict[tuple[str, str], str] | None:
        """The values of the RLark-managed secrets ``job``'s env refers to, ``(secret, key)`` ->
        value. A reference the project cannot give a value for (deleted since the submit, or, on
        the local runtime, never an RLark secret) fails the Run: ``SecretMissing``, or
        ``SecretUnreadable`` when the server's key does not open it; then None. On Kubernetes a
        name RLark does not manage is a Kubernetes Secret's: left to the Pod."""
        from rlark.services.secrets import managed_names, open_refs

        refs = secret_refs(job)
        if not refs:
            return {}
        project_id = run.job.project_id
        try:
            with self._session() as r:  # a read of its own: the pass's session stays out of SQL
                managed = managed_names(r, project_id, (n for n, _ in refs))
                wanted = [pair for pair in refs if pair[0] in managed or self.runtime.name != "kubernetes"]
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
                f"the Job's env takes values from {names}, which project "
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

    def _launch_workers(self, s: Session, run: RunRow) -> None:
        job = Job.model_validate(run.spec)
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
                select(WorkerRow.node_ip, WorkerRow.port_base, WorkerRow.role, RunRow.spec,
                       RunRow.worker_uid)
                .join(RunRow, WorkerRow.run_id == RunRow.id)
                .where(WorkerRow.released.is_(False), PLANNED)
            ).all()
        taken = Taken(ips=frozenset(ip for ip, *_ in live if ip),
                      port_ranges=taken_port_ranges((b, spec, role) for _, b, role, spec, _ in live),
                      uids=frozenset(u for *_, u in live if u is not None))
        placement = self.runtime.place(job, run.uid, list(planned.values()), taken,
                                       namespace=run.namespace)
        run.worker_uid = placement.worker_uid
        ray_token = self._ray_token(run)
        rows = sorted(run.workers, key=lambda w: w.node_rank)
        log_dir = settings.job_logs_dir(run.job.project.name, run.job.name) / str(run.number)
        self._transition(s, run, Transition(Phase.Starting, Reason.Launching,
                                            f"starting {plural(len(rows), 'Worker')}"))
        run.started_at = utcnow()
        log_paths: dict[int, str] = {}
        for w in rows:
            place = placement.workers[w.node_rank]
            w.node_ip, w.port_base, w.ray_temp_dir = place.node_ip, place.port_base, place.ray_temp_dir
            w.log_path = log_paths[w.node_rank] = str(log_dir / f"{w.name}.log")
        for w in rows:
            set_aside_stale_log(log_paths[w.node_rank])
        # the plan is durable before anything starts, and each handle as soon as its Worker
        # exists: a server that dies in between leaves Workers the next one finds (find())
        s.commit()
        with self._lanes_lock:
            self._launching.discard(run.id)  # admission counts the planned Workers from now on
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
            )
            try:
                launched = self.runtime.launch(
                    LaunchSpec(job=job, run_uid=run.uid, worker=planned[w.node_rank], env=env,
                               log_path=log_paths[w.node_rank], place=place,
                               namespace=run.namespace, secrets=secrets, ray_token=ray_token)
                )
            except Exception as exc:  # e.g. the role's interpreter does not exist
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
            w.pid, w.pid_started, w.handle = launched.pid, launched.pid_started, launched.handle
            w.phase = WorkerPhase.Starting
            w.started_at = utcnow()
            s.commit()
        add_event(s, run.job_id, Reason.Launched,
                  f"{plural(len(rows), 'Worker')} started; head {rows[0].name} at {placement.head_address}",
                  run_number=run.number)

    # --- observing --------------------------------------------------------------------------------

    def _observe(self, s: Session, run: RunRow) -> None:
        by_rank = {w.node_rank: w for w in run.workers}
        for w in run.workers:
            if not w.log_path or w.released:
                continue
            events, w.log_offset = read_new_events(w.log_path, w.log_offset, run.event_token)
            life = dict(w.lifecycle or {})
            if events:
                self._apply_events(s, run, w, events, life, by_rank)
                # _apply_joined may have marked this Worker joined meanwhile: merge, keep both
                w.lifecycle = {**(w.lifecycle or {}), **life}
                life = dict(w.lifecycle)
            if w.launched and not life.get("gone"):
                seen = self.runtime.observe(ref(w))
                self._merge_runtime_facts(w, seen)
                window = self._adopted.pop(w.id, None)
                if seen.failure and not life.get("failed"):
                    # the runtime knows why the Worker cannot run (a Pod's ImagePull...)
                    reason, message = seen.failure
                    if window is not None and reason in (Reason.WorkerLost, Reason.HeadLost):
                        message = (f"{message}; it ended while the RLark server was down, between "
                                   f"{iso_time(window[0])} and {iso_time(window[1])}")
                    life["failed"] = {"reason": reason, "message": message, "ts": time.time(),
                                      "source": "runtime"}
                    w.lifecycle = {**(w.lifecycle or {}), **life}
                if not seen.alive:
                    # read everything the Worker wrote before it ended
                    events, w.log_offset = read_new_events(w.log_path, w.log_offset,
                                                           run.event_token, to_end=True)
                    self._apply_events(s, run, w, events, life, by_rank)
                    code = self._observed_exit(s, run, w, seen, life)
                    if window is not None and run.phase in (Phase.Starting, Phase.Running):
                        self._lost_while_down(w, life, window)
                    life["gone"] = True
                    w.exit_code = code
                    w.lifecycle = life
                    w.finished_at = utcnow()

    #: Warning Events one Worker's lifecycle lines may add to its Job; later ones are counted
    MAX_WARNING_EVENTS = 20
    #: the most of facts one Worker's row keeps (JSON bytes; the keeper's bound, again here for
    #: a channel that is not the keeper's): what would pass it is dropped, once said
    MAX_FACTS_BYTES = 8 * 1024 * 1024

    def _apply_events(self, s: Session, run: RunRow, w: WorkerRow, events: list[dict],
                      life: dict, by_rank: dict[int, WorkerRow]) -> None:
        """Take a Worker's lifecycle lines into its row (``life``: its lifecycle, updated in
        place). Each line is checked for its kind's shape first (:func:`check_event`); a line
        that is not well formed is dropped, with one Warning Event per Worker saying so.
        Warning lines become Warning Events up to :attr:`MAX_WARNING_EVENTS` per Worker."""
        if events:
            life["seen_at"] = time.time()  # a sign of life, on this server's clock
        for raw in events:
            ev = check_event(raw)
            if ev is None:
                if not life.get("malformed"):
                    life["malformed"] = True
                    add_event(s, run.job_id, Reason.ReportsDropped,
                              f"a lifecycle line of {w.name} ({str(raw.get('event'))[:40]!r}) is "
                              "not well formed and was ignored (and any more such lines)",
                              run_number=run.number, worker=w.name, type=EventType.Warning)
                continue
            kind = ev["event"]
            if kind == "facts":
                merged = merge_facts(w.facts, ev)
                if len(json.dumps(merged, default=str)) > self.MAX_FACTS_BYTES:
                    if not life.get("facts_dropped"):
                        life["facts_dropped"] = True
                        add_event(s, run.job_id, Reason.ReportsDropped,
                                  f"{w.name}'s facts reached {self.MAX_FACTS_BYTES} bytes; the "
                                  "rest are not kept", run_number=run.number, worker=w.name,
                                  type=EventType.Warning)
                    continue
                w.facts = merged
                w.host = ev.get("hostname") or w.host
                w.ip = w.ip or ev.get("ip")
            elif kind == "alive":
                if ev.get("stopped"):
                    life.setdefault("stopped_since", time.time())
                    life["stopped"] = [str(x)[:40] for x in ev["stopped"][:4]]
                else:
                    life.pop("stopped_since", None)
                    life.pop("stopped", None)
            elif kind == "keeper":
                life["keeper"] = {"protected": ev["protected"], "uid": ev["uid"]}
                if isinstance(ev.get("heartbeat"), (int, float)) and ev["heartbeat"] > 0:
                    life["heartbeat"] = float(ev["heartbeat"])
                w.facts = {**(w.facts or {}), "keeper": {
                    k: ev.get(k) for k in ("protected", "uid", "sandbox", "unprotected")
                    if ev.get(k) is not None}}
            elif kind == "phase":
                life["phase"] = ev.get("phase")
                if ev.get("ray_node_id"):
                    w.ray_node_id = ev["ray_node_id"]
                    w.facts = {**(w.facts or {}), "ray_node_id": ev["ray_node_id"]}
            elif kind == "nodes":
                self._apply_joined(s, run, by_rank, ev)
            elif kind in ("failed", "run_finished"):
                life[kind] = ev
            elif kind == "running":
                life["running"] = ev.get("ts")
            elif kind == "stopped":
                life["stopped"] = True
            elif kind == "exit":
                life["exit"] = ev.get("code")
            elif kind == "warning":
                # trouble that does not end the Run, e.g. the bootstrap saw Ray's worker ports
                # run out ("No available ports"): a Warning Event naming the Worker
                n = life["warnings"] = int(life.get("warnings") or 0) + 1
                if n <= self.MAX_WARNING_EVENTS:
                    add_event(s, run.job_id, Reason.of(ev.get("reason")) or Reason.WorkerWarning,
                              str(ev.get("message") or ""), run_number=run.number,
                              worker=w.name, type=EventType.Warning)
                elif n == self.MAX_WARNING_EVENTS + 1:
                    add_event(s, run.job_id, Reason.WarningsSuppressed,
                              f"{w.name} reported more than {self.MAX_WARNING_EVENTS} warnings; "
                              "the rest are not kept as Events", run_number=run.number,
                              worker=w.name, type=EventType.Warning)

    @staticmethod
    def _observed_exit(s: Session, run: RunRow, w: WorkerRow, seen: Observed,
                       life: dict) -> int | None:
        """A gone Worker's exit status: what the runtime observed, else its keeper's ``exit``
        line. A line that says otherwise than the observation is reported (a Warning Event),
        not believed; so is a head's ``run_finished`` from a keeper whose channel is not
        protected (:func:`rlark.controller.phases.run_result`)."""
        said = life.get("exit")
        if seen.exit_code is None:
            return said
        finished = life.get("run_finished")
        trusted = bool((life.get("keeper") or {}).get("protected")) or run.channel != "keeper"
        claims = []
        if said is not None and said != seen.exit_code:
            claims.append(f"exit status {said}")
        if finished is not None and not trusted and finished.get("exit_code") != seen.exit_code:
            claims.append(f"run script exit status {finished.get('exit_code')}")
        if claims:
            add_event(s, run.job_id, Reason.LifecycleContradiction,
                      f"{w.name}'s lifecycle lines say {' and '.join(claims)}, but the runtime saw "
                      f"it exit with {seen.exit_code}; the runtime's observation is kept",
                      run_number=run.number, worker=w.name, type=EventType.Warning)
        return seen.exit_code

    @staticmethod
    def _lost_while_down(w: WorkerRow, life: dict, window: tuple[float | None, float]) -> None:
        """An adopted Worker found gone that said nothing about its end (no failed, stopped,
        exit or run_finished line): it ended while no server watched it, between the previous
        server's last heartbeat and the adoption (``WorkerLost`` naming its rank and that window)."""
        if any(life.get(k) is not None for k in ("failed", "run_finished", "exit")) or life.get("stopped"):
            return
        since, found = window
        life["failed"] = {
            "reason": Reason.WorkerLost, "ts": found,
            "message": (f"ended while the RLark server was down, between {iso_time(since)} and "
                        f"{iso_time(found)}, without a word in its log"),
        }

    @staticmethod
    def _merge_runtime_facts(w: WorkerRow, seen: Observed) -> None:
        """Facts the runtime saw (a Pod's image digest, node) join the Worker's own facts."""
        facts = seen.facts
        if facts and any((w.facts or {}).get(k) != v for k, v in facts.items()):
            w.facts = {**(w.facts or {}), **facts}

    def _apply_joined(self, s: Session, run: RunRow, by_rank: dict[int, WorkerRow], ev: dict) -> None:
        missing = ev.get("missing") or []
        if run.phase == Phase.Starting:
            joined = len(by_rank) - len(missing)
            run.reason = Reason.WaitingForWorkers if missing else Reason.AllJoined
            run.message = (f"{joined}/{len(by_rank)} Ray nodes joined"
                           + (f"; waiting for rank{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(map(str, missing))}" if missing else ""))
        for node in ev.get("joined", []):
            w = by_rank.get(node.get("node_rank"))
            if w is None:
                continue
            first_time = not (w.lifecycle or {}).get("joined")
            w.ray_node_id = node.get("ray_node_id") or w.ray_node_id
            w.ip = node.get("ip") or w.ip
            w.lifecycle = {**(w.lifecycle or {}), "joined": True}
            if node.get("labels") is not None and first_time:
                w.facts = {**(w.facts or {}), "ray_node_table": node_table_facts(node)}
            if first_time:
                add_event(s, run.job_id, Reason.NodeJoined,
                          f"rank {w.node_rank} ({w.name}) joined as Ray node "
                          f"{(w.ray_node_id or '?')[:12]} at {w.ip}",
                          run_number=run.number, worker=w.name,
                          at=when(ev.get("ts") if isinstance(ev.get("ts"), (int, float)) else None, run))

    @staticmethod
    def _worker_view(w: WorkerRow) -> WorkerView:
        life = w.lifecycle or {}
        return WorkerView(
            name=w.name,
            role=w.role,
            node_rank=w.node_rank,
            is_head=w.is_head,
            launched=w.launched,
            alive=w.launched and not life.get("gone"),
            exit_code=w.exit_code,
            failed=life.get("failed"),
            running=bool(life.get("running")),
            running_at=life.get("running") if isinstance(life.get("running"), (int, float)) else None,
            run_finished=life.get("run_finished"),
            stopped=bool(life.get("stopped")),
            joined=bool(life.get("joined")),
            reported_phase=worker_phase_of(life.get("phase")),
            trusted=(w.run.channel != "keeper"
                     or bool((life.get("keeper") or {}).get("protected"))),
            heartbeat=life.get("heartbeat"),
            last_seen=life.get("seen_at"),
            stopped_since=life.get("stopped_since"),
        )

    def _view(self, run: RunRow, now: float | None = None) -> RunView:
        """The state machine's view of the Run (and each Worker's display phase, updated)."""
        workers = []
        for w in run.workers:
            wv = self._worker_view(w)
            workers.append(wv)
            life = w.lifecycle or {}
            if not w.released and not life.get("settled"):
                w.phase = worker_phase(wv, wv.reported_phase, bool(life.get("joined")))
                if wv.failed:
                    w.reason, w.message = reported_reason(wv.failed.get("reason"),
                                                          str(wv.failed.get("message") or ""),
                                                          worker=True)
        fp = (run.spec or {}).get("spec", {}).get("failurePolicy", {})
        return RunView(phase=run.phase, stop_requested=run.stop_requested, workers=workers,
                       now=time.time() if now is None else now,
                       launched_at=run.started_at.timestamp() if run.started_at else None,
                       join_timeout=float(fp.get("joinTimeoutSeconds", 300)),
                       unresponsive_timeout=float(fp.get("unresponsiveTimeoutSeconds", 300)))

    # --- transitions --------------------------------------------------------------------------------

    def _transition(self, s: Session, run: RunRow, t: Transition) -> None:
        """Write ``t`` on the Run (phase, reason, message, times, an Event) and act on it (stop
        signals, Worker settlement, a retry). A transition the state machine does not allow
        (:data:`ALLOWED`), or with a reason that does not belong to its phase
        (:attr:`Reason.run_phases`), is refused and logged as an error: it is a bug, never a Run's
        fate."""
        before = run.phase
        if t.to not in ALLOWED.get(before, ()):
            log.error("refused the transition %s -> %s (%s) of run %s of job %s: not allowed",
                      before, t.to, t.reason, run.number, run.job.name)
            return
        if t.to not in t.reason.run_phases:
            log.error("refused the transition %s -> %s of run %s of job %s: %s is not a reason of "
                      "phase %s", before, t.to, run.number, run.job.name, t.reason, t.to)
            return
        if t.to == Phase.Failed and t.worker:
            # the failing Worker's own last lines say why (pip's error, a traceback, Ray's message)
            blamed = next((w for w in run.workers if w.name == t.worker), None)
            if blamed is not None:
                t = replace(t, message=with_tail(t.message, t.worker, read_tail(blamed.log_path)))
        if t.to in TERMINAL:
            self._settle_workers(run, t)
        run.phase, run.reason, run.message = t.to, t.reason, t.message
        set_conditions(run, failure_conditions(t))
        if t.to in TERMINAL:
            self._sync_tasks(run)  # ready counts and phases final with the Run, on every path
        if t.exit_code is not None:
            run.exit_code = t.exit_code
        now = when(t.at, run)
        if t.to == Phase.Running:
            run.running_at = now
        if t.to in TERMINAL:
            run.finished_at = now
        failed = t.to == Phase.Failed
        add_event(s, run.job_id, t.reason, t.message, run_number=run.number,
                  type=EventType.Warning if failed else EventType.Normal, from_phase=before,
                  to_phase=t.to, at=now)
        job = run.job
        if job.current_run_id in (None, run.id):
            job.current_run_id = run.id
            job.phase, job.reason, job.message = run.phase, run.reason, run.message
        if t.to in TERMINAL or t.to == Phase.Stopping:
            for w in run.workers:
                # a head whose run script finished is already on its way out: let it exit with
                # its own code (it is still killed if it outlives the grace period)
                finishing = (w.lifecycle or {}).get("run_finished") and t.to != Phase.Stopping
                if w.launched and not w.released and not finishing:
                    self.runtime.signal_stop(ref(w))
            run.stop_deadline = time.time() + self._grace(run)
        if failed:
            self._maybe_retry(s, run)

    def _settle_workers(self, run: RunRow, t: Transition) -> None:
        """Every Worker's final phase, reason and exit code as its Run reaches the terminal
        ``t.to`` (:func:`settle`); marked settled so nothing observed later changes them."""
        blamed = frozenset(t.blamed)
        for w in run.workers:
            life = dict(w.lifecycle or {})
            if life.get("settled"):
                continue
            final = settle(self._worker_view(w), t.to, t.reason, blamed, ended_at=t.at)
            w.phase, w.reason, w.message, w.exit_code = (final.phase, final.reason, final.message,
                                                        final.exit_code)
            life["settled"] = True
            w.lifecycle = life

    def _maybe_retry(self, s: Session, run: RunRow) -> None:
        job = run.job
        if job.desired != Desired.Running or job.delete_requested:
            return
        if run.reason is None or not run.reason.retryable:
            return  # a new Run of the same spec would fail the same way (Reason.retryable)
        policy = Job.model_validate(run.spec).spec.failure_policy
        retries = consecutive_retries(job.runs, run)
        if retries >= policy.max_restarts or job.current_run_id != run.id:
            return
        nxt = new_run(job, Cause.Retry, run.runtime)
        s.add(nxt)
        s.commit()  # nxt.id; and the write transaction ends before any runtime call that follows
        job.current_run_id = nxt.id
        # the Job follows its new Run at once, so nobody watching sees "Failed" in between
        job.phase, job.reason, job.message = (
            Phase.Pending, Reason.Retry, f"run {run.number} failed ({run.reason}); retrying")
        add_event(s, job.id, Reason.Retry,
                  f"run {run.number} failed ({run.reason}); starting run {nxt.number} "
                  f"(restart {retries + 1} of {policy.max_restarts})",
                  run_number=nxt.number)

    @staticmethod
    def _grace(run: RunRow) -> float:
        return float(run.spec.get("spec", {}).get("terminationGracePeriodSeconds", 10))

    # --- teardown ---------------------------------------------------------------------------------

    def _teardown(self, s: Session, run: RunRow) -> None:
        overdue = run.stop_deadline is not None and time.time() > run.stop_deadline
        for w in run.workers:
            if w.released or not w.launched:
                continue
            if overdue:
                self.runtime.kill(ref(w))
            self._observe_release(w)

    def _observe_release(self, w: WorkerRow) -> bool:
        """Mark the Worker released (ports and address free again) once its processes are gone.

        A Worker settled with its Run (:meth:`_settle_workers`) keeps its final status; what it
        exited with is kept in its lifecycle (``exit``) only. Otherwise (its Run is stopping) it
        gets a provisional phase until its Run settles it."""
        seen = self.runtime.observe(ref(w))
        self._merge_runtime_facts(w, seen)
        if seen.alive:
            self._note_stop_failure(w, seen)
            return False
        life = dict(w.lifecycle or {})
        if w.log_path:
            events, w.log_offset = read_new_events(
                w.log_path, w.log_offset, w.run.event_token, to_end=True)
            for ev in events:
                if ev.get("event") == "exit":
                    life["exit"] = ev.get("code")
                elif ev.get("event") == "stopped":
                    life["stopped"] = True
        code = seen.exit_code if seen.exit_code is not None else life.get("exit")
        life["gone"] = True
        w.finished_at = w.finished_at or utcnow()
        if life.get("settled"):
            life["exit"] = code
        else:
            if w.exit_code is None:
                w.exit_code = code
            if w.phase not in (WorkerPhase.Failed, WorkerPhase.Succeeded):
                w.phase = (WorkerPhase.Stopped if life.get("stopped") or w.exit_code in (143, 137)
                           else WorkerPhase.Exited)
        w.lifecycle = life
        w.released = True
        self.runtime.forget(ref(w))
        if w.ray_temp_dir and not settings.keep_ray_temp():
            shutil.rmtree(w.ray_temp_dir, ignore_errors=True)
        return True

    @staticmethod
    def _note_stop_failure(w: WorkerRow, seen: Observed) -> None:
        """The runtime could not stop a Worker it was asked to stop (failure reason
        ``StopFailed``, e.g. RBAC refuses deleting its Pod): a Warning Event naming it, once per
        message (the controller asks again every pass)."""
        failure = seen.failure
        if not failure or failure[0] != Reason.StopFailed:
            return
        life = dict(w.lifecycle or {})
        if life.get("stop_failure") == failure[1]:
            return
        life["stop_failure"] = failure[1]
        w.lifecycle = life
        s = object_session(w)
        if s is not None:
            add_event(s, w.run.job_id, failure[0], failure[1], run_number=w.run.number,
                      worker=w.name, type=EventType.Warning)

    def _finish(self, s: Session, run: RunRow) -> None:
        if run.record is None:
            self._launch_after.pop(run.id, None)
            try:
                self.runtime.end_run(run.uid, run.namespace)
            except Exception as exc:  # e.g. RBAC refuses a delete: say what was left, once
                log.warning("cleaning up run %s: %s", run.uid, exc)
                add_event(s, run.job_id, Reason.CleanupFailed, str(exc), run_number=run.number,
                          type=EventType.Warning)
            run.record = finish_record(run, settings.logs_dir())
            set_conditions(run, [ConditionUpdate(*record_condition(run.record))])

    def _sync_tasks(self, run: RunRow) -> None:
        for task in run.tasks:
            members = [w for w in run.workers if w.role == task.role]
            task.ready = sum(1 for w in members if is_ready(run.phase, w.phase, w.lifecycle))
            task.total = len(members)
            if run.phase == Phase.Failed and any(w.phase == WorkerPhase.Failed for w in members):
                task.phase = Phase.Failed
            else:
                task.phase = run.phase

    def _finalize_deletes(self) -> None:
        gone: list = []
        with self._session() as s:
            jobs = s.scalars(select(JobRow).where(JobRow.delete_requested.is_(True))).all()
            for job in jobs:
                busy = any(
                    r.phase in ACTIVE or any(not w.released and w.launched for w in r.workers)
                    for r in job.runs
                )
                if busy:
                    for r in job.runs:
                        if r.phase in ACTIVE and not r.stop_requested:
                            r.stop_requested = True
                    continue
                gone += job_log_dirs(job)
                s.delete(job)
        remove_dirs(gone)  # once the deletes are committed
