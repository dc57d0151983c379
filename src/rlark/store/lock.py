"""One controller per store: a second ``rlark server`` on the same database must not start.

Two controllers on one store would each take the other's Workers for orphans and kill them. The
lock is held for the server's lifetime and released by the operating system if it dies: an
``flock`` on a file next to a SQLite database, a session-level advisory lock on PostgreSQL.

On PostgreSQL the lock lives as long as the database session that took it: a database that
restarts (or a connection that drops) takes it away while the server runs on. :meth:`held`, which
the controller asks before it acts, notices that, takes the lock again once the database is back
and says no while it cannot (another server took the store meanwhile, or the database is still
away), so two controllers never act on one store.

Replicas of a server with leader election (``--runtime kubernetes``; the Lease decides which one
reconciles: :mod:`rlark.controller.leader`) take the lock *shared*: any number of them share a
store, and a server without leader election (which takes it exclusively) cannot join them, nor
they it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import IO

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

log = logging.getLogger("rlark.store")

#: advisory lock key on PostgreSQL (any constant 64-bit number works; this one spells "RLARK")
ADVISORY_KEY = 0x524C41524B
#: the transaction-level lock migrations take on PostgreSQL (not ADVISORY_KEY: running replicas
#: hold that one shared, and an upgrade must not wait for them)
MIGRATION_KEY = ADVISORY_KEY + 1
#: seconds between two checks of the lock's database session (:meth:`ControllerLock.held`)
HELD_CHECK_SECONDS = 2.0


class StoreBusy(RuntimeError):
    """Another RLark server holds the controller lock of this store."""


class ControllerLock:
    """Acquire with :meth:`acquire` (raises :class:`StoreBusy`), release with :meth:`release`."""

    def __init__(self, engine: Engine, owner: dict, shared: bool = False,
                 check_seconds: float = HELD_CHECK_SECONDS):
        self.engine = engine
        self.owner = owner
        #: held by replicas that elect a leader (see the module docstring)
        self.shared = shared
        #: how often :meth:`held` asks the database (seconds); in between it answers from memory
        self.check_seconds = check_seconds
        self._file: IO[str] | None = None
        self._conn: Connection | None = None
        self._held = False
        self._checked = 0.0
        self._check_lock = threading.Lock()

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
            if path is None:  # an in-memory database: no other process can open it
                self._held = True
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
        self._held, self._checked = True, time.monotonic()
        return self

    def held(self) -> bool:
        """Whether this server still holds the lock (what the controller asks before it acts).
        A file lock cannot be lost. On PostgreSQL the lock's session is checked at most every
        :attr:`check_seconds`; a session that is gone (the database restarted, the connection
        dropped) is replaced and the lock taken again. False while that fails: the database is
        still away, or another server took the store meanwhile (said in the log), in which case
        this server never acts on the store again until it gets the lock back. Never raises."""
        if self.engine.dialect.name != "postgresql":
            return self._file is not None or self._held
        if time.monotonic() - self._checked < self.check_seconds:
            return self._held
        with self._check_lock:
            if time.monotonic() - self._checked < self.check_seconds:
                return self._held
            was, self._held = self._held, self._check_session()
            self._checked = time.monotonic()
        if was and not self._held:
            log.error("lost the store's lock (its database session ended); this server does not "
                      "reconcile until it holds the lock again")
        elif self._held and not was:
            log.warning("holds the store's lock again; reconciling")
        return self._held

    def _check_session(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
                return True
            except DBAPIError:
                # the session that held the lock is gone, and the lock with it; the connection
                # must not be used again (SQLAlchemy would reconnect it, without the lock)
                self._discard()
        try:
            conn = self.engine.connect()
        except DBAPIError:
            return False  # the database is still away
        try:
            got = conn.execute(text(f"SELECT pg_try_advisory_lock{self._pg_suffix}(:k)"),
                               {"k": ADVISORY_KEY}).scalar()
            conn.commit()
        except DBAPIError:
            conn.close()
            return False
        if not got:
            conn.close()
            log.error("another RLark server uses this store now (it took the lock while this "
                      "server's database session was gone); this server does not reconcile")
            return False
        self._conn = conn
        return True

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except DBAPIError:
                pass

    @property
    def _pg_suffix(self) -> str:
        return "_shared" if self.shared else ""

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        self._held = False
        if self._conn is not None:
            # the pooled connection outlives close(), so unlock explicitly (a dying server's
            # session ends with it, which releases the lock too)
            try:
                self._conn.execute(text(f"SELECT pg_advisory_unlock{self._pg_suffix}(:k)"),
                                   {"k": ADVISORY_KEY})
                self._conn.commit()
                self._conn.close()
            except DBAPIError:  # the session is gone, and the lock went with it
                self._discard()
            self._conn = None


def owner_info(url: str | None = None) -> dict:
    """Who holds the lock: pid, host, and the server URL when known."""
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(), "server": url}
