"""One Job's slow runtime call never delays another Job's transitions (issue 12, item 2).

An in-process controller on the real local runtime, whose ``launch`` for one Job is made
deliberately slow (it blocks until the test lets it go, then fails): the other Job is launched,
joins, runs its script and succeeds meanwhile, on a real Ray node. And the controller never holds
a write transaction while it calls the runtime: another writer commits while the call blocks.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.services.jobs import JobService
from rlark.store import EventRow, JobRow, Store
from tests.k8s_testbed import wait_for
from tests.test_local_runtime import job_yaml

pytestmark = pytest.mark.ray


class SlowLaunchRuntime(LocalRuntime):
    """The local runtime, except that launching a Worker of Job ``slow_job`` blocks until
    ``release`` is set, then fails (so that Job never starts a Ray node)."""

    def __init__(self, slow_job: str):
        super().__init__()
        self.slow_job = slow_job
        self.entered = threading.Event()
        self.release = threading.Event()

    def launch(self, spec):
        if spec.job.name == self.slow_job:
            self.entered.set()
            if not self.release.wait(300):
                raise TimeoutError("the test never released the slow launch")
            raise RuntimeError("the deliberately slow launch failed")
        return super().launch(spec)


def phase_of(store: Store, name: str) -> tuple[str, str]:
    with store.session() as s:
        job = s.scalars(select(JobRow).where(JobRow.name == name)).one()
        return job.phase, job.reason


def test_a_slow_launch_of_one_job_does_not_hold_up_another(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    rt = SlowLaunchRuntime("stuck")
    ctl = Controller(store, rt, stop_runs_on_exit=True)
    jobs = JobService(store, ctl.wake)
    ctl.start()
    try:
        jobs.create(job_yaml("stuck", run="echo never", pool_workers=0))
        assert rt.entered.wait(60), "the slow launch was never called"
        # while that call blocks, the store takes writes (no write transaction is held across
        # the runtime call) ...
        with store.session() as s:
            job = s.scalars(select(JobRow).where(JobRow.name == "stuck")).one()
            s.add(EventRow(job_id=job.id, reason="Probe", message="written during a runtime call"))
        # ... and another Job goes all the way to its end
        jobs.create(job_yaml("quick", run="echo quick is done", pool_workers=0))
        wait_for("Job quick to succeed while stuck's launch blocks",
                   lambda: phase_of(store, "quick")[0] in ("Succeeded", "Failed"), 180)
        assert phase_of(store, "quick") == ("Succeeded", "Completed")
        # the plan was committed before the launch call: stuck is Starting, its call still blocked
        assert not rt.release.is_set() and phase_of(store, "stuck")[0] == "Starting"
        rt.release.set()
        wait_for("Job stuck to fail after its launch failed",
                   lambda: phase_of(store, "stuck")[0] == "Failed", 60)
        assert phase_of(store, "stuck") == ("Failed", "LaunchFailed")
    finally:
        rt.release.set()
        ctl.shutdown(grace=10)
        store.dispose()


class ConnectionWatchingRuntime(LocalRuntime):
    """The local runtime, noting for every call how many of the store's pooled connections are
    checked out at that moment (a session holds one only while its transaction is open)."""

    CALLS = ("place", "launch", "observe", "signal_stop", "kill", "forget", "end_run")

    def __init__(self, store: Store):
        super().__init__()
        self.store = store
        self.seen: list[tuple[str, int]] = []
        for name in self.CALLS:
            setattr(self, name, self._watching(name, getattr(super(), name)))

    def _watching(self, name, call):
        def watched(*args, **kwargs):
            self.seen.append((name, self.store.engine.pool.checkedout()))
            return call(*args, **kwargs)
        return watched


def test_every_runtime_call_of_a_runs_life_is_made_with_no_transaction_open(rlark_home):
    """A Run launched, Running, stopped by its user and torn down, pass by pass: at each of its
    runtime calls no connection is checked out (load -> act -> apply: each pass read its rows
    and ended that transaction before acting)."""
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    rt = ConnectionWatchingRuntime(store)
    ctl = Controller(store, rt, stop_runs_on_exit=True)
    jobs = JobService(store, ctl.wake)

    def step_until(phase: str):
        def check():
            ctl.reconcile_once()
            return phase_of(store, "watched")[0] == phase
        return check

    try:
        jobs.create(job_yaml("watched", run="sleep 600", pool_workers=0))
        wait_for("the Run to be Running", step_until("Running"), 180)
        jobs.stop("watched")
        wait_for("the Run to be Stopped", step_until("Stopped"), 60)
        wait_for("the Run's end (end_run) once its Worker is gone",
                 lambda: ctl.reconcile_once() or any(name == "end_run" for name, _ in rt.seen), 30)
        called = {name for name, _ in rt.seen}
        assert {"place", "launch", "observe", "signal_stop", "end_run"} <= called, called
        assert [c for c in rt.seen if c[1] != 0] == []
    finally:
        ctl.shutdown(grace=5)
        store.dispose()
