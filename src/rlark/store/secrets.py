"""RLark-managed secrets: per project, a name and one or more keys, like a Kubernetes Secret.

The values are stored sealed (:mod:`rlark.secretbox`), all keys of a secret in one token; the
key names are kept in clear beside them so a list needs no key and opens nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from rlark.secretbox import SecretBox
from rlark.store.models import Base, UTCDateTime, utcnow


class SecretRow(Base):
    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_secrets_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    #: the key names, sorted (values are only in ``sealed``)
    keys: Mapped[list[Any]] = mapped_column(JSON, default=list)
    #: a Fernet token of ``{key: value}`` (secretbox.SecretBox.seal)
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(63), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(63), nullable=True)


def missing_refs(s: Session, project_id: int,
                 refs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(secret, key)`` references the project has no RLark-managed value for (read from
    the key names: nothing is opened)."""
    refs = list(refs)
    names = {n for n, _ in refs}
    have = {row.name: set(row.keys) for row in s.scalars(
        select(SecretRow).where(SecretRow.project_id == project_id, SecretRow.name.in_(names)))} \
        if names else {}
    return [(n, k) for n, k in refs if k not in have.get(n, ())]


def managed_names(s: Session, project_id: int, names: Iterable[str]) -> set[str]:
    """Which of ``names`` are secrets RLark manages in the project."""
    names = set(names)
    if not names:
        return set()
    return set(s.scalars(select(SecretRow.name).where(SecretRow.project_id == project_id,
                                                      SecretRow.name.in_(names))))


def open_refs(s: Session, project_id: int, refs: Iterable[tuple[str, str]],
              box: SecretBox) -> dict[tuple[str, str], str]:
    """The values of the references the project's RLark-managed secrets have (``(secret, key)``
    -> value); references to secrets RLark does not manage are left out (on Kubernetes they name
    Kubernetes Secrets), as are keys a managed secret lacks.

    Raises:
        SecretKeyError: a secret cannot be opened with the server's key.
    """
    refs = list(refs)
    names = {n for n, _ in refs}
    if not names:
        return {}
    opened: dict[str, dict[str, str]] = {}
    for row in s.scalars(select(SecretRow).where(SecretRow.project_id == project_id,
                                                 SecretRow.name.in_(names))):
        opened[row.name] = box.open(row.sealed, f"secret {row.name!r}")
    return {(n, k): opened[n][k] for n, k in refs if n in opened and k in opened[n]}
