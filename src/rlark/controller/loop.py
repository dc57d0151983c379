"""The reconcile loop: desired Job state vs what the Workers report and the runtime observes.

A full pass takes every Run that is active (or still has Workers to tear down) and reconciles it
in a lane of its own (a thread of a bounded pool, so one Job's slow runtime call never delays
another's). A lane works in three steps, as dstack's background tasks do: **load** the Run's rows
(:data:`~rlark.controller.rows.RUN_GRAPH`) and end that read transaction
(:func:`~rlark.controller.rows.end_read`); **act** with no transaction open: read the Workers' new
lifecycle lines, ask the runtime whether they are alive, let the pure state machine
(:mod:`rlark.controller.phases`) decide, launch or stop Workers; **apply** what changed in one
short transaction guarded by the Job's and Run's version columns (a request that changed them
meanwhile makes the pass write nothing; the next one decides again). A launch applies its plan
before it starts anything, and each Worker's handle as soon as it exists. Services wake the loop
(:meth:`Controller.wake`) so a submit is acted on at once. Between full passes (a wake, the idle
resync), a Worker whose log grew or which ended brings a pass over its own Run only
(:meth:`Controller.reconcile_runs`), so one busy Run does not make the loop pass over every other,
and no sooner after the Run's last pass than three times that pass took (:mod:`.spacing`), so a
Run of 1,000 Workers starting does not keep a lane busy throughout; an idle resync passes over a
Run of more than 200 live Workers less often than every second (its deadlines within 10 s).

This module is the loop and a Run's turn in it (:meth:`Controller._reconcile_run`); the passes it
runs are modules of their own: :mod:`.launch` (admission and launch), :mod:`.observe`,
:mod:`.adopt`, :mod:`.transitions`, :mod:`.teardown` (and the server's shutdown).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from rlark.controller import admission
from rlark.controller.adopt import Adopting
from rlark.controller.fencing import Deposed, claim_term
from rlark.controller.launch import Launching
from rlark.controller.observe import Observing, set_observed_conditions
from rlark.controller.phases import (ACTIVE, TERMINAL, ConditionUpdate, decide,
                                     observed_conditions)
from rlark.controller.rows import (LAUNCHED, REF_COLUMNS, RUN_GRAPH, end_read, set_conditions,
                                  utcnow)
from rlark.controller.spacing import PassSpacing
from rlark.controller.teardown import TearingDown
from rlark.controller.transitions import Transitions
from rlark.runtimes.base import ReportsChanges, Runtime, WorkerRef
from rlark.runtimes.capacity import Amounts
from rlark.status import ConditionType, EventType, Phase, Reason, conditions_of
from rlark.store import ControllerStateRow, RunRow, Store, WorkerRow
from rlark.store.runs import add_event

if TYPE_CHECKING:
    from rlark.secretbox import SecretBox

log = logging.getLogger("rlark.controller")


#: seconds between two passes when nothing happens (a pass also comes at once on a wake, a
#: log line or a Worker's end): the precision of deadlines such as the join timeout
IDLE_RESYNC_SECONDS = 1.0

#: Runs reconciled at once (threads of the lane pool); a Run is never in two lanes
LANES = 8

#: seconds between two heartbeats of the controller in the store (ControllerStateRow): the
#: precision of the window a restarted server gives for a Worker that ended while it was down
HEARTBEAT_SECONDS = 2.0


def changed_runs(before: dict[int, tuple], now: dict[int, tuple]) -> set[int]:
    """The Run ids whose Workers' fingerprints differ between ``before`` and ``now``
    (:meth:`Controller._fingerprint`): a Run whose Worker's log grew or which ended. Pure."""
    return {run_id for run_id in before.keys() | now.keys() if before.get(run_id) != now.get(run_id)}


class Controller(Launching, Observing, Adopting, Transitions, TearingDown):
    """Runs the reconcile loop in a background thread (``start``/``shutdown``) or step by step
    (``reconcile_once``, used by tests)."""

    def __init__(self, store: Store, runtime: Runtime, tick_seconds: float = 0.1,
                 on_shutdown: Callable[[], None] | None = None,
                 stop_runs_on_exit: bool = False, idle_resync_seconds: float = IDLE_RESYNC_SECONDS,
                 may_act: Callable[[], bool] | None = None,
                 adopt_cause: str = "the RLark server restarted",
                 secret_box: "SecretBox | None" = None,
                 on_timing: Callable[[str, float], None] | None = None):
        self.store = store
        #: told what the controller's own work took, ``(what, seconds)``: ``"pass"`` (a pass
        #: over the active Runs, or over those whose Workers did something, up to handing them
        #: to their lanes), ``"lane"`` (one Run's turn)
        #: and ``"lag"`` (from a wake, e.g. a submit, to the pass it asked for): the server's
        #: metrics (``GET /metrics``). None: nobody listens.
        self.on_timing = on_timing
        self._asked_at: float | None = None
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
        #: (run id, log path, WorkerRef) of every live Worker, for _fingerprint
        self._watched: list[tuple[int, str | None, WorkerRef]] | None = None
        #: a watched Worker's handle -> its Run's id (for runtimes that say what changed)
        self._run_of_handle: dict[str, int] = {}
        self._runtime_facts: dict[int, dict] = {}
        #: this controller's term in the store (claimed by its first pass, or take_over());
        #: another controller that claims a later one fences it off (rlark.controller.fencing)
        self._term: int | None = None
        self._deposed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._adopted_checked = False
        self._logged: dict[tuple, float] = {}
        #: run id -> (one Worker's demand per role, the whole Run's demand, its Worker count,
        #: its spec.priority)
        self._demands: dict[int, tuple[dict[str, Amounts], Amounts, int, int]] = {}
        #: run id -> time.monotonic() before which its launch is not tried again (the runtime
        #: said "not yet": e.g. Kubernetes names still held by the Job's previous Run)
        self._launch_after: dict[int, float] = {}
        #: lanes: Runs reconciled at once, each by one thread; which are at work, which launch
        self._pool = ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="rlark-run")
        self._lanes_lock = threading.Lock()
        self._busy: set[int] = set()
        self._launching: set[int] = set()
        #: Runs a pass asked for while their lane was at work, and those whose lane has ended
        #: since (the loop passes them next: at once when a full pass asked, a wake's, else
        #: when their spacing allows)
        self._asked_again: set[int] = set()
        self._requeued: set[int] = set()
        self._asked_again_now: set[int] = set()
        self._requeued_now: set[int] = set()
        #: each Run's earliest next pass for its Workers' changes (a pass over 1,000 Workers
        #: takes a fifth of a second: back to back, they kept a lane busy throughout)
        self._spacing = PassSpacing()
        #: the clock of the spacing (monotonic seconds; a test's own steps it)
        self.clock: Callable[[], float] = time.monotonic

    # --- thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rlark-controller", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        if self._asked_at is None:  # the oldest wake not yet served is what the lag counts from
            self._asked_at = time.monotonic()
        self._wake.set()

    def _timing(self, what: str, seconds: float) -> None:
        if self.on_timing is not None:
            try:
                self.on_timing(what, seconds)
            except Exception as exc:  # a listener's failure never stops the loop
                self._log_failure("reporting the controller's timing failed", exc)

    def _loop(self) -> None:
        """Passes until :meth:`stop_loop`: a full pass (:meth:`reconcile_once`: every Run,
        admission, deletes, heartbeat) at once after a wake and at least every
        :attr:`idle_resync` seconds (deadlines: join timeout, stop grace; a large Run less
        often, :mod:`.spacing`), and in between a pass
        over only the Runs whose own Workers did something (:meth:`reconcile_runs`): one Run's
        log lines never make the controller pass over every other Run."""
        full, changed, woken = True, set[int](), True
        #: Runs whose Workers did something, waiting for their spacing (:mod:`.spacing`)
        waiting = set[int]()
        next_full = 0.0
        while not self._stop.is_set():
            try:
                began = time.monotonic()
                ran_full = full or began >= next_full
                if ran_full:
                    # cleared before the pass, never after: a wake that comes meanwhile (an API
                    # write) brings another full pass
                    self._wake.clear()
                    asked, self._asked_at = self._asked_at, None
                    if asked is not None:
                        self._timing("lag", began - asked)
                    # an idle resync passes over a large Run less often; a wake, every Run
                    self.reconcile_once(wait=False, idle=not woken)
                    next_full = began + self.idle_resync
                    if woken:
                        waiting.clear()  # passed over now (or requeued, if their lane is at work)
                    else:  # an idle resync may have left them out: their spacing says when
                        waiting |= changed
                else:
                    self.reconcile_runs(changed, wait=False)
                self._timing("pass", time.monotonic() - began)
                # the Workers to watch change with a launch, a release or an adoption, which
                # only a full pass does (or is followed by one: the lane that did it wakes it)
                seen = self._fingerprint(refresh=ran_full)
                if ran_full:
                    self._spacing.keep_only({run_id for run_id, _, _ in self._watched or ()})
            except Exception as exc:  # keep the loop alive; the next pass retries
                self._log_failure("reconcile pass failed", exc)
                seen = None
                # (e.g. the database is down) not at once: at the idle resync, or a wake
                next_full = max(next_full, began + self.idle_resync)
            # the next pass comes when something happened: a wake (an API write, a lane that
            # moved its Run: a full pass), a Worker's log grew (lifecycle lines) or a Worker
            # ended (a pass over its Run, once its spacing allows), or at the idle resync (a
            # full pass)
            full, changed, woken = True, set(), False
            while not self._stop.is_set() and time.monotonic() < next_full:
                if self._wake.wait(self.tick):
                    woken = True
                    break
                with self._lanes_lock:  # Runs asked for while their lane was at work
                    waiting |= self._requeued
                    self._requeued = set()
                    now_due, self._requeued_now = self._requeued_now, set()
                try:
                    if seen is not None:
                        waiting |= self._changed_since(seen)
                    changed = self._spacing.due(waiting, self.clock()) | now_due
                    if changed:
                        waiting -= changed
                        full = False
                        break
                except Exception as exc:  # e.g. the database is gone for a moment
                    self._log_failure("watching Workers failed", exc)
                    break

    def _fingerprint(self, refresh: bool = False) -> dict[int, tuple]:
        """What changes when a Worker does something, per Run id: the size of each of its live
        Workers' logs and whether the runtime sees it alive (cheap: a stat and a process or
        cache lookup each); nothing where the runtime says what changed itself
        (:class:`ReportsChanges`: :meth:`_changed_since` asks it). ``refresh``: read the Workers
        to watch from the store again (their handles only, never their facts or lifecycle; as
        plain rows: ORM objects for 1,000 Workers cost about a tenth of a second, issue 23)."""
        if refresh or self._watched is None:
            with self._session() as s:
                rows = s.execute(select(WorkerRow.run_id, WorkerRow.log_path, *REF_COLUMNS)
                                 .join(RunRow, RunRow.id == WorkerRow.run_id)
                                 .where(WorkerRow.released.is_(False), LAUNCHED)).all()
            self._watched = [(run_id, path, WorkerRef(*handle)) for run_id, path, *handle in rows]
            self._run_of_handle = {r.handle: run_id for run_id, _, r in self._watched if r.handle}
        if isinstance(self.runtime, ReportsChanges):
            return {}
        out: dict[int, list] = {}
        for run_id, path, r in self._watched:
            try:
                size = os.stat(path).st_size if path else -1
            except OSError:
                size = -1
            out.setdefault(run_id, []).append((size, self.runtime.observe(r).alive))
        return {run_id: tuple(seen) for run_id, seen in out.items()}

    def _changed_since(self, seen: dict[int, tuple]) -> set[int]:
        """The Runs whose Workers did something since ``seen`` (:meth:`_fingerprint`) was
        taken: as the runtime says (:class:`ReportsChanges`, a Worker not watched yet is left
        to the next full pass, which passes over every Run), else by a new fingerprint."""
        if isinstance(self.runtime, ReportsChanges):
            return {self._run_of_handle[h] for h in self.runtime.take_changes()
                    if h in self._run_of_handle}
        return changed_runs(seen, self._fingerprint())

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
        return not self._deposed and (self.may_act is None or self.may_act())

    def take_over(self) -> int:
        """Claim a new term in the store (:func:`~rlark.controller.fencing.claim_term`): from now
        on no transaction of an earlier controller on this store commits (each checks the term
        before it does). The first pass that acts calls it; returns the term."""
        self._term = claim_term(self.store)
        return self._term

    @property
    def deposed(self) -> bool:
        """True once a transaction of this controller found a later term in the store: another
        controller took over, and this one acts no more."""
        return self._deposed

    def _fenced(self, exc: Deposed) -> None:
        if not self._deposed:
            log.warning("%s; this controller stops acting", exc)
        self._deposed = True

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

    # --- one pass ---------------------------------------------------------------------------------

    def reconcile_once(self, wait: bool = True, idle: bool = False) -> None:
        """One pass over every Run that needs attention: each Run in its own lane (a thread of
        a pool of :data:`LANES`), so one Run's slow runtime call never delays another's
        transitions. ``wait``: return when every lane of this pass is done (tests step the
        controller this way); the loop thread does not wait for a lane still at work. ``idle``:
        an idle resync (nothing woke the loop), which leaves out the large Runs whose turn has
        not come (:meth:`~.spacing.PassSpacing.resync_due`). Nothing at all while
        :attr:`may_act` says no."""
        if not self._acting():
            return
        try:
            if self._term is None:
                self.take_over()
            if not self._adopted_checked:
                self._adopt_after_restart()
                self._adopted_checked = True
        except Deposed as exc:
            self._fenced(exc)
            return
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
        if idle:
            workers: dict[int, int] = {}
            for run_id, _, _ in self._watched or ():
                workers[run_id] = workers.get(run_id, 0) + 1
            due = self._spacing.resync_due(ids, workers, self.clock(), self.idle_resync)
            ids = [run_id for run_id in ids if run_id in due]
        with self._lanes_lock:
            launching = bool(self._launching)
        try:
            # while a launch is under way its Workers are not in the store yet: admit nothing
            # new until they are, so capacity is never counted twice
            decisions = {} if launching and self._admits else self._admit()
        except Exception as exc:  # e.g. a bad RLARK_MAX_STARTING_NODES: nothing is admitted
            decisions = {}
            self._log_failure("admitting Pending Runs failed", exc)
        self._hand_out(ids, decisions, wait, full=not idle)
        if not self._acting():
            return
        try:
            self._finalize_deletes()
            self._beat()
        except StaleDataError:
            log.info("a Job changed while its delete was being finished; the next pass retries")
        except Deposed as exc:
            self._fenced(exc)

    def reconcile_runs(self, run_ids: set[int] | list[int], wait: bool = True) -> None:
        """A pass over the Runs ``run_ids`` only, each in its lane as :meth:`reconcile_once`
        does (a Run whose lane is still at work is passed again once it is done): what the loop
        runs when only these Runs' Workers did something. Admits nothing (admission weighs
        every Pending Run: a full pass) and writes no heartbeat. ``wait``: return when their
        lanes are done. Nothing while :attr:`may_act` says no, or before the first full pass."""
        if not self._acting() or self._term is None or not self._adopted_checked:
            return
        self._hand_out(sorted(run_ids), {}, wait)

    def _hand_out(self, run_ids: Sequence[int], decisions: dict[int, admission.Decision],
                  wait: bool, full: bool = False) -> None:
        """Each of ``run_ids`` to a lane of its own (:meth:`_lane`, with this pass's admission
        ``decisions``), in order, until :attr:`may_act` says no. A Run whose lane is still at work
        (a slow runtime call) is not waited for: the loop passes it again once that lane is done
        (at once for a ``full`` pass, e.g. a wake's for a stop; else when its spacing allows).
        ``wait``: return when the lanes handed out are done."""
        futures = []
        for run_id in run_ids:
            if not self._acting():
                break
            with self._lanes_lock:
                if run_id in self._busy:
                    (self._asked_again_now if full else self._asked_again).add(run_id)
                    continue
                self._busy.add(run_id)
            futures.append(self._pool.submit(self._lane, run_id, decisions))
        if wait:
            for f in futures:
                f.result()

    def _lane(self, run_id: int, decisions: dict[int, admission.Decision]) -> None:
        """Reconcile one Run in its own session, on a thread of the lane pool; wake the loop
        when the Run changed phase or freed Workers (that may let another Run move on)."""
        moved = False
        began, on_clock = time.monotonic(), self.clock()
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
        except Deposed as exc:
            # another controller took over while this pass acted: nothing of it was written
            self._fenced(exc)
        except Exception as exc:
            self._log_failure(f"reconciling run {run_id} failed", exc)
            self._note_reconcile_error(run_id, exc)
        finally:
            with self._lanes_lock:
                self._busy.discard(run_id)
                self._launching.discard(run_id)
                if run_id in self._asked_again_now:
                    self._asked_again_now.discard(run_id)
                    self._asked_again.discard(run_id)
                    self._requeued_now.add(run_id)
                elif run_id in self._asked_again:
                    self._asked_again.discard(run_id)
                    self._requeued.add(run_id)
            self._spacing.ended(run_id, on_clock, on_clock + time.monotonic() - began)
            self._timing("lane", time.monotonic() - began)
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

    def _reconcile_run(self, s: Session, run: RunRow,
                       decisions: dict[int, admission.Decision] | None = None) -> None:
        job = run.job
        if run.phase == Phase.Pending and not run.stop_requested and not self.queued(run):
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
            if self.queued(run) and not run.stop_requested:
                view = replace(view, queue=self._queue_wait(s, run))
            # what the Workers show now, also when this same pass ends the Run (a Run that starts
            # and finishes between two passes still says all its nodes joined); a failure's own
            # conditions (set by its transition) come after
            set_observed_conditions(s, run, observed_conditions(view))
            for t in decide(view):
                self._transition(s, run, t)
            if run.phase == Phase.Starting and run.started_at is None:
                # admitted by its queue just now: the join timeout counts from here
                run.started_at = utcnow()
            if run.phase in (Phase.Starting, Phase.Running) and run.phase != view.phase:
                set_conditions(run, observed_conditions(replace(view, phase=run.phase)))
        if run.phase in TERMINAL or run.phase == Phase.Stopping:
            self._teardown(s, run)
        if run.phase in TERMINAL and all(w.released or not w.launched for w in run.workers):
            self._finish(s, run)
        self._sync_tasks(run)
        if job.current_run_id == run.id:
            job.phase, job.reason, job.message = run.phase, run.reason, run.message
