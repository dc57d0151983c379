"""Tables. Times are timezone-aware UTC; JSON columns hold specs, facts, findings and records.

A Job has many Runs (one per start/restart/retry); a Run has one Task per role and one Worker per
replica; Events belong to a Job and optionally to a Run and a Worker. Deleting a Job deletes all.

Phases, causes, the desired state and Event types are enum columns (:mod:`rlark.status`): strings
in the database with a CHECK constraint listing the values (PostgreSQL and SQLite alike,
migration 0009), enum members in Python. Reasons are :class:`ReasonType` columns: checked when
written, not by the database (the vocabulary grows with runtimes), and a stored reason this
version does not know still reads (:meth:`rlark.status.Reason.unrecognised`).
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates
from sqlalchemy.types import TypeDecorator

from rlark.record.schema import validate_record
from rlark.status import Cause, Desired, EventType, Phase, Reason, WorkerPhase

if TYPE_CHECKING:
    from rlark.store.accounts import ProjectRow


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, whatever the database keeps
    (SQLite stores no zone and hands back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None:
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            value = value.astimezone(timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


E = TypeVar("E", bound=StrEnum)


def enum_type(enum: type[E], constraint: str, length: int = 16) -> Enum:
    """A column type for ``enum``: its values as VARCHAR(``length``) with a CHECK constraint
    named ``constraint`` listing them (SQLite and PostgreSQL alike: no native ENUM type, whose
    values PostgreSQL cannot drop later); reads give members, writes take members or their
    values and refuse anything else (``validate_strings``)."""
    return Enum(enum, native_enum=False, create_constraint=True, validate_strings=True,
                length=length, name=constraint, values_callable=lambda e: [m.value for m in e])


class ReasonType(TypeDecorator[Reason]):
    """A :class:`Reason` stored as its text (VARCHAR(64), NULL: no reason). Writes take a Reason
    (or its value) and refuse any other string with ValueError; reads give the member, or for
    a reason this version does not know (written by another RLark version) an unrecognised
    stand-in with the stored text (:meth:`Reason.unrecognised`), so old rows still read and
    nothing stored is lost."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: Reason | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, Reason):
            return value.value
        member = Reason.of(value)
        if member is None:
            raise ValueError(f"{value!r} is not a reason RLark knows (rlark.status.Reason)")
        return member.value

    def process_result_value(self, value: str | None, dialect: Dialect) -> Reason | None:
        return None if value is None else Reason.unrecognised(value)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class JobRow(Base):
    __tablename__ = "jobs"
    #: a Job's name is unique within its project (projects map to Kubernetes namespaces)
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_jobs_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    name: Mapped[str] = mapped_column(String(63), index=True)
    spec: Mapped[dict[str, Any]]
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: what the user asked for: Running (start/restart) or Stopped (stop)
    desired: Mapped[Desired] = mapped_column(enum_type(Desired, "ck_jobs_desired"),
                                             default=Desired.Running)
    #: the current Run's phase and reason, kept here so lists need no join
    phase: Mapped[Phase] = mapped_column(enum_type(Phase, "ck_jobs_phase"), default=Phase.Pending,
                                         index=True)
    reason: Mapped[Reason | None] = mapped_column(ReasonType(), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    findings: Mapped[list[Any]] = mapped_column(default=list)
    current_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    delete_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow
    )

    runs: Mapped[list["RunRow"]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True,
        order_by="RunRow.number",
    )
    project: Mapped["ProjectRow"] = relationship()  # defined in store/accounts.py
    #: optimistic concurrency: every UPDATE checks and bumps it, so a writer that read an older
    #: row (the controller's pass, an API request) fails with StaleDataError instead of
    #: overwriting the other's change; it then reads again and retries
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    __mapper_args__ = {"version_id_col": version}


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    #: short random id, carried by every Ray node of the Run as the ``rlark.io/run`` label
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    #: secret every lifecycle line of this Run carries (bootstrap/worker.py, RLARK_EVENT_TOKEN)
    event_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: why this Run exists: Submitted, Started, Restarted, Updated, Retry
    cause: Mapped[Cause] = mapped_column(enum_type(Cause, "ck_runs_cause"), default=Cause.Submitted)
    runtime: Mapped[str] = mapped_column(String(16), default="local")
    #: kubernetes: the namespace of the Run's objects (its project's namespace when it was made)
    namespace: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: the queue of the cluster its Workers waited in for admission as one group (set at its
    #: launch: a Kueue LocalQueue); None: none (the local runtime's admission is RLark's own)
    queue: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: while it waits in that queue, its place in line (1 = next) as the queue last told it
    #: (Kueue's visibility API); None: not told (the view shows none)
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    spec: Mapped[dict[str, Any]]
    phase: Mapped[Phase] = mapped_column(enum_type(Phase, "ck_runs_phase"), default=Phase.Pending,
                                         index=True)
    reason: Mapped[Reason | None] = mapped_column(ReasonType(), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    #: observations beside the phase (rlark.status.Condition): a list of {type, status, reason,
    #: message, lastTransitionTime}
    conditions: Mapped[list[Any]] = mapped_column(default=list)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    stop_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: the run record, stored once every Worker of the Run has ended; only a record that matches
    #: its schema (rlark.record.schema.RecordV2) can be set (:meth:`_valid_record`)
    record: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: the values of the RLark-managed secrets the Run was launched with, a Fernet token of
    #: ``{"<secret>/<key>": value}`` (secretbox.SecretBox.seal): what its logs and messages are masked with,
    #: also once a secret is deleted or given a new value (None: it used none)
    sealed_secrets: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the Run's Ray GCS token (``RAY_AUTH_TOKEN``), random per Run, sealed like the secrets
    #: (secretbox.SecretBox.seal of ``{"token": ...}``); None until its launch
    ray_token: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: local runtime: the unprivileged uid (and gid) the Run's Workers run as; None: the server's
    #: own user, or another runtime
    worker_uid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: how its lifecycle lines are told from the workload's output: ``keeper`` (only the
    #: Worker's keeper writes them; no token in any line); None: an older Run (``event_token``)
    channel: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: a Run that resumes from the last checkpoint of an earlier one (``rlark restart
    #: --resume``, ``failurePolicy.resume``): ``{"fromRun", "automatic", "by"}`` when asked;
    #: the launch adds ``resolved`` and ``checkpoint``, ``step``, ``output``, ``override``,
    #: ``notes`` (rlark.record.outputs.resume_point). None: it starts afresh
    resume: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    running_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    job: Mapped[JobRow] = relationship(back_populates="runs")
    tasks: Mapped[list["TaskRow"]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True,
        order_by="TaskRow.id",
    )
    workers: Mapped[list["WorkerRow"]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True,
        order_by="WorkerRow.node_rank",
    )

    @validates("record")
    def _valid_record(self, _key: str, rec: dict[str, Any] | None) -> dict[str, Any] | None:
        # The record readers trust is the one the published schema describes: one that does not
        # match it raises here (rlark.record.schema.RecordInvalid), before anything is written.
        # Records stored earlier are read as they are (loading sets no attribute).
        if rec is not None:
            validate_record(rec)
        return rec
    #: optimistic concurrency, as JobRow.version
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    __mapper_args__ = {"version_id_col": version}


class TaskRow(Base):
    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(63))
    #: its Run's phase; Failed when one of its Workers failed
    phase: Mapped[Phase] = mapped_column(enum_type(Phase, "ck_tasks_phase"), default=Phase.Pending)
    ready: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer)
    first_rank: Mapped[int] = mapped_column(Integer)
    last_rank: Mapped[int] = mapped_column(Integer)

    run: Mapped[RunRow] = relationship(back_populates="tasks")


class WorkerRow(Base):
    __tablename__ = "workers"
    __table_args__ = (Index("ix_workers_active", "released"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    role: Mapped[str] = mapped_column(String(63))
    index: Mapped[int] = mapped_column(Integer)
    node_rank: Mapped[int] = mapped_column(Integer)
    is_head: Mapped[bool] = mapped_column(Boolean, default=False)
    phase: Mapped[WorkerPhase] = mapped_column(enum_type(WorkerPhase, "ck_workers_phase"),
                                               default=WorkerPhase.Pending)
    reason: Mapped[Reason | None] = mapped_column(ReasonType(), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # where the runtime put it
    node_ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    port_base: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pid_started: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: runtime-specific id of a Worker that is not a local process (e.g. its Pod's name)
    handle: Mapped[str | None] = mapped_column(String(253), nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    ray_temp_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: true once the Worker's processes are gone and its ports/address may be reused
    released: Mapped[bool] = mapped_column(Boolean, default=False)
    # what the Worker reported
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ray_node_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    facts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: lifecycle lines that decide the Run's fate (failed / running / run_finished / exit)
    lifecycle: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    run: Mapped[RunRow] = relationship(back_populates="workers")

    @property
    def launched(self) -> bool:
        """The runtime started this Worker (a process or an object exists or existed)."""
        return self.pid is not None or self.handle is not None


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    run_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(63), nullable=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: Normal or Warning, as Kubernetes Events
    type: Mapped[EventType] = mapped_column(enum_type(EventType, "ck_events_type"),
                                            default=EventType.Normal)
    #: a :class:`Reason`, or the code of a Finding recorded as a Warning when its Job was
    #: submitted (Finding codes are their own open vocabulary, so this column is plain text)
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")
    #: a transition's phases (None: the Event is not about a transition)
    from_phase: Mapped[Phase | None] = mapped_column(enum_type(Phase, "ck_events_from_phase"),
                                                     nullable=True)
    to_phase: Mapped[Phase | None] = mapped_column(enum_type(Phase, "ck_events_to_phase"),
                                                   nullable=True)
    #: the user whose request caused the event; None: RLark itself (the controller)
    actor: Mapped[str | None] = mapped_column(String(63), nullable=True)


class ControllerStateRow(Base):
    """What the controller keeps about itself across server processes (one row, id 1): when its
    last reconcile pass ended (``heartbeat_at``, seconds since the epoch) and which process ran it.
    The next server reads it to name the window in which a Worker nobody watched ended. ``term``
    fences off the writes of a controller that another took over from."""

    __tablename__ = "controller_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    owner: Mapped[str] = mapped_column(Text, default="")
    #: the term of the controller whose writes count (a fencing token): each controller claims
    #: the next one when it starts acting, and a transaction of a controller holding an earlier
    #: one rolls back (rlark.controller.fencing)
    term: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
