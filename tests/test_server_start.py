"""``rlark server`` on a port that is taken, and ``rlark --version``: what a newcomer hits first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from rlark import __version__

RLARK = [sys.executable, "-m", "rlark.cli"]


def test_a_taken_port_is_refused_before_anything_is_written(tmp_path):
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([*RLARK, "server", "--port", str(port)], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "RLARK_HOME": str(home)})
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr
    assert f"rlark server --port {port + 1}" in r.stderr and "Traceback" not in r.stderr
    assert not home.exists()  # no store, no admin, no credentials for a server that never ran


def test_version():
    r = subprocess.run([*RLARK, "--version"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"rlark {__version__}\n")


def _server_log(home, extra_env: dict, requests: int = 20) -> str:
    """What ``rlark server`` (with ``extra_env``) writes while serving ``requests`` API calls."""
    from tests.server import RlarkServer

    home.mkdir()
    server = RlarkServer(home, extra_env).start()
    try:
        for _ in range(requests):
            assert server.http.get("/api/v1/jobs").status_code == 200
    finally:
        server.stop()
    return (home / "server.log").read_text()


def test_the_server_is_quiet_by_default_and_logs_requests_when_asked(tmp_path):
    """Issue 19 item 15: `rlark server &` printed one access line per request (602 in a few
    minutes) into the terminal it shares with the user's commands."""
    quiet = _server_log(tmp_path / "quiet", {})
    assert '"GET /api/v1/jobs HTTP/1.1" 200' not in quiet
    assert "HTTP/1.1" not in quiet
    # the server's own lines stay: the first start's (WARNING), the migrations' (INFO)
    assert "first start: created the site administrator 'admin'" in quiet
    assert "INFO alembic.runtime.migration: Running upgrade" in quiet

    loud = _server_log(tmp_path / "loud", {"RLARK_ACCESS_LOG": "1"})
    assert loud.count('"GET /api/v1/jobs HTTP/1.1" 200') == 20

    terse = _server_log(tmp_path / "terse", {"RLARK_LOG_LEVEL": "warning"})
    assert "first start: created the site administrator 'admin'" in terse  # a WARNING
    assert "INFO" not in terse and "HTTP/1.1" not in terse


def test_a_log_level_that_is_none_is_refused():
    r = subprocess.run([*RLARK, "server", "--log-level", "chatty"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert "--log-level 'chatty' is not a level; use debug, info, warning, error, critical" in r.stderr


def test_a_first_start_with_nowhere_to_keep_the_admins_token_stops_and_frees_the_store(rlark_home, monkeypatch):
    """build_app with authentication on, no RLARK_ADMIN_TOKEN and no address to store the new
    administrator's token for: refused before anything is created, and the store's lock and the
    runtime are released (the next start on the same store goes through)."""
    import pytest

    from rlark.server import build_app
    from rlark.store import Store, UserRow

    monkeypatch.delenv("RLARK_ADMIN_TOKEN", raising=False)
    url = f"sqlite:///{rlark_home / 'rlark.db'}"
    with pytest.raises(ValueError, match="RLARK_ADMIN_TOKEN"):
        build_app(database_url=url)
    store = Store(url)
    try:
        with store.session() as s:
            assert s.query(UserRow).count() == 0  # no administrator whose token is lost
    finally:
        store.dispose()
    app = build_app(database_url=url, admin_urls=["http://127.0.0.1:18999"])  # the lock is free
    assert app.state.auth.has_users()
    app.state.controller.shutdown()


def test_a_servers_composer_jail_ends_with_the_server(rlark_home):
    """The local runtime runs the RLinf composer in a jail of the process (set when the server
    starts); the server's shutdown takes it away, so an app built later in the same process (or
    the services without a server) does not compose through a runtime that is gone."""
    from rlark.rlinf_config import isolated
    from rlark.server import build_app

    app = build_app(database_url=f"sqlite:///{rlark_home / 'rlark.db'}",
                    admin_urls=["http://127.0.0.1:18998"])
    assert isolated._jail is not None
    app.state.controller.shutdown()
    assert isolated._jail is None
