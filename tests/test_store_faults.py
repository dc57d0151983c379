"""The store under faults (issue 19 item 12).

* While PostgreSQL is down, ``/healthz`` says so (503), every API call answers 503 with
  ``Retry-After`` and a JSON body naming the fault (the console: a page), the CLI says "the
  server's database is unreachable; retry", and the controller carries on when it is back: a Run
  started before, whose run script ends during the outage, ends Succeeded, and the server holds
  the store's lock again (a second server is still refused).
* The health check is one bounded probe shared by every caller.
* A second ``rlark server`` of a newer release (one more migration) on a store in use is refused
  before it migrates anything: the schema and ``alembic_version`` stay as they were.

Real PostgreSQL clusters (tests/pg.py), stopped and started again; real ``rlark server``
processes; a real Ray node.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from rlark.store.health import StoreHealth
from tests.k8s_testbed import wait_for
from tests.pg import PostgresServer
from tests.server import RlarkServer, free_port, ray_tmp_dir
from tests.test_local_runtime import exchange_dir, job_yaml

UNREACHABLE = "the server's database is unreachable; retry"
#: seconds the database stays away (the reported outage's length)
OUTAGE_SECONDS = 20


@pytest.fixture
def own_pg():
    """A PostgreSQL cluster of this test's own: the test stops and starts it."""
    server = PostgresServer.start_local_or_skip()
    yield server
    server.stop()


# --- the probe ----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_one_probe_answers_a_storm_of_checks_and_sees_an_outage(own_pg):
    health = StoreHealth(make_url(own_pg.create_database()), ttl=600)

    def storm() -> list[bool]:
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda _: health.check().reachable, range(400)))

    assert storm() == [True] * 400
    assert health.probes == 1  # 400 callers, one connection to the database
    own_pg.pause()
    try:
        down = health.check(max_age=0)  # a caller that needs a fresh answer probes again
        assert not down.reachable and health.probes == 2
        assert "Connection refused" in (down.error or "") or "connection failed" in (down.error or "")
        assert storm() == [False] * 400
        assert health.probes == 2
    finally:
        own_pg.resume()
    assert health.check(max_age=0).reachable and health.probes == 3
    health.dispose()


def test_a_database_that_accepts_connections_and_never_answers_is_unreachable_not_a_hang():
    """A frozen PostgreSQL (its kernel still accepts TCP connections): the probe gives up after
    libpq's connect_timeout, which RLark sets when the URL does not."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        health = StoreHealth(make_url(f"postgresql+psycopg://rlark@127.0.0.1:{port}/rlark"))
        answer = health.check()
    assert not answer.reachable
    assert "timeout" in (answer.error or "").lower(), answer.error
    health.dispose()


# --- a second server of a newer release ---------------------------------------------------------


NEWER_SERVER = textwrap.dedent("""\
    import sys
    from pathlib import Path

    import rlark.store.db as db

    db.MIGRATIONS = Path(sys.argv.pop(1))  # this release's migrations and one more
    from rlark.cli import main

    sys.argv[0] = "rlark"
    main()
    """)


def newer_release(where: Path) -> Path:
    """This release's migrations plus one of a newer release that changes the schema (a new
    table, a new column of ``runs``)."""
    from alembic.script import ScriptDirectory

    from rlark.store.db import MIGRATIONS

    target = where / "migrations"
    shutil.copytree(MIGRATIONS, target, ignore=shutil.ignore_patterns("__pycache__"))
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    (target / "versions" / "9999_newer_release.py").write_text(textwrap.dedent(f"""\
        from alembic import op
        import sqlalchemy as sa

        revision = "9999"
        down_revision = {head!r}
        branch_labels = None
        depends_on = None


        def upgrade() -> None:
            op.create_table("newer_release", sa.Column("id", sa.Integer, primary_key=True))
            with op.batch_alter_table("runs") as batch:
                batch.add_column(sa.Column("newer_release_note", sa.Text(), nullable=True))


        def downgrade() -> None:
            pass
        """))
    return target


def schema_of(url: str) -> tuple[list[str], dict[str, list[str]]]:
    """``(alembic versions, {table: columns})`` of the database at ``url``."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            versions = sorted(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
        tables = inspect(engine)
        return versions, {t: sorted(c["name"] for c in tables.get_columns(t))
                          for t in sorted(tables.get_table_names())}
    finally:
        engine.dispose()


def test_a_second_server_of_a_newer_release_changes_nothing_on_a_store_in_use(db_url, rlark_home,
                                                                              tmp_path):
    migrations = newer_release(tmp_path)
    first = RlarkServer(rlark_home, {"RLARK_DATABASE_URL": db_url}).start()
    try:
        before = schema_of(db_url)
        assert "newer_release" not in before[1]
        second = subprocess.run(
            [sys.executable, "-c", NEWER_SERVER, str(migrations), "server", "--port", str(free_port())],
            env=first.env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr
        assert "another RLark server already uses" in second.stderr, second.stderr
        assert schema_of(db_url) == before  # no migration ran: not one table, column or version
        assert first.http.get("/api/v1/jobs").status_code == 200
    finally:
        first.stop()
    # the newer release's migration is a real one: on the store nobody uses, it runs
    port = free_port()
    newer = subprocess.Popen(
        [sys.executable, "-c", NEWER_SERVER, str(migrations), "server", "--port", str(port)],
        env=first.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the newer server to start", lambda: _answers(f"http://127.0.0.1:{port}/healthz"),
                 timeout=60)
        versions, tables = schema_of(db_url)
        assert versions == ["9999"] and "newer_release" in tables
        assert "newer_release_note" in tables["runs"]
    finally:
        newer.send_signal(signal.SIGTERM)
        newer.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False


# --- an outage under a running server -----------------------------------------------------------


@pytest.mark.ray
@pytest.mark.postgres
def test_the_server_says_its_database_is_unreachable_and_carries_on_when_it_is_back(own_pg, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    url = own_pg.create_database()
    server = RlarkServer(home, {"RLARK_DATABASE_URL": url, "RLARK_RAY_TMP": ray_tmp_dir()}).start()
    try:
        gates = exchange_dir(tmp_path / "gates")
        gate = gates / "finish"
        server.submit(job_yaml(
            "steady", pool_workers=0, head_env={"GATE": str(gate)}, shared=gates,
            run='echo started; while [ ! -e "$GATE" ]; do sleep 0.1; done; echo finished'))
        job = server.wait_phase("steady", {"Running"}, timeout=180)
        log = Path(job["currentRun"]["workers"][0]["log"])

        own_pg.pause()
        down_since = time.monotonic()
        try:
            health = server.http.get("/healthz")
            assert health.status_code == 503, health.text
            assert health.headers["retry-after"] == "5"
            assert health.json() == {"ok": False, "detail": {
                "code": "StoreUnreachable",
                "message": "the server's database is unreachable; retry in 5 s (the server's log "
                           "says why)"}}
            assert str(own_pg.port) not in health.text  # nothing about where the database is
            assert server.http.get("/livez").status_code == 200

            for answer in (server.http.get("/api/v1/jobs/steady"),
                           server.http.get("/api/v1/jobs"),
                           server.http.post("/api/v1/jobs", content=job_yaml("other").encode(),
                                            headers={"Content-Type": "application/yaml"})):
                assert answer.status_code == 503, answer.text
                assert answer.headers["retry-after"] == "5"
                assert answer.json()["detail"]["code"] == "StoreUnreachable"
            # no credentials at all: nothing to check in the database, the usual 401
            assert httpx.get(f"{server.url}/api/v1/jobs").status_code == 401

            page = server.http.get("/jobs", headers={"Accept": "text/html"})
            assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
            assert "Database unreachable" in page.text and page.headers["retry-after"] == "5"

            cli = server.cli("get", "jobs")
            assert cli.returncode == 1
            assert UNREACHABLE in cli.stderr, cli.stderr
            assert "damaged database" not in cli.stderr and "Traceback" not in cli.stderr

            gate.touch()  # the run script ends while the database is away
            wait_for("the run script to finish during the outage",
                     lambda: "finished" in log.read_text(errors="replace"), timeout=60)
            # an outage as long as the one reported (20 s), the API asked all along
            while time.monotonic() < down_since + OUTAGE_SECONDS:
                assert server.http.get("/api/v1/jobs/steady").status_code == 503
                time.sleep(0.5)
        finally:
            own_pg.resume()

        wait_for("/healthz to say ok again", lambda: server.http.get("/healthz").status_code == 200,
                 timeout=30)
        job = server.wait_phase("steady", {"Succeeded"}, timeout=60)
        assert job["currentRun"]["exitCode"] == 0, job
        out = server.cli("logs", "steady")
        said_by_script = [ln for ln in out.stdout.splitlines() if ln in ("started", "finished")]
        assert out.returncode == 0 and said_by_script == ["started", "finished"], out.stdout

        # the PostgreSQL restart took the store's lock away; the server took it again
        second = subprocess.run([sys.executable, "-m", "rlark.cli", "server", "--port",
                                 str(free_port())], env=server.env, capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 1 and "another RLark server already uses" in second.stderr, \
            second.stderr
    finally:
        server.stop()
    said = (home / "server.log").read_text()
    assert said.count("the database is unreachable") == 1, said[-3000:]
    assert "the database answers again" in said
    assert "holds the store's lock again" in said
