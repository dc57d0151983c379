"""The controller never holds a database transaction across a call to the runtime (issue 12,
item 2: load -> act -> apply).

A real PostgreSQL server shows it from the outside: while the runtime's ``place`` of a Run is
deliberately blocked, ``pg_stat_activity`` has no connection idle in a transaction. Before this
design the pass's session had read the Run (and the Workers' addresses) and sat "idle in
transaction" for as long as the call took, on every runtime call of the pass.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, text

from rlark.controller.loop import Controller
from rlark.controller.rows import end_read
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.services.jobs import JobService
from rlark.store import JobRow, Store
from tests.k8s_testbed import wait_for
from tests.test_local_runtime import job_yaml


class SlowPlaceRuntime(LocalRuntime):
    """The local runtime, except that placing Job ``slow_job`` blocks until ``release`` is set,
    then fails (nothing is started)."""

    def __init__(self, slow_job: str):
        super().__init__()
        self.slow_job = slow_job
        self.entered = threading.Event()
        self.release = threading.Event()

    def place(self, job, *args, **kwargs):
        if job.metadata.name == self.slow_job:
            self.entered.set()
            if not self.release.wait(120):
                raise TimeoutError("the test never released the slow place()")
            raise RuntimeError("the deliberately slow place() failed")
        return super().place(job, *args, **kwargs)


def idle_in_transaction(store: Store) -> list[tuple]:
    """Other connections to the store's database that sit in an open transaction."""
    with store.engine.connect() as c:
        return c.execute(text(
            "SELECT pid, state, left(query, 200) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
        )).all()


def test_no_transaction_is_open_while_the_runtime_is_called(postgres_url, rlark_home):
    store = Store(postgres_url)
    rt = SlowPlaceRuntime("stuck")
    ctl = Controller(store, rt, stop_runs_on_exit=True)
    jobs = JobService(store, ctl.wake)
    ctl.start()
    try:
        jobs.create(job_yaml("stuck", run="echo never", pool_workers=0))
        assert rt.entered.wait(60), "place() was never called"
        assert idle_in_transaction(store) == []
        rt.release.set()
        wait_for("Job stuck to fail after its place() failed", lambda: _phase(store) == "Failed", 60)
        with store.session() as s:
            job = s.scalars(select(JobRow).where(JobRow.name == "stuck")).one()
            assert job.reason == "LaunchFailed" and "deliberately slow place() failed" in job.message
    finally:
        rt.release.set()
        ctl.shutdown(grace=5)
        store.dispose()


def _phase(store: Store) -> str:
    with store.session() as s:
        return s.scalars(select(JobRow.phase).where(JobRow.name == "stuck")).one()


def test_end_read_refuses_to_write_what_a_pass_changed(rlark_home):
    """end_read() ends a read transaction; called after a change it would commit that change
    half-way through a pass, so it refuses."""
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        JobService(store).create(job_yaml("demo", pool_workers=0))
        with pytest.raises(RuntimeError, match="after a change"):
            with store.session(autoflush=False) as s:
                job = s.scalars(select(JobRow)).one()
                end_read(s)  # nothing changed yet: fine
                job.message = "changed in the act phase"
                end_read(s)
        with store.session() as s:  # and the change was not written
            assert s.scalars(select(JobRow)).one().message != "changed in the act phase"
    finally:
        store.dispose()
