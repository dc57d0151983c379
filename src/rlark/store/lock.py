"""One controller per store: a second ``rlark server`` on the same database must not start.

Two controllers on one store would each take the other's Workers for orphans and kill them. The
lock is held for the server's lifetime and released by the operating system if it dies: an
``flock`` on a file next to a SQLite database, a session-level advisory lock on PostgreSQL.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine

#: advisory lock key on PostgreSQL (any constant 64-bit number works; this one spells "RLARK")
ADVISORY_KEY = 0x524C41524B


class StoreBusy(RuntimeError):
    """Another RLark server holds the controller lock of this store."""


class ControllerLock:
    """Acquire with :meth:`acquire` (raises :class:`StoreBusy`), release with :meth:`release`."""

    def __init__(self, engine: Engine, owner: dict):
        self.engine = engine
        self.owner = owner
        self._file = None
        self._conn = None

    def acquire(self) -> "ControllerLock":
        if self.engine.dialect.name == "sqlite":
            db = self.engine.url.database or ""
            path = Path(f"{db}.lock") if db and db != ":memory:" else None
            if path is None:
                return self
            f = open(path, "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "unknown"
                f.close()
                raise StoreBusy(
                    f"another RLark server already uses {db} ({holder}); stop it first, or give "
                    "this one its own RLARK_HOME / RLARK_DATABASE_URL"
                ) from None
            f.seek(0)
            f.truncate()
            f.write(json.dumps(self.owner))
            f.flush()
            self._file = f
        elif self.engine.dialect.name == "postgresql":
            conn = self.engine.connect()
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY}).scalar()
            conn.commit()
            if not got:
                conn.close()
                raise StoreBusy(
                    f"another RLark server already uses the database {self.engine.url.render_as_string()}"
                    "; stop it first, or point this one at another database"
                )
            self._conn = conn
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        if self._conn is not None:
            # the pooled connection outlives close(), so unlock explicitly (a dying server's
            # session ends with it, which releases the lock too)
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_KEY})
            self._conn.commit()
            self._conn.close()
            self._conn = None


def owner_info(url: str | None = None) -> dict:
    """Who holds the lock: pid, host, and the server URL when known."""
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(), "server": url}
