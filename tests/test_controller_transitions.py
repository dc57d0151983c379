"""The allowed-transition table is enforced where transitions are written (issue 12, item 3):
an illegal transition is refused, logged as an error, and changes nothing."""

from __future__ import annotations

import logging

from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.controller.phases import Transition
from rlark.runtimes.local import LocalRuntime
from rlark.services.jobs import JobService
from rlark.store import EventRow, RunRow, Store
from tests.test_local_runtime import job_yaml


def test_an_illegal_transition_is_refused_and_logged(rlark_home, caplog):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        ctl = Controller(store, LocalRuntime(), stop_runs_on_exit=True)
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
    finally:
        store.dispose()
