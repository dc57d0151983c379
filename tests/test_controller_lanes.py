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
from rlark.runtimes.local import LocalRuntime
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
