"""The audit log: every state change (and every refused attempt at one, and every failed login)
with the acting user, the time and the client's address. Written in the same transaction as the
change it records, so one is never stored without the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlark.record.build import iso
from rlark.store import AuditRow

MAX_DETAIL = 2000


@dataclass(frozen=True)
class Actor:
    """Who asks for a change: a user's name (``None``: RLark itself) and the client's address."""

    name: str | None
    client: str | None = None


#: changes RLark makes on its own (the controller, the first start)
SYSTEM = Actor(None)


def record(s: Session, actor: Actor, action: str, *, project: str | None = None,
           target: str | None = None, outcome: str = "ok", detail: str = "") -> None:
    """Add one audit entry to ``s`` (committed with the caller's transaction).

    ``action``: ``<kind>.<verb>`` (``job.create``, ``token.revoke``, ``login.failed`` ...);
    ``outcome``: ``ok``, ``denied`` (refused for lack of rights) or ``failed``.
    """
    s.add(AuditRow(actor=actor.name, action=action[:32], project=project,
                   target=(target or "")[:127] or None, outcome=outcome,
                   detail=detail[:MAX_DETAIL], client=(actor.client or "")[:64] or None))


def audit_view(a: AuditRow) -> dict[str, Any]:
    return {"id": a.id, "time": iso(a.time), "actor": a.actor, "action": a.action,
            "project": a.project, "target": a.target, "outcome": a.outcome, "detail": a.detail,
            "client": a.client}


def query(s: Session, *, projects: list[str] | None, project: str | None = None,
          actor: str | None = None, action: str | None = None, limit: int = 100,
          offset: int = 0) -> dict[str, Any]:
    """Audit entries, newest first: ``{"items": [...], "limit", "offset"}``.

    ``projects``: the projects whose entries may be shown (``None``: every entry, for site
    administrators); entries without a project (users, tokens, logins) only when ``None``.
    ``action`` matches a prefix (``job.`` or ``job.delete``).
    """
    stmt = select(AuditRow)
    if projects is not None:
        stmt = stmt.where(AuditRow.project.in_(projects))
    if project is not None:
        stmt = stmt.where(AuditRow.project == project)
    if actor is not None:
        stmt = stmt.where(AuditRow.actor == actor)
    if action:
        stmt = stmt.where(AuditRow.action.startswith(action, autoescape=True))
    rows = s.scalars(stmt.order_by(AuditRow.id.desc()).limit(limit).offset(offset)).all()
    return {"items": [audit_view(a) for a in rows], "limit": limit, "offset": offset}
