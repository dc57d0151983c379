"""Tables for who may do what: users, projects, a user's role per project, API tokens, console
sessions, and the audit log.

Secrets are never stored: API tokens and session ids are kept as SHA-256 digests (they are 256-bit
random values, so a fast digest is the right tool and lets the lookup use an index); passwords as
Argon2id hashes (argon2-cffi). See services/auth.py.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rlark.store.models import Base, UTCDateTime, utcnow


class ProjectRole(str, enum.Enum):
    """A user's role in one project, weakest first (their order is their power)."""

    viewer = "viewer"  # read everything in the project
    member = "member"  # + create, stop, start, restart, replace, delete Jobs
    admin = "admin"  # + manage the project's members

    @property
    def rank(self) -> int:
        return list(ProjectRole).index(self)

    def allows(self, needed: "ProjectRole") -> bool:
        return self.rank >= needed.rank


def _enum(cls: type[enum.Enum]) -> Enum:
    # stored as its value in a VARCHAR with a CHECK, the same on SQLite and PostgreSQL
    return Enum(cls, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e],
                validate_strings=True, create_constraint=True, name=f"{cls.__name__.lower()}")


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    #: site administrator: manages users, projects and every token; admin in every project
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Argon2id hash for the console's password login; None: tokens only
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(63), nullable=True)

    memberships: Mapped[list["MembershipRow"]] = relationship(
        back_populates="user", cascade="all, delete-orphan", passive_deletes=True)


class ProjectRow(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    #: Kubernetes namespace of the project's Pods; None: the server's default for this project
    namespace: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: the queue its Runs wait in for admission (Kubernetes: a Kueue LocalQueue in its
    #: namespace); ``none``: no queue; None: the server's (``rlark server --k8s-queue``)
    queue: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: the project's own quotas, ``{"maxJobs": n, "maxActiveWorkers": n}`` (services/quotas.py);
    #: a quota not set here (or None) is the server's default
    quotas: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(63), nullable=True)

    memberships: Mapped[list["MembershipRow"]] = relationship(
        back_populates="project", cascade="all, delete-orphan", passive_deletes=True)


class MembershipRow(Base):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("user_id", "project_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    role: Mapped[ProjectRole] = mapped_column(_enum(ProjectRole))

    user: Mapped[UserRow] = relationship(back_populates="memberships")
    project: Mapped[ProjectRow] = relationship(back_populates="memberships")


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    #: the first characters of the token, enough to recognise it in a list; never enough to use it
    prefix: Mapped[str] = mapped_column(String(16))
    #: SHA-256 of the whole token, hex
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    user: Mapped[UserRow] = relationship()


class SessionRow(Base):
    """A console login: the cookie holds a random id, the table its digest."""

    __tablename__ = "sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    #: the per-session token every state-changing console form carries
    csrf: Mapped[str] = mapped_column(String(64))
    #: the API token this session was opened with (revoking it ends the session); None: password
    token_id: Mapped[int | None] = mapped_column(ForeignKey("tokens.id", ondelete="CASCADE"),
                                                 nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())

    user: Mapped[UserRow] = relationship()


class AuditRow(Base):
    """One state change (or a refused attempt at one, or a failed login), with who and when."""

    __tablename__ = "audit"
    __table_args__ = (Index("ix_audit_project_time", "project", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    #: the acting user's name (for a failed login: the name that was tried); None: RLark itself
    actor: Mapped[str | None] = mapped_column(String(63), nullable=True, index=True)
    #: what was done, ``<kind>.<verb>``: job.create, token.revoke, login.failed ...
    action: Mapped[str] = mapped_column(String(32), index=True)
    project: Mapped[str | None] = mapped_column(String(63), nullable=True)
    #: what it was done to (a Job, user, token or project name)
    target: Mapped[str | None] = mapped_column(String(127), nullable=True)
    #: ok | denied | failed
    outcome: Mapped[str] = mapped_column(String(8), default="ok")
    detail: Mapped[str] = mapped_column(Text, default="")
    #: the client's address as the server saw it
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)
