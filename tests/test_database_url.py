"""The database URL's password is never printed (issue 13 item 1): not when PostgreSQL refuses
the connection (a closed port, a wrong password), not when a second server finds the store busy,
not in ``/healthz`` or the server's log.

A real PostgreSQL cluster with password authentication (tests/pg.py), real ``rlark server``s.
"""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url

from tests.pg import PostgresServer
from tests.server import RlarkServer, free_port

pytestmark = pytest.mark.postgres

PASSWORD = "pg-" + secrets.token_hex(10)


@pytest.fixture(scope="module")
def pg():
    server = PostgresServer.start_with_password_or_skip(PASSWORD)
    yield server
    server.stop()


def rlark_server(home, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlark.cli", "server", "--port", str(free_port()),
                           "--database-url", url],
                          env={**RlarkServer(home).env}, capture_output=True, text=True, timeout=120)


def test_a_closed_port_is_named_without_the_password(tmp_path):
    url = f"postgresql://rlark:{PASSWORD}@127.0.0.1:{free_port()}/rlark"
    proc = rlark_server(tmp_path, url)
    assert proc.returncode == 1
    assert "cannot open the database 'postgresql://rlark:***@127.0.0.1" in proc.stderr, proc.stderr
    assert "Connection refused" in proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr


def test_a_wrong_password_is_named_without_either_password(pg, tmp_path):
    wrong = "wrong-" + secrets.token_hex(8)
    url = make_url(pg.create_database()).set(password=wrong).render_as_string(hide_password=False)
    proc = rlark_server(tmp_path, url)
    assert proc.returncode == 1
    assert "password authentication failed" in proc.stderr, proc.stderr
    assert "postgres:***@" in proc.stderr
    assert wrong not in proc.stdout + proc.stderr and PASSWORD not in proc.stdout + proc.stderr


def test_a_busy_store_and_a_running_server_never_show_the_password(pg, tmp_path):
    url = pg.create_database()
    assert PASSWORD in url
    (tmp_path / "a").mkdir()
    first = RlarkServer(tmp_path / "a", {"RLARK_DATABASE_URL": url}).start()
    try:
        health = first.http.get("/healthz")
        assert health.status_code == 200 and PASSWORD not in health.text
        second = rlark_server(tmp_path, url)  # the same store: refused
        assert second.returncode == 1
        assert "another RLark server already uses the database" in second.stderr, second.stderr
        assert PASSWORD not in second.stdout + second.stderr
    finally:
        first.stop()
    assert PASSWORD not in (tmp_path / "a" / "server.log").read_text()
