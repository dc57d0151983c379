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
