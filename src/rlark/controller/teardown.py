"""The teardown pass: the Workers of a stopping or ended Run stopped (killed once its grace has
passed) and released once gone, the Run's record finished when every Worker has ended, deleted
Jobs removed once nothing of theirs runs; and the server's own shutdown (Runs left to the next
server, or stopped with ``stop_runs_on_exit``).
"""

from __future__ import annotations

import logging
import shutil
import time

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, joinedload, object_session

from rlark import settings
from rlark.controller.lifecycle import note_moment, read_new_events
from rlark.controller.fencing import Deposed
from rlark.controller.observe import merge_runtime_facts
from rlark.controller.phases import ACTIVE, ConditionUpdate, Transition
from rlark.controller.rows import RUN_GRAPH, end_read, load_facts, ref, set_conditions, utcnow
from rlark.controller.state import ControllerState
from rlark.runtimes.base import Observed
from rlark.store.files import job_log_dirs, remove_dirs
from rlark.record.finish import finish_record, record_condition
from rlark.status import EventType, Phase, Reason, WorkerPhase
from rlark.spec import Job
from rlark.store import JobRow, RunRow, WorkerRow
from rlark.store.secrets import open_refs
from rlark.store.runs import add_event
from rlark.words import plural

log = logging.getLogger("rlark.controller")


#: seconds a shutdown waits for killed Workers to be seen gone
KILL_WAIT_SECONDS = 5.0


class TearingDown(ControllerState):
    """The teardown pass of :class:`~rlark.controller.loop.Controller`, and its shutdown."""

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop the loop. By default active Runs carry on: their Workers keep running, each Run
        gets a ``ServerStopped`` Event, and the next server on this store adopts them
        (:meth:`_adopt_after_restart`). With ``stop_runs_on_exit`` every Worker this server
        started is stopped and its Run ends ``Stopped`` with reason ``ServerShutdown``."""
        self.stop_loop()
        try:
            if not self.stop_runs_on_exit:
                self._detach()
                return
            self._stop_runs(grace)
        except Deposed as exc:  # another controller took over: the Runs are its own now
            log.warning("%s; this server's shutdown leaves the Runs to it", exc)
            if not self.stop_runs_on_exit:
                return
        if self._on_shutdown is not None:
            self._on_shutdown()

    def _stop_runs(self, grace: float) -> None:
        """Stop every active Run (``ServerShutdown``) and wait for their Workers' end, at most
        ``grace`` seconds before they are killed (the shutdown with ``stop_runs_on_exit``)."""
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

    def _teardown_pass(self, force: bool) -> bool:
        """Observe/kill Workers of every Run; return True while some Worker is still alive."""
        alive = False
        with self._session() as s:
            workers = s.scalars(select(WorkerRow).where(WorkerRow.released.is_(False))
                                .options(joinedload(WorkerRow.run), defer(WorkerRow.facts))).all()
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

    # --- a Run's Workers ---------------------------------------------------------------------------

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
        merge_runtime_facts(w, seen, self._runtime_facts)
        if seen.alive:
            self._note_stop_failure(w, seen)
            return False
        life = dict(w.lifecycle or {})
        if w.log_path:
            events, w.log_offset = read_new_events(
                w.log_path, w.log_offset, w.run.event_token, to_end=True)
            for ev in events:
                note_moment(life, ev)
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
        self._runtime_facts.pop(w.id, None)
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
            load_facts(self._session, run.workers)  # the record holds them (deferred by the load)
            run.record = finish_record(run, settings.logs_dir(), self._mount_keys(run))
            set_conditions(run, [ConditionUpdate(*record_condition(run.record))])

    def _mount_keys(self, run: RunRow) -> dict[tuple[str, str], str] | None:
        """The values of the secrets the Run's ``objectStorage`` mounts take their credentials
        from, for reading its outputs back from their buckets (read in a session of its own);
        None where they cannot be opened (no secret box, a key that changed: the record says
        the outputs could not be read back)."""
        try:
            job = Job.model_validate(run.spec)
        except ValueError:
            return None
        refs = [pair for role in job.spec.roles for m in role.mounts for pair in m.secret_refs()]
        if not refs:
            return {}
        if self.secret_box is None:
            return None
        try:
            with self._session() as r:
                return open_refs(r, run.job.project_id, refs, self.secret_box)
        except ValueError:  # SecretKeyError: the server's key does not open them
            return None

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
