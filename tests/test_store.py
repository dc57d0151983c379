"""The Store on SQLite and PostgreSQL: Alembic schema, JSON columns, constraints, cascades,
timestamps, SQLite pragmas, how ``RLARK_DATABASE_URL`` picks the database, the 0004
migration of a store made before projects existed and the 0009 one of a store made before
status types (enum columns, nullable reasons, Run conditions)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, Table, delete, func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from rlark import settings
from rlark.services.errors import Conflict
from rlark.services.jobs import JobService
from rlark.store import EventRow, JobRow, ProjectRow, RunRow, Store, TaskRow, WorkerRow
from rlark.store.db import alembic_config, make_engine
from tests.test_job_service import ROOMY_HOST, small

TABLES = {"jobs", "runs", "tasks", "workers", "events", "users", "projects", "memberships",
          "tokens", "sessions", "audit", "controller_state", "secrets", "webhooks", "webhook_deliveries",
          "alembic_version"}
#: the project every Job of a fresh store (and every Job from before projects) belongs to; the
#: 0004 migration creates it with id 1
DEFAULT_PROJECT_ID = 1


@pytest.fixture
def store(db_url):
    st = Store(db_url)
    yield st
    st.dispose()


def _utc(t: datetime) -> datetime:
    """SQLite returns naive datetimes (stored as UTC); PostgreSQL returns aware ones."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t


def _job(name: str = "demo", **kw) -> JobRow:
    kw.setdefault("project_id", DEFAULT_PROJECT_ID)
    return JobRow(name=name, spec=kw.pop("spec", {"kind": "Job"}), **kw)


def _job_with_children(s, name: str = "demo") -> int:
    """A Job with one Run, one Task, two Workers and two Events; returns the Job id."""
    job = _job(name)
    run = RunRow(job=job, number=1, uid=f"uid-{name}", spec={"kind": "Job"})
    run.tasks.append(TaskRow(role="head", total=2, first_rank=0, last_rank=1))
    run.workers.append(WorkerRow(name=f"{name}-head-0", role="head", index=0, node_rank=0,
                                 is_head=True))
    run.workers.append(WorkerRow(name=f"{name}-head-1", role="head", index=1, node_rank=1))
    s.add(job)
    s.flush()
    s.add(EventRow(job_id=job.id, reason="Submitted", run_number=1))
    s.add(EventRow(job_id=job.id, reason="Launched", run_number=1, worker=f"{name}-head-0"))
    s.flush()
    return job.id


def _counts(store: Store) -> dict[str, int]:
    with store.session() as s:
        return {
            m.__tablename__: s.scalar(select(func.count()).select_from(m))
            for m in (JobRow, RunRow, TaskRow, WorkerRow, EventRow)
        }


# --- schema / migrations ---------------------------------------------------------------------------


def test_migration_creates_all_tables_at_head_revision(store):
    insp = inspect(store.engine)
    assert set(insp.get_table_names()) == TABLES
    head = ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()
    assert head is not None
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head]
    # the schema matches the models: same columns in every table, indexes and uniques present
    from rlark.store import Base

    for table in Base.metadata.sorted_tables:
        db_cols = {c["name"] for c in insp.get_columns(table.name)}
        assert db_cols == set(table.columns.keys()), table.name
    assert {"ix_jobs_phase"} <= {i["name"] for i in insp.get_indexes("jobs")}
    assert {"ix_workers_active", "ix_workers_run_id"} <= {i["name"] for i in insp.get_indexes("workers")}
    fks = {(fk["referred_table"], fk["options"].get("ondelete", "").upper())
           for t in ("runs", "tasks", "workers", "events") for fk in insp.get_foreign_keys(t)}
    assert fks == {("jobs", "CASCADE"), ("runs", "CASCADE")}
    # accounts: a user's memberships, tokens and sessions go with the user; a project's
    # memberships with the project; a Job's project must exist (never deleted under it)
    account_fks = {(t, fk["referred_table"], fk["options"].get("ondelete", "").upper())
                   for t in ("memberships", "tokens", "sessions", "jobs")
                   for fk in insp.get_foreign_keys(t)}
    assert account_fks == {("memberships", "users", "CASCADE"), ("memberships", "projects", "CASCADE"),
                           ("tokens", "users", "CASCADE"), ("sessions", "users", "CASCADE"),
                           ("sessions", "tokens", "CASCADE"),
                           ("jobs", "projects", "")}
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("jobs")}
    assert ("project_id", "name") in uniques and ("name",) not in uniques
    assert ("digest",) in {tuple(u["column_names"]) for u in insp.get_unique_constraints("tokens")}
    with store.session() as s:  # the migration made the project every Job starts in
        assert s.scalars(select(ProjectRow.name)).all() == ["default"]


def test_opening_the_store_twice_is_idempotent_and_keeps_data(db_url):
    first = Store(db_url)
    with first.session() as s:
        s.add(_job("kept", labels={"team": "a"}))
    first.dispose()

    second = Store(db_url)  # runs the migration again
    try:
        assert set(inspect(second.engine).get_table_names()) == TABLES
        with second.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
        with second.session() as s:
            job = s.scalar(select(JobRow).where(JobRow.name == "kept"))
            assert job is not None and job.labels == {"team": "a"}
    finally:
        second.dispose()


def test_store_without_migration_leaves_database_empty(db_url):
    st = Store(db_url, migrate=False)
    try:
        assert inspect(st.engine).get_table_names() == []
    finally:
        st.dispose()


# --- the 0004 migration: accounts and projects on a store made before them ----------------------


def _store_at_0003_with_jobs(url: str) -> None:
    """A database at revision 0003 (before projects) holding two Jobs, ``alpha`` (a Run and two
    Events) and ``beta``, written as that revision's schema had them."""
    engine = make_engine(url)
    try:
        command.upgrade(alembic_config(engine), "0003")
        now = datetime.now(timezone.utc)
        with engine.begin() as conn:
            meta = MetaData()
            jobs, runs, events = (Table(t, meta, autoload_with=conn) for t in ("jobs", "runs", "events"))
            assert "project_id" not in jobs.c and "actor" not in events.c  # really the old schema
            for name in ("alpha", "beta"):
                conn.execute(jobs.insert().values(
                    name=name, spec=small(name), labels={"team": name}, desired="Running",
                    phase="Succeeded", reason="", message="", findings=[], delete_requested=False,
                    created_at=now, updated_at=now))
            alpha = conn.execute(select(jobs.c.id).where(jobs.c.name == "alpha")).scalar_one()
            conn.execute(runs.insert().values(
                job_id=alpha, number=1, uid="old-run-1", cause="Submitted", runtime="local",
                spec=small("alpha"), phase="Succeeded", reason="", message="",
                stop_requested=False, created_at=now, event_token="t" * 32))
            run_id = conn.execute(select(runs.c.id)).scalar_one()
            conn.execute(jobs.update().where(jobs.c.id == alpha).values(current_run_id=run_id))
            for reason in ("Submitted", "Succeeded"):
                conn.execute(events.insert().values(job_id=alpha, run_number=1, time=now,
                                                    type="Normal", reason=reason, message=""))
    finally:
        engine.dispose()


def test_0004_keeps_every_run_and_event_of_existing_jobs(db_url):
    # on SQLite, 0004 rebuilds `jobs` in batch mode: with foreign keys on, dropping the old table
    # would cascade to every Run, Worker, Task and Event (migrations/env.py turns them off)
    _store_at_0003_with_jobs(db_url)
    store = Store(db_url)  # upgrades to head, as a server start does
    try:
        with store.session() as s:
            run = s.scalar(select(RunRow))
            assert run is not None, "the migration lost the Run"
            assert (run.uid, run.namespace, run.event_token) == ("old-run-1", None, "t" * 32)
            assert s.scalar(select(func.count()).select_from(EventRow)) == 2
        service = JobService(store, host=ROOMY_HOST)
        alpha = service.get("alpha")  # project "default" unless told otherwise
        assert alpha["project"] == "default" and alpha["currentRun"]["uid"] == "old-run-1"
        events = service.events("alpha")  # no actor: from before users existed
        assert [(e["reason"], e["actor"]) for e in events] == [("Submitted", None), ("Succeeded", None)]
    finally:
        store.dispose()


def test_0004_moves_existing_jobs_to_default_and_scopes_names_by_project(db_url):
    _store_at_0003_with_jobs(db_url)
    store = Store(db_url)  # upgrades to head, as a server start does
    try:
        insp = inspect(store.engine)
        assert set(insp.get_table_names()) == TABLES
        assert "actor" in {c["name"] for c in insp.get_columns("events")}
        assert "namespace" in {c["name"] for c in insp.get_columns("runs")}
        assert "project_id" in {c["name"] for c in insp.get_columns("jobs")}
        head = ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head]
        with store.session() as s:
            rows = s.execute(select(JobRow.name, ProjectRow.name, JobRow.labels).join(
                ProjectRow, ProjectRow.id == JobRow.project_id).order_by(JobRow.name)).all()
            assert [tuple(r) for r in rows] == [("alpha", "default", {"team": "alpha"}),
                                                ("beta", "default", {"team": "beta"})]
        service = JobService(store, host=ROOMY_HOST)
        assert service.get("beta")["project"] == "default"
        assert service.list()["total"] == 2

        # a new project after the migration (its id must not collide with the migration's
        # explicit id 1: on PostgreSQL the sequence was advanced)
        with store.session() as s:
            s.add(ProjectRow(name="other"))
        # the same name in another project is fine; twice in one project is refused
        assert service.create(small("beta"), project="other")["project"] == "other"
        for project in ("default", "other"):
            with pytest.raises(Conflict, match="already exists in project"):
                service.create(small("beta"), project=project)
        with pytest.raises(IntegrityError):  # the database says so too, not only the service
            with store.session() as s:
                s.add(_job("beta"))
                s.flush()
        assert service.get("beta", "other")["currentRun"]["number"] == 1
        assert service.get("beta", "default")["currentRun"] is None  # the old one had no Run
        assert service.list(projects=["other"])["total"] == 1
        assert service.list()["total"] == 3
    finally:
        store.dispose()


# --- the 0009 migration: status types on a store made before them --------------------------------

#: what revision 0006 held: every phase of each kind, reasons '' (none), known and unknown
LEGACY_REASON = "ControllerRestarted"  # written by an earlier RLark version, gone since


def _store_at_0006_with_every_phase(url: str, worker_phase: str = "Joining") -> None:
    """A database at revision 0006 holding a Job with one Run per Run phase (every cause), a
    Task per Run phase, a Worker per Worker phase and a transition Event per allowed
    transition, written as that revision's schema had them (plain strings)."""
    from rlark.controller.phases import ALLOWED
    from rlark.status import Cause, Phase, WorkerPhase

    engine = make_engine(url)
    try:
        command.upgrade(alembic_config(engine), "0006")
        now = datetime.now(timezone.utc)
        with engine.begin() as conn:
            meta = MetaData()
            jobs, runs, tasks, workers, events = (
                Table(t, meta, autoload_with=conn) for t in ("jobs", "runs", "tasks", "workers", "events"))
            assert "conditions" not in runs.c  # really the old schema
            conn.execute(jobs.insert().values(
                project_id=DEFAULT_PROJECT_ID, name="old", spec=small("old"), labels={},
                desired="Stopped", phase="Failed", reason="", message="", findings=[],
                delete_requested=False, created_at=now, updated_at=now))
            job_id = conn.execute(select(jobs.c.id)).scalar_one()
            causes = list(Cause)
            for n, phase in enumerate(Phase, 1):
                conn.execute(runs.insert().values(
                    job_id=job_id, number=n, uid=f"old-{n}", cause=causes[n % len(causes)].value,
                    runtime="local", spec=small("old"), phase=phase.value,
                    reason=LEGACY_REASON if n == 1 else ("" if n == 2 else "HeadLost"),
                    message=f"run {n}", stop_requested=False, created_at=now))
            run_ids = conn.execute(select(runs.c.id).order_by(runs.c.number)).scalars().all()
            for phase in Phase:
                conn.execute(tasks.insert().values(run_id=run_ids[0], role=f"r-{phase.value.lower()}",
                                                   phase=phase.value, ready=0, total=1,
                                                   first_rank=0, last_rank=0))
            for rank, phase in enumerate([*WorkerPhase, worker_phase]):
                conn.execute(workers.insert().values(
                    run_id=run_ids[0], name=f"old-w-{rank}", role="r", index=rank, node_rank=rank,
                    is_head=rank == 0, phase=str(phase), reason="" if rank else "RunFailed",
                    message="", log_offset=0, released=True, facts={}, lifecycle={}))
            for before, targets in ALLOWED.items():
                for to in targets:
                    conn.execute(events.insert().values(
                        job_id=job_id, run_number=1, time=now, type="Warning" if to == "Failed" else "Normal",
                        reason="Submitted", message=f"{before} -> {to}", from_phase=before.value,
                        to_phase=to.value))
    finally:
        engine.dispose()


def test_0009_converts_rows_holding_every_phase_in_place(db_url):
    from rlark.controller.phases import ALLOWED
    from rlark.status import Cause, Desired, EventType, Phase, Reason, WorkerPhase

    _store_at_0006_with_every_phase(db_url)
    store = Store(db_url)  # upgrades to head, as a server start does
    try:
        with store.session() as s:
            job = s.scalar(select(JobRow))
            assert (job.desired, job.phase, job.reason) == (Desired.Stopped, Phase.Failed, None)
            runs = s.scalars(select(RunRow).order_by(RunRow.number)).all()
            assert [r.phase for r in runs] == list(Phase)  # every row, each phase an enum member
            assert all(isinstance(r.cause, Cause) and r.conditions == [] for r in runs)
            assert runs[0].reason == LEGACY_REASON and not runs[0].reason.known  # kept, still reads
            assert (runs[1].reason, runs[2].reason) == (None, Reason.HeadLost)  # '' -> no reason
            tasks = s.scalars(select(TaskRow).order_by(TaskRow.id)).all()
            assert [t.phase for t in tasks] == list(Phase)
            workers = s.scalars(select(WorkerRow).order_by(WorkerRow.node_rank)).all()
            assert [w.phase for w in workers] == [*WorkerPhase, WorkerPhase.Joining]
            assert workers[0].reason is Reason.RunFailed and workers[1].reason is None
            events = s.scalars(select(EventRow).order_by(EventRow.id)).all()
            assert {(e.from_phase, e.to_phase) for e in events} == {
                (b, t) for b, ts in ALLOWED.items() for t in ts}
            assert {e.type for e in events} == set(EventType)
            # an unchanged legacy reason survives a write of the row
            runs[0].message = "touched"
        with store.session() as s:
            assert s.scalar(select(RunRow).where(RunRow.number == 1)).reason == LEGACY_REASON
        service = JobService(store, host=ROOMY_HOST)
        views = {r["number"]: r for r in service.runs("old")}
        assert (views[1]["reason"], views[2]["reason"], views[3]["reason"]) == (LEGACY_REASON, "", "HeadLost")
        assert service.get("old")["reason"] == ""
    finally:
        store.dispose()


def test_0009_downgrade_gives_back_what_0008_held(db_url):
    _store_at_0006_with_every_phase(db_url)
    engine = make_engine(db_url)
    try:
        command.upgrade(alembic_config(engine), "0009")
        command.downgrade(alembic_config(engine), "0008")
        with engine.connect() as conn:
            assert "conditions" not in {c["name"] for c in inspect(conn).get_columns("runs")}
            assert not inspect(conn).get_check_constraints("runs")
            reasons = conn.execute(text("SELECT reason FROM runs ORDER BY number")).scalars().all()
            assert reasons[:3] == [LEGACY_REASON, "", "HeadLost"]
            assert conn.execute(text("SELECT count(*) FROM workers")).scalar() == 17
        command.upgrade(alembic_config(engine), "head")  # and up again
    finally:
        engine.dispose()


def test_0009_stops_before_changing_anything_on_a_value_it_cannot_constrain(db_url):
    _store_at_0006_with_every_phase(db_url, worker_phase="Exploding")
    engine = make_engine(db_url)
    try:
        command.upgrade(alembic_config(engine), "0008")  # the revision before it
        with pytest.raises(RuntimeError, match=r"workers.phase holds \['Exploding'\]"):
            command.upgrade(alembic_config(engine), "head")
        with engine.connect() as conn:  # still at 0008, every row as it was
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0008"
            assert conn.execute(text("SELECT count(*) FROM runs WHERE reason = ''")).scalar() == 1
            assert conn.execute(text("SELECT count(*) FROM workers")).scalar() == 17
    finally:
        engine.dispose()


@pytest.mark.parametrize("table, column, bad", [
    ("jobs", "phase", "Exploded"), ("jobs", "desired", "Maybe"), ("runs", "phase", "running"),
    ("runs", "cause", "Whim"), ("tasks", "phase", "Joined"), ("workers", "phase", "Gone"),
    ("events", "type", "Error"), ("events", "to_phase", "Done"),
])
def test_the_database_refuses_a_status_outside_its_enum(store, table, column, bad):
    """CHECK constraints on SQLite and PostgreSQL alike, also for writers that bypass the ORM."""
    with store.session() as s:
        _job_with_children(s)
    with pytest.raises(IntegrityError):
        with store.engine.begin() as conn:
            conn.execute(text(f"UPDATE {table} SET {column} = :v"), {"v": bad})


def test_the_orm_refuses_a_status_or_reason_outside_its_enum(store):
    from sqlalchemy.exc import StatementError

    from rlark.status import Phase, Reason

    with store.session() as s:
        job_id = _job_with_children(s)
    for column, bad in (("phase", "Exploded"), ("reason", "NoSuchReason")):
        with pytest.raises(StatementError, match="NoSuchReason|Exploded"):
            with store.session() as s:
                setattr(s.scalar(select(RunRow).where(RunRow.job_id == job_id)), column, bad)
    with store.session() as s:  # values are taken as the members they spell
        run = s.scalar(select(RunRow).where(RunRow.job_id == job_id))
        run.phase, run.reason = "Running", "AllJoined"
    with store.session() as s:
        run = s.scalar(select(RunRow).where(RunRow.job_id == job_id))
        assert (run.phase, run.reason) == (Phase.Running, Reason.AllJoined)
        assert run.phase is Phase.Running and run.reason is Reason.AllJoined


# --- columns ----------------------------------------------------------------------------------------


def test_json_columns_round_trip(store):
    spec = {
        "apiVersion": "rlark.io/v1",
        "spec": {"roles": [{"name": "head", "workers": 2, "resources": {"cpu": 0.5, "gpu": 0}}],
                 "runScript": "echo 'héllo' \"quoted\"\n", "rlinf": None},
        "unicode": "训练 ✓",
        "nested": [[1, 2.5, True, False, None], {"deep": {"er": []}}],
    }
    findings = [{"code": "DuplicateEnv", "severity": "warning", "path": "spec.roles[0].env[1].name"}]
    facts = {"versions": {"ray": "2.40.0", "python": "3.11.9"}, "gpus": [], "mem": 2 ** 40}
    # a record as the builder makes it (the store keeps no other), holding the spec above
    from rlark.record.build import build_record
    from tests.test_record_v2 import rows

    record = {**build_record(*rows(), final=True), "spec": spec}
    with store.session() as s:
        job = _job("json", spec=spec, labels={"a": "b"}, findings=findings)
        run = RunRow(job=job, number=1, uid="u1", spec=spec, record=record)
        run.workers.append(WorkerRow(name="json-head-0", role="head", index=0, node_rank=0,
                                     facts=facts, lifecycle={"joined": True, "exit": {"code": 0}}))
        s.add(job)
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "json"))
        assert job.spec == spec
        assert job.labels == {"a": "b"}
        assert job.findings == findings
        run = job.runs[0]
        assert run.spec == spec
        assert run.record == record
        assert run.workers[0].facts == facts
        assert run.workers[0].lifecycle == {"joined": True, "exit": {"code": 0}}


def test_defaults_are_filled_in(store):
    with store.session() as s:
        s.add(_job("defaults"))
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "defaults"))
        assert (job.labels, job.findings, job.desired, job.phase) == ({}, [], "Running", "Pending")
        assert job.delete_requested is False and job.current_run_id is None
        run = RunRow(job=job, number=1, uid="d1", spec={})
        s.add(run)
        s.flush()
        assert (run.cause, run.runtime, run.phase, run.stop_requested, run.record) == (
            "Submitted", "local", "Pending", False, None)


def test_unique_job_names_are_enforced(store):
    with store.session() as s:
        s.add(_job("same"))
    with pytest.raises(IntegrityError):
        with store.session() as s:
            s.add(_job("same"))
    # the failed transaction was rolled back; the first Job is intact and alone
    with store.session() as s:
        assert s.scalars(select(JobRow.name)).all() == ["same"]


def test_job_names_are_unique_per_project(store):
    with store.session() as s:
        other = ProjectRow(name="other")
        s.add(other)
        s.flush()
        s.add(_job("same"))
        s.add(_job("same", project_id=other.id))  # another project: fine
    with pytest.raises(IntegrityError):
        with store.session() as s:
            s.add(_job("same", project_id=other.id))
    with store.session() as s:
        rows = s.execute(select(ProjectRow.name, JobRow.name).join(
            ProjectRow, ProjectRow.id == JobRow.project_id).order_by(ProjectRow.name)).all()
        assert [tuple(r) for r in rows] == [("default", "same"), ("other", "same")]


def test_a_job_needs_an_existing_project(store):
    with pytest.raises(IntegrityError):
        with store.session() as s:
            s.add(_job("orphan", project_id=424242))
            s.flush()


def test_run_number_is_unique_per_job_and_uid_is_unique(store):
    with store.session() as s:
        a, b = _job("a"), _job("b")
        s.add_all([a, b])
        s.flush()
        s.add(RunRow(job_id=a.id, number=1, uid="x1", spec={}))
        s.add(RunRow(job_id=b.id, number=1, uid="x2", spec={}))  # same number, other Job: fine
    with pytest.raises(IntegrityError):
        with store.session() as s:
            a = s.scalar(select(JobRow).where(JobRow.name == "a"))
            s.add(RunRow(job_id=a.id, number=1, uid="x3", spec={}))
            s.flush()
    with pytest.raises(IntegrityError):
        with store.session() as s:
            a = s.scalar(select(JobRow).where(JobRow.name == "a"))
            s.add(RunRow(job_id=a.id, number=2, uid="x2", spec={}))
            s.flush()


def test_foreign_keys_are_enforced(store):
    with pytest.raises(IntegrityError):
        with store.session() as s:
            s.add(EventRow(job_id=424242, reason="Orphan"))
            s.flush()


# --- cascades --------------------------------------------------------------------------------------


def test_deleting_a_job_through_the_orm_cascades(store):
    with store.session() as s:
        _job_with_children(s, "gone")
        _job_with_children(s, "stays")
    assert _counts(store) == {"jobs": 2, "runs": 2, "tasks": 2, "workers": 4, "events": 4}
    with store.session() as s:
        s.delete(s.scalar(select(JobRow).where(JobRow.name == "gone")))
    assert _counts(store) == {"jobs": 1, "runs": 1, "tasks": 1, "workers": 2, "events": 2}
    with store.session() as s:
        assert s.scalars(select(WorkerRow.name).order_by(WorkerRow.node_rank)).all() == [
            "stays-head-0", "stays-head-1"]


def test_deleting_a_job_row_cascades_in_the_database(store):
    """A plain DELETE (no ORM relationships involved) relies on ON DELETE CASCADE, which on
    SQLite needs PRAGMA foreign_keys=ON on every connection."""
    with store.session() as s:
        job_id = _job_with_children(s, "gone")
        _job_with_children(s, "stays")
    with store.session() as s:
        s.execute(delete(JobRow).where(JobRow.id == job_id))
    assert _counts(store) == {"jobs": 1, "runs": 1, "tasks": 1, "workers": 2, "events": 2}


# --- timestamps ------------------------------------------------------------------------------------


def test_timestamps_are_stored(store):
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    with store.session() as s:
        job = _job("times")
        s.add(job)
        s.flush()
        s.add(EventRow(job_id=job.id, reason="Submitted"))
        started = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
        s.add(RunRow(job=job, number=1, uid="t1", spec={}, started_at=started))
    after = datetime.now(timezone.utc) + timedelta(seconds=1)
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "times"))
        created, updated = _utc(job.created_at), _utc(job.updated_at)
        assert before <= created <= after
        assert before <= updated <= after
        run = job.runs[0]
        assert before <= _utc(run.created_at) <= after
        assert _utc(run.started_at) == started  # microseconds kept
        assert run.running_at is None and run.finished_at is None
        event = s.scalar(select(EventRow).where(EventRow.job_id == job.id))
        assert before <= _utc(event.time) <= after
        if not store.is_sqlite:
            assert job.created_at.tzinfo is not None  # timestamptz on PostgreSQL
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "times"))
        job.phase = "Starting"
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "times"))
        assert _utc(job.updated_at) > updated  # onupdate
        assert _utc(job.created_at) == created


# --- SQLite specifics --------------------------------------------------------------------------------


def test_sqlite_uses_wal_and_foreign_keys(rlark_home):
    st = Store(f"sqlite:///{rlark_home / 'sub' / 'rlark.db'}")  # parent dir is created
    try:
        assert st.is_sqlite
        with st.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar().lower() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 10000
        assert (rlark_home / "sub" / "rlark.db").exists()
    finally:
        st.dispose()


# --- choosing the database ------------------------------------------------------------------------


def test_default_database_is_sqlite_under_rlark_home(rlark_home):
    assert settings.database_url() == f"sqlite:///{rlark_home / 'rlark.db'}"
    st = Store()
    try:
        assert st.url == f"sqlite:///{rlark_home / 'rlark.db'}"
        assert st.is_sqlite
        assert (rlark_home / "rlark.db").exists()
        assert TABLES <= set(inspect(st.engine).get_table_names())
    finally:
        st.dispose()


@pytest.mark.parametrize(
    "given, expected",
    [
        ("postgresql://u:p@db.example:5432/rlark", "postgresql+psycopg://u:p@db.example:5432/rlark"),
        ("postgres://u@db/rlark", "postgresql+psycopg://u@db/rlark"),
        ("postgresql+psycopg://u@db/rlark", "postgresql+psycopg://u@db/rlark"),
        ("  postgresql://u@db/rlark\n", "postgresql+psycopg://u@db/rlark"),
        ("sqlite:////var/lib/rlark/x.db", "sqlite:////var/lib/rlark/x.db"),
    ],
)
def test_database_url_from_environment(rlark_home, monkeypatch, given, expected):
    monkeypatch.setenv("RLARK_DATABASE_URL", given)
    assert settings.database_url() == expected


def test_empty_database_url_means_default(rlark_home, monkeypatch):
    monkeypatch.setenv("RLARK_DATABASE_URL", "   ")
    assert settings.database_url() == f"sqlite:///{rlark_home / 'rlark.db'}"


def test_store_follows_rlark_database_url_to_postgresql(rlark_home, postgres_url, monkeypatch):
    plain = "postgresql://" + postgres_url.split("://", 1)[1]  # as a user would write it
    monkeypatch.setenv("RLARK_DATABASE_URL", plain)
    st = Store()
    try:
        assert st.url == postgres_url
        assert not st.is_sqlite
        assert (st.engine.dialect.name, st.engine.dialect.driver) == ("postgresql", "psycopg")
        assert set(inspect(st.engine).get_table_names()) == TABLES
        assert not (rlark_home / "rlark.db").exists()
    finally:
        st.dispose()


# --- optimistic concurrency (issue 12, item 2) --------------------------------------------------------


def test_a_stale_writer_fails_instead_of_overwriting_and_retry_reads_again(store):
    """Two writers read the same Run; the first commits; the second's commit raises
    StaleDataError and changes nothing. retry_on_conflict runs a losing write again on fresh
    rows."""
    from sqlalchemy.orm.exc import StaleDataError

    from rlark.store.db import retry_on_conflict

    with store.session() as s:
        job_id = _job_with_children(s)
    with store.session() as setup:
        run_id = setup.scalars(select(RunRow.id).where(RunRow.job_id == job_id)).one()
    stale = store._sessions()
    try:
        run = stale.get(RunRow, run_id)
        assert run.version == 1
        with store.session() as s:  # e.g. a stop request
            s.get(RunRow, run_id).stop_requested = True
        run.phase = "Running"  # e.g. the controller's pass, decided on what it read before
        with pytest.raises(StaleDataError):
            stale.commit()
        stale.rollback()
    finally:
        stale.close()
    with store.session() as s:
        run = s.get(RunRow, run_id)
        assert (run.phase, run.stop_requested, run.version) == ("Pending", True, 2)

    tries = []

    @retry_on_conflict
    def set_reason(reason: str) -> None:
        with store.session() as s:
            row = s.get(RunRow, run_id)
            tries.append(row.version)
            if len(tries) == 1:  # someone else writes between this read and this commit
                with store.session() as other:
                    other.get(RunRow, run_id).message = "changed meanwhile"
            row.reason = reason

    set_reason("Retry")
    with store.session() as s:
        run = s.get(RunRow, run_id)
        assert (run.reason, run.message, run.version) == ("Retry", "changed meanwhile", 4)
    assert tries == [2, 3]
