"""Webhooks of a project and their deliveries (the outbox the notifier sends from).

A webhook is a URL a project's admin registered, with the Run events it wants, a payload
format and an optional signing secret (sealed, :mod:`rlark.secretbox`). A delivery is one
event for one webhook: added in the same transaction as the Run's transition that caused it
(:func:`enqueue_transition`, called by the controller), so a committed transition never lacks its
deliveries and a rolled-back one never has any; sent later, outside any transaction, by
:class:`rlark.services.notifications.Notifier`. One delivery per (webhook, Run, event): the
unique constraint keeps a second server (or a second look at the same Run) from adding it twice.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.event import listens_for
from sqlalchemy.orm import Mapped, Session, mapped_column

from rlark.status import Phase, Reason
from rlark.store.models import Base, RunRow, UTCDateTime, enum_type, utcnow


class WebhookEvent(StrEnum):
    """What a webhook may ask to be told about a Run."""

    running = "run.running"  # every Worker joined, the run script started
    succeeded = "run.succeeded"
    failed = "run.failed"  # with the reason (RunFailed, PrepareFailed, JoinTimeout ...)
    stopped = "run.stopped"
    #: still Pending (waiting for capacity, names, admission) after the server's threshold
    queued = "run.queued"


#: the event a transition to each phase is (phases not named here notify nobody)
PHASE_EVENTS: dict[Phase, WebhookEvent] = {
    Phase.Running: WebhookEvent.running,
    Phase.Succeeded: WebhookEvent.succeeded,
    Phase.Failed: WebhookEvent.failed,
    Phase.Stopped: WebhookEvent.stopped,
}


class WebhookFormat(StrEnum):
    """The body a webhook gets: RLark's own JSON, or a Slack incoming-webhook message."""

    rlark = "rlark"
    slack = "slack"


class DeliveryState(StrEnum):
    pending = "pending"  # to be sent (again) at ``next_attempt_at``
    succeeded = "succeeded"  # the receiver answered 2xx
    failed = "failed"  # attempts used up, or an answer that a retry would not change


class WebhookRow(Base):
    __tablename__ = "webhooks"
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_webhooks_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    url: Mapped[str] = mapped_column(Text)
    #: the :class:`WebhookEvent` values it wants, sorted
    events: Mapped[list[Any]] = mapped_column(JSON, default=list)
    format: Mapped[WebhookFormat] = mapped_column(enum_type(WebhookFormat, "ck_webhooks_format"),
                                                  default=WebhookFormat.rlark)
    #: a Fernet token of ``{"secret": ...}`` (secretbox.SecretBox.seal); None: unsigned
    sealed_secret: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(63), nullable=True)


class DeliveryRow(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("webhook_id", "run_id", "event",
                                       name="uq_webhook_deliveries_once"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"),
                                            index=True)
    #: the Run it is about (no foreign key: the log outlives a deleted Job)
    run_id: Mapped[int] = mapped_column(Integer)
    event: Mapped[WebhookEvent] = mapped_column(enum_type(WebhookEvent, "ck_deliveries_event", 32))
    #: what happened, as the payload builders take it (:func:`event_facts`)
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[DeliveryState] = mapped_column(
        enum_type(DeliveryState, "ck_deliveries_state"), default=DeliveryState.pending, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: a sender holds the delivery until then (another sender leaves it alone)
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="")
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


def event_facts(run: RunRow, project: str, phase: Phase, previous: Phase | None,
                reason: Reason | None, message: str, at: datetime) -> dict[str, Any]:
    """What a delivery says about ``run``: ``{"project", "job", "run", "runUid", "phase",
    "previousPhase", "reason", "message", "at"}`` (``at``: ISO 8601 UTC). The message is kept
    as the transition wrote it; the sender masks and shortens it."""
    return {"project": project, "job": run.job.name, "run": run.number, "runUid": run.uid,
            "phase": phase.value, "previousPhase": previous.value if previous else None,
            "reason": reason.value if reason else None, "message": message,
            "at": at.isoformat().replace("+00:00", "Z")}


def subscribers(s: Session, project_id: int, event: WebhookEvent) -> list[WebhookRow]:
    """The project's webhooks that want ``event``."""
    rows = s.scalars(select(WebhookRow).where(WebhookRow.project_id == project_id))
    return [w for w in rows if event.value in (w.events or [])]


def add_deliveries(s: Session, run: RunRow, event: WebhookEvent, facts: dict[str, Any],
                   webhooks: list[WebhookRow]) -> int:
    """Add a pending delivery of ``event`` about ``run`` for each of ``webhooks`` that has none
    yet (to ``s``; committed with the caller's transaction). The count added."""
    if not webhooks:
        return 0
    have = set(s.scalars(select(DeliveryRow.webhook_id).where(
        DeliveryRow.run_id == run.id, DeliveryRow.event == event,
        DeliveryRow.webhook_id.in_([w.id for w in webhooks]))))
    added = 0
    for w in webhooks:
        if w.id not in have:
            s.add(DeliveryRow(webhook_id=w.id, run_id=run.id, event=event, facts=facts))
            added += 1
    return added


#: ``Session.info`` key of the transitions whose deliveries wait for their session's commit
_PENDING = "rlark.webhooks.pending"


def enqueue_transition(s: Session, run: RunRow, previous: Phase | None, phase: Phase,
                       reason: Reason | None, message: str, at: datetime) -> None:
    """Note that ``run``'s transition to ``phase`` may cause deliveries; they are added to ``s``
    when it commits (:func:`_add_pending_deliveries`), in the same transaction as the transition.

    Not now: the controller calls its runtime (processes, the Kubernetes API) between the
    transitions of a pass, and a query here would open the pass's transaction before those calls
    (ARCHITECTURE.md: no transaction held across a call to a process or an API;
    tests/test_controller_lanes.py). A phase no webhook event names (:data:`PHASE_EVENTS`) notes
    nothing."""
    event = PHASE_EVENTS.get(phase)
    if event is not None:
        s.info.setdefault(_PENDING, []).append((run, event, previous, phase, reason, message, at))


@listens_for(Session, "before_commit")
def _add_pending_deliveries(s: Session) -> None:
    """At commit, the deliveries of the transitions :func:`enqueue_transition` noted: for each,
    the project's webhooks that want its event (one query when nobody listens)."""
    pending = s.info.pop(_PENDING, None)
    if not pending:
        return
    s.flush()  # a Run made in this transaction gets its id
    for run, event, previous, phase, reason, message, at in pending:
        job = run.job
        webhooks = subscribers(s, job.project_id, event)
        if webhooks:
            facts = event_facts(run, job.project.name, phase, previous, reason, message, at)
            add_deliveries(s, run, event, facts, webhooks)


@listens_for(Session, "after_rollback")
def _drop_pending_deliveries(s: Session) -> None:
    """A transaction rolled back takes its noted transitions with it."""
    s.info.pop(_PENDING, None)
