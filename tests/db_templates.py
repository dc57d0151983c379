"""Migrated databases for the ``store`` fixture without migrating each one (tests/conftest.py).

Bringing an empty database to the newest Alembic revision takes about 0.5 s on SQLite (its
batch migrations rebuild tables) and 0.2 s on PostgreSQL, and over 400 tests start from a fresh
store. So each test process migrates one database per kind once, with RLark's own
:class:`rlark.store.Store` (the same code a server runs), and every later store starts as a
copy of it: a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL (its own way
to clone a database, postgresql.org/docs/current/manage-ag-templatedbs.html). The fixture still
opens the copy with ``Store(url)``, whose migration then finds nothing to do: a template left
behind by an older revision would be brought forward, never trusted. Tests of the migrations
themselves take ``db_url`` (an empty database), never ``store``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from sqlalchemy.engine import make_url

_lock = threading.Lock()
_sqlite_template: Path | None = None
_postgres_templates: dict[int, str] = {}


def _migrated(url: str) -> None:
    from rlark.store import Store

    Store(url).dispose()  # no connection stays open: PostgreSQL copies only an idle template


def sqlite_template() -> Path:
    """This process's migrated SQLite database file (made on first use)."""
    global _sqlite_template
    with _lock:
        if _sqlite_template is None:
            path = Path(tempfile.mkdtemp(prefix="rlark-db-template-")) / "template.db"
            _migrated(f"sqlite:///{path}")
            _sqlite_template = path
        return _sqlite_template


def fill(db_url: str, postgres_server=None) -> None:
    """Make the empty database at ``db_url`` a copy of this process's migrated one.

    SQLite: the file must not exist yet (a test that made it keeps what it made: nothing is
    copied). PostgreSQL: the database ``postgres_server`` (a :class:`tests.pg.PostgresServer`)
    created for the test is dropped and created again from the template, under the same name.
    """
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        target = Path(url.database or "")
        if url.database and not target.exists():
            shutil.copyfile(sqlite_template(), target)
        return
    if postgres_server is None:
        raise ValueError(f"a PostgreSQL URL needs its server to be copied into: {url!r}")
    from psycopg import sql

    with _lock:
        template = _postgres_templates.get(id(postgres_server))
        if template is None:
            template_url = postgres_server.create_database()
            _migrated(template_url)
            template = make_url(template_url).database
            _postgres_templates[id(postgres_server)] = template
    with postgres_server._connect() as conn:
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(url.database)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(url.database), sql.Identifier(template)))
