"""Transitions: a Run's phase change written (phase, reason, message, times, conditions, an Event)
and acted on (stop signals, every Worker's final status, an automatic retry), and the Tasks'
counts that follow the Run. The decision itself is pure (:mod:`rlark.controller.phases`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from sqlalchemy.orm import Session

from rlark.controller.lifecycle import read_tail, with_tail
from rlark.controller.observe import worker_view
from rlark.controller.phases import ALLOWED, TERMINAL, Transition, failure_conditions, is_ready, settle
from rlark.controller.rows import ref, set_conditions, when
from rlark.controller.state import ControllerState
from rlark.spec import Job
from rlark.status import Cause, Desired, EventType, Phase, Reason, WorkerPhase
from rlark.store import RunRow
from rlark.store.runs import add_event, new_run
from rlark.store.webhooks import enqueue_transition

log = logging.getLogger("rlark.controller")


def consecutive_retries(runs: list[RunRow], run: RunRow) -> tuple[int, int]:
    """``(retries, requeues)``: the automatic new Runs that led up to ``run`` since the last Run
    a user (or a submit) started, those after a failure (``maxRestarts`` is a budget per start,
    not per Job lifetime) and those after a preemption (``failurePolicy.maxRequeues``), told
    apart by the reason the Run before each ended with."""
    retries = requeues = 0
    chain = sorted((r for r in runs if r.number <= run.number), key=lambda r: r.number, reverse=True)
    for r, before in zip(chain, chain[1:]):
        if r.cause != Cause.Retry:
            break
        if before.reason == Reason.Preempted:
            requeues += 1
        else:
            retries += 1
    return retries, requeues


class Transitions(ControllerState):
    """Transitions of :class:`~rlark.controller.loop.Controller`."""

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
        # the webhooks' deliveries commit with the transition; a notifier sends them later,
        # outside this pass (services/notifications.py): never an HTTP call here
        enqueue_transition(s, run, before, t.to, t.reason, t.message, now)
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
            final = settle(worker_view(w), t.to, t.reason, blamed, ended_at=t.at)
            w.phase, w.reason, w.message, w.exit_code = (final.phase, final.reason, final.message,
                                                        final.exit_code)
            life["settled"] = True
            w.lifecycle = life

    def _maybe_retry(self, s: Session, run: RunRow) -> None:
        job = run.job
        if job.desired != Desired.Running or job.delete_requested:
            return
        if job.current_run_id != run.id:
            return
        policy = Job.model_validate(run.spec).spec.failure_policy
        retries, requeues = consecutive_retries(job.runs, run)
        if run.reason == Reason.Preempted:
            # the queue took the Run's place for another workload: by the Job's policy a new
            # Run waits in the queue again, a bounded number of times in a row
            if policy.on_preemption != "Requeue":
                return
            if requeues >= policy.max_requeues:
                add_event(s, job.id, Reason.Preempted,
                          f"run {run.number} was preempted {requeues + 1} times in a row; not "
                          f"queued again (spec.failurePolicy.maxRequeues is {policy.max_requeues})",
                          run_number=run.number, type=EventType.Warning)
                return
            reason = Reason.Requeued
            said = f"run {run.number} was preempted; queued again"
            told = (f"run {run.number} was preempted; queueing run {{n}} (requeue "
                    f"{requeues + 1} of {policy.max_requeues})")
        else:
            if run.reason is None or not run.reason.retryable:
                return  # a new Run of the same spec would fail the same way (Reason.retryable)
            if retries >= policy.max_restarts:
                return
            reason = Reason.Retry
            said = f"run {run.number} failed ({run.reason}); retrying"
            told = (f"run {run.number} failed ({run.reason}); starting run {{n}} "
                    f"(restart {retries + 1} of {policy.max_restarts})")
        nxt = new_run(job, Cause.Retry, run.runtime)
        s.add(nxt)
        s.commit()  # nxt.id; and the write transaction ends before any runtime call that follows
        job.current_run_id = nxt.id
        # the Job follows its new Run at once, so nobody watching sees "Failed" in between
        job.phase, job.reason, job.message = Phase.Pending, reason, said
        add_event(s, job.id, reason, told.format(n=nxt.number), run_number=nxt.number)

    @staticmethod
    def _grace(run: RunRow) -> float:
        return float(run.spec.get("spec", {}).get("terminationGracePeriodSeconds", 10))

    def _sync_tasks(self, run: RunRow) -> None:
        for task in run.tasks:
            members = [w for w in run.workers if w.role == task.role]
            task.ready = sum(1 for w in members if is_ready(run.phase, w.phase, w.lifecycle))
            task.total = len(members)
            if run.phase == Phase.Failed and any(w.phase == WorkerPhase.Failed for w in members):
                task.phase = Phase.Failed
            else:
                task.phase = run.phase
