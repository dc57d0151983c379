"""An upgrade never ends a training Run (issue 12, item 5), on the local runtime.

The last release, ``v0.1.0``, is taken from this repository's own history (``git archive`` of
its commit into a temporary directory) and run as a real ``rlark server`` (``PYTHONPATH`` in
front of this checkout's editable install) on a fresh store. It starts a Run with real Ray
Workers; the old server is then killed (``kill -9``: v0.1.0 stops its Runs on SIGTERM, this
release does not) and this release's server starts on the same store. It migrates the store in
place while the Run is active, adopts the Workers the old server started (and their bootstrap,
v0.1.0's), reads the lines they wrote meanwhile, and the Run reaches the end it would have
reached under one server.
"""

from __future__ import annotations

import subprocess
import tarfile
import io
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.k8s_testbed import wait_for
from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir
from tests.test_local_runtime import job_yaml

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parent.parent
#: the last release and its commit (the tag may not reach a clone; the commit always does)
RELEASE, RELEASE_COMMIT = "v0.1.0", "041b2d223407409f225aef66d678519479d405f8"


def release_commit() -> str:
    """The full hash of :data:`RELEASE` in this clone: the tag if present, else the commit."""
    for rev in (f"{RELEASE}^{{commit}}", f"{RELEASE_COMMIT}^{{commit}}"):
        got = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "-q", rev],
                             capture_output=True, text=True)
        if got.returncode == 0:
            return got.stdout.strip()
    pytest.fail(f"release {RELEASE} (commit {RELEASE_COMMIT[:7]}) is not in this clone's history; "
                "the upgrade test needs the full history: git fetch --unshallow", pytrace=False)


@pytest.fixture(scope="module")
def old_release(tmp_path_factory) -> Path:
    """``src/`` of the last release, extracted from git."""
    commit = release_commit()
    out = tmp_path_factory.mktemp("release")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out / "src"


def migration_head(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return c.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_run_started_by_the_last_release_carries_on_under_this_one(database, old_release, tmp_path,
                                                                       request):
    """v0.1.0 starts a two-Worker Run; it is killed while the Run is Running; this release
    migrates the store (SQLite, PostgreSQL) and adopts the Run, whose script then finishes:
    Succeeded with exit code 0, every log line once, the record whole, nothing left."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"RLARK_RAY_TMP": ray_tmp_dir(), "PYTHONPATH": str(old_release)}
    if database == "postgresql":
        env["RLARK_DATABASE_URL"] = url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{home / 'rlark.db'}"
    server = RlarkServer(home, env)
    gate = home / "gate"
    n = 30
    run = (f'for i in $(seq 1 {n}); do echo "line-$i"; done; '
           f'while [ ! -e "$GATE" ]; do sleep 0.1; done; echo after-upgrade')
    server.start()
    try:
        health = server.http.get("/healthz")
        assert health.status_code == 200, health.text
        server.submit(job_yaml("carry", run=run, pool_workers=1, head_env={"GATE": str(gate)}))
        job = server.wait_phase("carry", {"Running"}, timeout=180)
        old_head = migration_head(url)
        before = sorted((w["name"], w["pid"]) for w in job["currentRun"]["workers"])
        log = Path(job["currentRun"]["workers"][0]["log"])
        wait_for("the head's first lines", lambda: f"line-{n}" in log.read_text(errors="replace"),
                 timeout=60)
        server.crash()  # v0.1.0 would stop its Runs on SIGTERM

        server.env.pop("PYTHONPATH")  # this release, on the same store and port
        server.start()
        assert migration_head(url) != old_head
        wait_for("the Adopted event", lambda: any(
            e["reason"] == "Adopted" for e in server.http.get("/api/v1/jobs/carry/events").json()),
            timeout=120)
        job = server.job("carry")
        assert job["phase"] == "Running", job
        assert sorted((w["name"], w["pid"]) for w in job["currentRun"]["workers"]) == before
        gate.touch()
        job = server.wait_phase("carry", {"Succeeded"}, timeout=120)
        assert job["currentRun"]["exitCode"] == 0, job
        reasons = [e["reason"] for e in server.http.get("/api/v1/jobs/carry/events").json()]
        assert "ControllerRestarted" not in reasons and reasons.count("Adopted") == 1, reasons
        out = server.cli("logs", "carry", "--role", "head")
        assert out.returncode == 0, out.stderr
        words = [ln.split()[-1] for ln in out.stdout.splitlines() if ln.split()]
        assert [w for w in words if w.startswith("line-")] == [f"line-{i}" for i in range(1, n + 1)]
        assert words.count("after-upgrade") == 1, words[-5:]
        record = server.http.get("/api/v1/jobs/carry/record")
        assert record.status_code == 200, record.text
        rec = record.json()
        assert (rec["result"]["phase"], rec["result"]["exitCode"]) == ("Succeeded", 0), rec["result"]
        assert sorted((w["nodeRank"], w["joined"]) for w in rec["workers"]["items"]) == [(0, True), (1, True)]
        assert_nothing_left(server.wait_released("carry"))
    finally:
        server.env.pop("PYTHONPATH", None)
        server.env["RLARK_STOP_RUNS_ON_EXIT"] = "1"
        if server.proc is None or server.proc.poll() is not None:
            server.start()
        server.stop()
