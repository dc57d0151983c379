"""Engine, sessions and migrations.

:class:`Store` owns one SQLAlchemy engine. SQLite gets WAL journaling, foreign keys and a busy
timeout (the API and the controller write from different threads); PostgreSQL is used as is.
The schema is created and upgraded by Alembic (``store/migrations``) when the Store opens, or,
for a server (which must first know that no other server uses the store), by
:meth:`Store.migrate` once it holds the store's lock.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar, cast

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from rlark import settings
from rlark.store.health import StoreHealth, connect_args

MIGRATIONS = Path(__file__).parent / "migrations"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (SQLite with WAL pragmas; PostgreSQL with pre-ping)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # a bounded connect: while the database is unreachable a request fails (503) in seconds
    # instead of waiting for the operating system's TCP timeout
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20,
                         connect_args=connect_args(make_url(url)))


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


F = TypeVar("F", bound=Callable)

#: times a write that lost a race (:class:`StaleDataError`: the row's version changed since it was
#: read) is run again from the start before the error is raised
CONFLICT_ATTEMPTS = 3


def retry_on_conflict(fn: F) -> F:
    """Decorator for a method that reads rows, changes them and commits in its own session: when
    the commit finds a Job or Run row changed meanwhile (``version_id_col``; another request or
    the controller's pass), the whole method runs again on fresh rows, up to
    :data:`CONFLICT_ATTEMPTS` times.

    Raises:
        StaleDataError: still conflicting after the last attempt.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except StaleDataError:
                if attempt == CONFLICT_ATTEMPTS - 1:
                    raise
    return cast(F, wrapper)  # functools.wraps keeps fn's signature


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (idempotent)."""
    command.upgrade(alembic_config(engine), "head")


class Store:
    """The database: ``with store.session() as s: ...`` commits on success, rolls back on error.

    ``migrate``: bring the schema to the newest revision now. A server opens its store with
    ``migrate=False``, takes the store's lock (:mod:`rlark.store.lock`) and only then calls
    :meth:`migrate`: a second server must find the store in use before it changes the schema
    under the server that uses it."""

    def __init__(self, url: str | None = None, migrate: bool = True):
        self.url = url or settings.database_url()
        self.engine = make_engine(self.url)
        if migrate:
            self.migrate()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: whether the database answers (a bounded, cached probe: rlark.store.health)
        self.health = StoreHealth(self.engine.url)
        #: held around a check-then-insert that must not interleave with another (a quota):
        #: PostgreSQL locks the rows it read (``SELECT ... FOR UPDATE``), SQLite has no row locks
        #: and two transactions both read the old count; one server serves a SQLite store
        #: (store/lock.py), so a lock in this process serialises them all
        self._serial = threading.Lock()

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent; :func:`upgrade`)."""
        upgrade(self.engine)

    @contextmanager
    def serialized(self) -> Iterator[None]:
        """A block that no other ``serialized()`` block of this Store runs beside, on SQLite
        (on PostgreSQL the block's own ``FOR UPDATE`` row locks do it; this is a no-op)."""
        if not self.is_sqlite:
            yield
            return
        with self._serial:
            yield

    @contextmanager
    def session(self, autoflush: bool = True) -> Iterator[Session]:
        """A session committed when the block ends (rolled back on an exception).

        ``autoflush=False`` (the controller): nothing is written before the commit, so no write
        transaction (SQLite's write lock) is open while the block calls a process or an API."""
        s = self._sessions(autoflush=autoflush)
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def dispose(self) -> None:
        self.engine.dispose()
        self.health.dispose()
