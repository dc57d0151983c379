"""The adopt pass: a starting server takes over the Runs an earlier server process left going
(:meth:`Adopting._adopt_after_restart`), once, before its first pass.
"""

from __future__ import annotations

import time

from sqlalchemy import or_, select

from rlark.controller.phases import ACTIVE, TERMINAL, Transition
from rlark.controller.rows import LAUNCHED, RUN_GRAPH, end_read, iso_time, ref, utcnow
from rlark.controller.state import ControllerState
from rlark.runtimes.base import AdoptSpec
from rlark.spec import Job
from rlark.status import Phase, Reason, WorkerPhase
from rlark.store import ControllerStateRow, RunRow, WorkerRow
from rlark.store.runs import add_event
from rlark.words import plural


class Adopting(ControllerState):
    """The adopt pass of :class:`~rlark.controller.loop.Controller`."""

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
                elif missing and (run.phase == Phase.Starting
                                  or (run.phase == Phase.Pending and adopted)):
                    # (a Pending Run with Workers is a queued one: its queue would wait for
                    # the missing ones forever)
                    ranks = ", ".join(f"rank {w.node_rank} ({w.name})" for w in missing)
                    self._transition(s, run, Transition(
                        Phase.Failed, Reason.LaunchInterrupted,
                        f"the RLark server stopped while launching the Run; {ranks} never "
                        "started", blamed=tuple(w.name for w in missing)))
