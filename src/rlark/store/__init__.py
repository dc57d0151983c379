"""Persistent state: Jobs, Runs, Tasks, Workers, Events; users, projects, tokens, sessions and the
audit log (SQLAlchemy 2, Alembic migrations).

SQLite (WAL) under ``$RLARK_HOME`` by default; PostgreSQL through ``RLARK_DATABASE_URL``.
"""

from rlark.store.accounts import (
    AuditRow,
    MembershipRow,
    ProjectRole,
    ProjectRow,
    SessionRow,
    TokenRow,
    UserRow,
)
from rlark.store.db import Store
from rlark.store.secrets import SecretRow
from rlark.store.webhooks import DeliveryRow, WebhookRow
from rlark.store.models import (Base, ControllerStateRow, EventRow, JobRow, RunRow, TaskRow,
                                WorkerRow)

__all__ = ["Store", "Base", "ControllerStateRow", "JobRow", "RunRow", "TaskRow", "WorkerRow", "EventRow", "UserRow",
           "ProjectRow", "MembershipRow", "ProjectRole", "TokenRow", "SessionRow", "AuditRow", "SecretRow",
           "WebhookRow", "DeliveryRow"]
