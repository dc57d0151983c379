"""One controller per store: a second ``rlark server`` on the same database must not start.

Two controllers on one store would each take the other's Workers for orphans and kill them. The
lock is held for the server's lifetime and released by the operating system if it dies: an
``flock`` on a file next to a SQLite database, a session-level advisory lock on PostgreSQL.

Replicas of a server with leader election (``--runtime kubernetes``; the Lease decides which one
reconciles: :mod:`rlark.controller.leader`) take the lock *shared*: any number of them share a
store, and a server without leader election (which takes it exclusively) cannot join them, nor
they it.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

#: advisory lock key on PostgreSQL (any constant 64-bit number works; this one spells "RLARK")
ADVISORY_KEY = 0x524C41524B
#: the transaction-level lock migrations take on PostgreSQL (not ADVISORY_KEY: running replicas
#: hold that one shared, and an upgrade must not wait for them)
MIGRATION_KEY = ADVISORY_KEY + 1


class StoreBusy(RuntimeError):
    """Another RLark server holds the controller lock of this store."""


class ControllerLock:
    """Acquire with :meth:`acquire` (raises :class:`StoreBusy`), release with :meth:`release`."""

    def __init__(self, engine: Engine, owner: dict, shared: bool = False):
        self.engine = engine
        self.owner = owner
        #: held by replicas that elect a leader (see the module docstring)
        self.shared = shared
        self._file: IO[str] | None = None
        self._conn: Connection | None = None

    def _busy(self, where: str, holder: str = "") -> StoreBusy:
        held = f" ({holder})" if holder else ""
        if self.shared:
            return StoreBusy(
                f"an RLark server without leader election already uses {where}{held}: replicas "
                "(--leader-elect) share a store only with each other; stop it first, or give this "
                "one its own store")
        return StoreBusy(
            f"another RLark server already uses {where}{held}; stop it first, or give this one "
            "its own RLARK_HOME / RLARK_DATABASE_URL (replicas on Kubernetes: --leader-elect)")

    def acquire(self) -> "ControllerLock":
        if self.engine.dialect.name == "sqlite":
            db = self.engine.url.database or ""
            path = Path(f"{db}.lock") if db and db != ":memory:" else None
            if path is None:
                return self
            f = open(path, "a+")
            try:
                fcntl.flock(f, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "unknown"
                f.close()
                raise self._busy(db, holder) from None
            if not self.shared:  # replicas leave the exclusive holder's name alone
                f.seek(0)
                f.truncate()
                f.write(json.dumps(self.owner))
                f.flush()
            self._file = f
        elif self.engine.dialect.name == "postgresql":
            conn = self.engine.connect()
            got = conn.execute(text(f"SELECT pg_try_advisory_lock{self._pg_suffix}(:k)"),
                               {"k": ADVISORY_KEY}).scalar()
            conn.commit()
            if not got:
                conn.close()
                raise self._busy(f"the database {self.engine.url.render_as_string(hide_password=True)}")
            self._conn = conn
        return self

    @property
    def _pg_suffix(self) -> str:
        return "_shared" if self.shared else ""

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        if self._conn is not None:
            # the pooled connection outlives close(), so unlock explicitly (a dying server's
            # session ends with it, which releases the lock too)
            self._conn.execute(text(f"SELECT pg_advisory_unlock{self._pg_suffix}(:k)"),
                               {"k": ADVISORY_KEY})
            self._conn.commit()
            self._conn.close()
            self._conn = None


def owner_info(url: str | None = None) -> dict:
    """Who holds the lock: pid, host, and the server URL when known."""
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(), "server": url}
