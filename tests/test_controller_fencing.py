"""A controller that another took over from cannot commit (issue 23, item 3: fencing).

Each controller claims a term in the store when it starts acting (``controller_state.term``);
every transaction of its passes checks, before it commits, that the term is still its own. Here
two controllers share one store (SQLite and PostgreSQL): the first one's lane is held inside a
runtime call (``place``) while the second takes over; when the call returns, the first lane's
writes (the Run failed, its Event) are rolled back, and that controller acts no more. Without the
fence, the old lane would write (as tests/test_controller_transactions.py shows it does with a
single controller)."""

from __future__ import annotations

import threading

from sqlalchemy import select

from rlark.controller.fencing import Deposed, check_term, claim_term
from rlark.controller.loop import Controller
from rlark.services.jobs import JobService
from rlark.store import ControllerStateRow, EventRow, JobRow, RunRow
from tests.test_controller_transactions import SlowPlaceRuntime
from tests.test_local_runtime import job_yaml

import pytest


def run_state(store) -> tuple[str, str | None, list[str]]:
    """Job ``fenced``'s current Run: its phase, reason and the reasons of the Job's Events."""
    with store.session() as s:
        job = s.scalars(select(JobRow).where(JobRow.name == "fenced")).one()
        run = s.get(RunRow, job.current_run_id)
        reasons = list(s.scalars(select(EventRow.reason).where(EventRow.job_id == job.id)))
        return str(run.phase), str(run.reason) if run.reason else None, reasons


def test_a_lane_of_a_controller_taken_over_during_its_runtime_call_writes_nothing(store, rlark_home):
    old_rt = SlowPlaceRuntime("fenced")
    old = Controller(store, old_rt)
    old.reconcile_once()  # its first pass claims its term (an empty store: nothing else)
    JobService(store, old.wake).create(job_yaml("fenced", pool_workers=0))
    before = run_state(store)
    assert before[0] == "Pending"

    passing = threading.Thread(target=old.reconcile_once)  # the lane blocks in place()
    passing.start()
    try:
        assert old_rt.entered.wait(60), "place() was never called"
        new_rt = SlowPlaceRuntime("fenced")
        new_rt.release.set()  # its place() fails at once: the new controller fails the Run
        new = Controller(store, new_rt)
        new.take_over()
    finally:
        old_rt.release.set()  # the old lane's place() fails now: it would fail the Run
        passing.join(60)
    assert not passing.is_alive()
    assert run_state(store) == before  # nothing of the old lane was written
    assert old.deposed and not new.deposed

    old.reconcile_once()  # a deposed controller acts no more
    assert run_state(store) == before

    new.reconcile_once()  # the current term's writes count
    phase, reason, events = run_state(store)
    assert (phase, reason) == ("Failed", "LaunchFailed") and "LaunchFailed" in events

    with store.session() as s:
        beat = s.get(ControllerStateRow, 1).heartbeat_at
    old.shutdown()  # its last heartbeat is fenced off too (and the shutdown goes on)
    with store.session() as s:
        assert s.get(ControllerStateRow, 1).heartbeat_at == beat
    new.shutdown()


def test_terms_count_up_and_a_check_fails_for_every_earlier_term(store):
    assert claim_term(store) == 1
    assert claim_term(store) == 2
    with store.session() as s:
        assert s.get(ControllerStateRow, 1).term == 2
        check_term(s, 2)
        with pytest.raises(Deposed, match="term 1 is over"):
            check_term(s, 1)
