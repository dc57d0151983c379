"""End to end: restart, delete, automatic retry, and what happens to Workers when the server
stops or dies. Real server, real Ray nodes (two per Job), real SQLite."""

from __future__ import annotations


import pytest

from tests.server import assert_nothing_left, run_processes, serve
from tests.test_local_runtime import job_yaml

pytestmark = pytest.mark.ray


@pytest.fixture
def server(tmp_path):
    (tmp_path / "home").mkdir()
    yield from serve(tmp_path / "home")


def test_restart_while_running_replaces_the_run_then_delete_cleans_up(server):
    server.submit(job_yaml("again", run="sleep 600"))
    first = server.wait_phase("again", {"Running"}, timeout=120)
    assert server.cli("restart", "again").returncode == 0
    job = server.wait_phase("again", {"Running"}, timeout=120)
    assert job["currentRun"]["number"] == 2
    runs = server.http.get("/api/v1/jobs/again/runs").json()
    assert [(r["number"], r["phase"], r["cause"]) for r in runs] == [
        (1, "Stopped", "Submitted"), (2, "Running", "Restarted")]
    assert not run_processes(first["currentRun"]["uid"])
    assert [w["nodeRank"] for w in job["currentRun"]["workers"]] == [0, 1]

    res = server.cli("delete", "again", "--yes")
    assert res.returncode == 0, res.stderr
    for _ in range(300):
        if server.http.get("/api/v1/jobs/again").status_code == 404:
            break
        import time
        time.sleep(0.2)
    assert server.http.get("/api/v1/jobs/again").status_code == 404
    assert_nothing_left(job)
    assert not (server.home / "logs" / "again").exists()
    # each Run's Worker directories (homes, what they wrote into their working directory) too
    assert [r["uid"] for r in runs] and not any(
        (server.home / "workers" / r["uid"]).exists() for r in runs)


def test_failed_run_is_retried_up_to_max_restarts(server):
    server.submit(job_yaml("retry", run="exit 7").replace(
        "prepareTimeoutSeconds: 120}", "prepareTimeoutSeconds: 120, maxRestarts: 1}"))
    import time
    deadline = time.monotonic() + 240
    while True:
        runs = server.http.get("/api/v1/jobs/retry/runs").json()
        if len(runs) == 2 and runs[1]["phase"] == "Failed":
            break
        assert time.monotonic() < deadline, runs
        time.sleep(0.3)
    assert [(r["cause"], r["phase"], r["reason"], r["exitCode"]) for r in runs] == [
        ("Submitted", "Failed", "RunFailed", 7), ("Retry", "Failed", "RunFailed", 7)]
    # A retry is decided in the same transaction as the failure it follows (no wait can show
    # more): once run 2 is Failed, and still once its Workers are gone, it is the current Run
    # and nothing was queued after it.
    job = server.wait_released("retry")
    assert (job["phase"], job["currentRun"]["number"]) == ("Failed", 2)
    assert len(server.http.get("/api/v1/jobs/retry/runs").json()) == 2  # no third attempt
    events = server.http.get("/api/v1/jobs/retry/events").json()
    assert [e["run"] for e in events if e["reason"] == "Retry"] == [2]
    assert_nothing_left(job)


def test_submit_wait_exits_non_zero_with_the_reason(server, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(job_yaml("waitfail", run="sleep 2; exit 5"))  # Running long enough to be seen
    res = server.cli("submit", str(f), "--wait", timeout=240)
    assert res.returncode == 1
    assert "RunFailed" in res.stdout and "code 5" in res.stdout
    # not a terminal: one progress line per change, phase and "Workers joined k/N" in each
    progress = [line for line in res.stderr.splitlines() if line.startswith("waitfail: ")]
    assert progress and all("Workers joined " in line for line in progress), res.stderr
    assert any("Workers joined 2/2" in line and "Running" in line for line in progress), progress
    assert "Failed" in progress[-1] and "(RunFailed)" in progress[-1]
    assert len(progress) == len(set(line.rsplit("  ", 1)[0] for line in progress))  # no repeats
    assert_nothing_left(server.wait_released("waitfail"))


def test_server_shutdown_stops_every_worker(server):
    """With --stop-runs-on-exit (RLARK_STOP_RUNS_ON_EXIT=1, as tests/server.py sets it), a
    shutdown stops every Run; without it Runs carry on (tests/test_adopt_local.py)."""
    server.submit(job_yaml("bye", run="sleep 600"))
    job = server.wait_phase("bye", {"Running"}, timeout=120)
    server.stop()  # SIGTERM: graceful shutdown
    assert_nothing_left(job, timeout=5)
    server.start()
    job = server.job("bye")
    assert (job["phase"], job["reason"]) == ("Stopped", "ServerShutdown")
    assert all(w["finishedAt"] for w in job["currentRun"]["workers"]), job["currentRun"]["workers"]
    # a stopped Run has no ready Workers, and each says RLark stopped it
    assert job["workersReady"] == job["currentRun"]["workersReady"] == 0
    assert [t["ready"] for t in job["currentRun"]["tasks"]] == [0, 0]
    assert [(w["phase"], w["reason"], w["exitCode"]) for w in job["currentRun"]["workers"]] == [
        ("Stopped", "StoppedByRLark", None)] * 2
