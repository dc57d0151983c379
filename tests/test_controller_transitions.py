"""Where transitions are written (issue 12, item 3): the allowed-transition table and each
reason's phases are enforced (an illegal transition is refused, logged as an error, and changes
nothing); a retry follows only a retryable failure; a failed pass sets the Run's
ReconcileError condition. No Worker is launched: Runs are moved by hand or stay Pending."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.controller.phases import Transition
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.services.jobs import JobService
from rlark.store import EventRow, RunRow, Store
from tests.test_local_runtime import job_yaml


@pytest.fixture
def store(rlark_home):
    st = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    yield st
    st.dispose()


@pytest.fixture
def ctl(store) -> Controller:
    return Controller(store, LocalRuntime(), stop_runs_on_exit=True)


def test_an_illegal_transition_is_refused_and_logged(store, ctl, caplog):
    JobService(store).create(job_yaml("legal", pool_workers=0))
    caplog.set_level(logging.ERROR, logger="rlark.controller")
    with store.session() as s:
        run = s.scalars(select(RunRow)).one()
        events_before = len(s.scalars(select(EventRow)).all())
        ctl._transition(s, run, Transition("Succeeded", "Completed", "a Pending Run cannot succeed"))
        assert (run.phase, run.finished_at) == ("Pending", None)
        assert len(s.scalars(select(EventRow)).all()) == events_before
    assert "refused the transition Pending -> Succeeded (Completed)" in caplog.text
    with store.session() as s:  # and a legal one is written
        run = s.scalars(select(RunRow)).one()
        ctl._transition(s, run, Transition("Stopped", "StopRequested", "stopped before it started"))
    with store.session() as s:
        assert s.scalars(select(RunRow)).one().phase == "Stopped"


def test_a_transition_whose_reason_is_not_of_its_phase_is_refused(store, ctl, caplog):
    JobService(store).create(job_yaml("reasons", pool_workers=0))
    caplog.set_level(logging.ERROR, logger="rlark.controller")
    with store.session() as s:
        run = s.scalars(select(RunRow)).one()
        # allowed by ALLOWED (Pending -> Stopped), but "Completed" is a reason of Succeeded
        ctl._transition(s, run, Transition("Stopped", "Completed", "not how a Run stops"))
        assert run.phase == "Pending"
    assert "Completed is not a reason of phase Stopped" in caplog.text


@pytest.mark.parametrize("reason, retried", [("RunFailed", True), ("BadConfig", False),
                                             ("SpecUnreadable", False)])
def test_a_retry_follows_only_a_retryable_failure(store, ctl, reason, retried):
    """``maxRestarts`` retries a failed Run unless its reason says a new Run of the same spec
    would fail the same way (``Reason.retryable``)."""
    doc = job_yaml("retry", pool_workers=0).replace(
        "prepareTimeoutSeconds: 120}", "prepareTimeoutSeconds: 120, maxRestarts: 1}")
    JobService(store).create(doc)
    with store.session() as s:
        run = s.scalars(select(RunRow)).one()
        ctl._transition(s, run, Transition("Failed", reason, "it failed"))
    with store.session() as s:
        runs = s.scalars(select(RunRow).order_by(RunRow.number)).all()
        assert [(r.cause, r.phase) for r in runs] == (
            [("Submitted", "Failed"), ("Retry", "Pending")] if retried else [("Submitted", "Failed")])


def test_a_failed_pass_sets_reconcile_error_and_the_next_good_one_clears_it(store, ctl, tmp_path):
    """A pass over a Run that fails (here: its head's log path is a directory, so reading its
    lifecycle lines raises) sets the Run's ReconcileError condition with the error; the next pass
    that succeeds sets it False. Nothing is launched: the Run is moved to Starting by hand."""
    from rlark.status import Phase
    from rlark.store import WorkerRow

    ctl.reconcile_once()  # the first pass (adoption) on an empty store
    service = JobService(store)
    service.create(job_yaml("broken", pool_workers=0))
    log_path = tmp_path / "head.log"
    log_path.mkdir()
    with store.session() as s:
        run = s.scalars(select(RunRow)).one()
        run.phase = run.job.phase = Phase.Starting
        s.scalars(select(WorkerRow)).one().log_path = str(log_path)

    def condition() -> dict | None:
        found = [c for c in service.get("broken")["currentRun"]["conditions"]
                 if c["type"] == "ReconcileError"]
        return found[0] if found else None

    assert condition() is None  # never failed: no such condition yet
    ctl.reconcile_once()
    failed = condition()
    assert failed is not None and (failed["status"], failed["reason"]) == ("True", "ReconcileFailed")
    assert failed["message"].startswith("IsADirectoryError:") and failed["lastTransitionTime"]
    ctl.reconcile_once()  # failing again changes nothing
    assert condition() == failed

    log_path.rmdir()
    log_path.write_text("")
    ctl.reconcile_once()
    cleared = condition()
    assert cleared is not None and (cleared["status"], cleared["reason"]) == ("False", "Reconciled")
    conditions = {c["type"]: c for c in service.get("broken")["currentRun"]["conditions"]}
    assert (conditions["AllJoined"]["status"], conditions["AllJoined"]["reason"]) == (
        "False", "WaitingForWorkers")


def _preempt_chain(store, ctl, policy: str, times: int) -> list[tuple[str, str, str | None]]:
    """Submit a Job with ``policy`` (failurePolicy entries), then fail its current Run as
    preempted ``times`` times (each as the queue would: Failed, Preempted); its Runs as
    ``(cause, phase, reason)``."""
    doc = job_yaml("pre", pool_workers=0).replace(
        "prepareTimeoutSeconds: 120}", f"prepareTimeoutSeconds: 120, {policy}}}")
    JobService(store).create(doc)
    for _ in range(times):
        with store.session() as s:
            run = s.scalars(select(RunRow).order_by(RunRow.number.desc())).first()
            if run.phase != "Pending":
                break
            ctl._transition(s, run, Transition("Failed", "Preempted", "Kueue preempted the Run's Pod group"))
    with store.session() as s:
        return [(r.cause, r.phase, r.reason) for r in s.scalars(select(RunRow).order_by(RunRow.number))]


def test_a_preempted_run_is_requeued_a_bounded_number_of_times_apart_from_max_restarts(store, ctl):
    runs = _preempt_chain(store, ctl, "maxRestarts: 0, maxRequeues: 2", 5)
    assert runs == [("Submitted", "Failed", "Preempted"), ("Retry", "Failed", "Preempted"),
                    ("Retry", "Failed", "Preempted")]
    with store.session() as s:
        events = [(e.reason, e.message) for e in s.scalars(select(EventRow).order_by(EventRow.id))]
    assert [m for r, m in events if r == "Requeued"] == [
        "run 1 was preempted; queueing run 2 (requeue 1 of 2)",
        "run 2 was preempted; queueing run 3 (requeue 2 of 2)"]
    assert ("Preempted", "run 3 was preempted 3 times in a row; not queued again "
            "(spec.failurePolicy.maxRequeues is 2)") in events


def test_a_preempted_run_with_on_preemption_fail_ends_its_job(store, ctl):
    assert _preempt_chain(store, ctl, "onPreemption: Fail, maxRestarts: 3", 1) == [
        ("Submitted", "Failed", "Preempted")]


def test_preemption_requeues_do_not_spend_max_restarts(store, ctl):
    _preempt_chain(store, ctl, "maxRestarts: 1", 1)
    with store.session() as s:  # run 2, requeued, then fails for its own reason: one restart left
        run = s.scalars(select(RunRow).order_by(RunRow.number.desc())).first()
        ctl._transition(s, run, Transition("Failed", "RunFailed", "exit 3"))
    with store.session() as s:
        runs = [(r.number, r.cause, r.phase) for r in s.scalars(select(RunRow).order_by(RunRow.number))]
    assert runs == [(1, "Submitted", "Failed"), (2, "Retry", "Failed"), (3, "Retry", "Pending")]


def test_a_run_queued_on_this_machine_past_its_queue_timeout_fails(store, ctl):
    from datetime import timedelta

    from rlark.controller.admission import Decision

    doc = job_yaml("wait", pool_workers=0).replace(
        "prepareTimeoutSeconds: 120}", "prepareTimeoutSeconds: 120, queueTimeoutSeconds: 60}")
    JobService(store).create(doc)
    waiting = Decision(False, 1, "queued in this machine's queue, 1st in line: needs 1 CPU")
    with store.session() as s:
        run = s.scalars(select(RunRow)).one()
        ctl._wait_for_capacity(s, run, waiting)
        assert (run.phase, run.reason) == ("Pending", "Queued")
        run.created_at = run.created_at - timedelta(seconds=61)
        ctl._wait_for_capacity(s, run, waiting)
        assert (run.phase, run.reason) == ("Failed", "QueueTimeout")
        assert run.message == ("not admitted within 60 s (spec.failurePolicy.queueTimeoutSeconds); "
                               "last: queued in this machine's queue, 1st in line: needs 1 CPU")
