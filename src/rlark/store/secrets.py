"""RLark-managed secrets: per project, a name and one or more keys, like a Kubernetes Secret.

The values are stored sealed (:mod:`rlark.secretbox`), all keys of a secret in one token; the
key names are kept in clear beside them so a list needs no key and opens nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

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
