"""A server crash, restart or upgrade never ends a training Run (issue 12), on the local runtime.

Real ``rlark server`` processes on one store, real Ray nodes: the server is killed (``kill -9``)
or shut down while a Run is Starting, Running or Stopping; the next server adopts the Run, which
reaches the end it would have reached, with its log whole, its record written and nothing left.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
import subprocess
from pathlib import Path

import psutil
import pytest

from rlark.runtimes.local.runtime import LocalRuntime
from rlark.runtimes.local.reservations import Reservations
from tests.k8s_testbed import wait_for
from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir
from tests.test_local_runtime import exchange_dir, job_yaml

pytestmark = pytest.mark.ray


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(), "RLARK_STOP_RUNS_ON_EXIT": "0"})
    srv.start()
    try:
        yield srv
    finally:
        # this test's own Runs end with it (the server under test leaves them running)
        srv.env["RLARK_STOP_RUNS_ON_EXIT"] = "1"
        if srv.proc is not None and srv.proc.poll() is None:
            srv.stop()
        srv.start()
        srv.stop()


def events(server: RlarkServer, name: str) -> list[dict]:
    r = server.http.get(f"/api/v1/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return r.json()


def pids(job: dict) -> list[tuple[int, float]]:
    return [w["pid"] for w in job["currentRun"]["workers"]]


def test_a_run_that_finishes_while_the_server_is_down_gets_its_true_result(server):
    """kill -9 while Running; the run script ends meanwhile, and the pool Worker, left without
    its head, ends too: Succeeded with exit code 0 at the time the run script really ended (not
    when the next server read it), the pool Worker Completed (it went with its Run: issue 19
    item 4), every line of the log once, lifecycle events once, the record written (every
    Worker ready), nothing left."""
    n = 40
    run = f'for i in $(seq 1 {n}); do echo "line-$i"; sleep 0.05; done; while [ ! -e "$GATE" ]; do sleep 0.1; done; echo done-all'
    gates = exchange_dir(server.home.parent / "gates")  # never under $RLARK_HOME: Workers see none of it
    gate = gates / "gate-finish"
    # The pool Worker ends when its Ray node gives up on the head's GCS, gone with the head: Ray's
    # raylet tries to reconnect for gcs_rpc_server_reconnect_timeout_s (60 s by default; Ray's
    # fault-tolerance docs name RAY_gcs_rpc_server_reconnect_timeout_s), which a user may set in a
    # role's env as here. What is checked is that it ends by itself and is reported as going with
    # its Run, not how long Ray waits first.
    server.submit(job_yaml("finish", run=run, pool_workers=1, head_env={"GATE": str(gate)},
                           pool_env={"RAY_gcs_rpc_server_reconnect_timeout_s": "5"}, shared=gates))
    job = server.wait_phase("finish", {"Running"}, timeout=120)
    server.crash()
    log = Path(job["currentRun"]["workers"][0]["log"])
    gate.touch()
    wait_for("the run script to finish while no server runs",
             lambda: "done-all" in log.read_text(errors="replace"), timeout=120)
    wait_for("every Worker to end while no server runs",
             lambda: not any(alive(w["pid"]) for w in job["currentRun"]["workers"]), timeout=120)
    ended = max(json.loads(line.split(" ", 1)[1])["ts"] for line in log.read_text().splitlines()
                if line.startswith("RLARK_EVENT ") and '"run_finished"' in line)
    server.start()
    job = server.wait_phase("finish", {"Succeeded"}, timeout=60)
    assert job["currentRun"]["exitCode"] == 0, job
    finished = datetime.fromisoformat(job["currentRun"]["finishedAt"]).timestamp()
    assert abs(finished - ended) < 1.0, (job["currentRun"]["finishedAt"], ended)
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    assert (pool["phase"], pool["reason"], pool["exitCode"]) == ("Completed", "RunEnded", None), pool
    reasons = [e["reason"] for e in events(server, "finish")]
    assert reasons.count("Adopted") == 1 and reasons.count("NodeJoined") == 2, reasons
    assert "ControllerRestarted" not in reasons and "ServerShutdown" not in reasons
    out = server.cli("logs", "finish")
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.split()[-1:] and ln.split()[-1].startswith("line-")]
    assert [ln.split()[-1] for ln in lines] == [f"line-{i}" for i in range(1, n + 1)]
    record = server.http.get("/api/v1/jobs/finish/record")
    assert record.status_code == 200, record.text
    rec = record.json()
    assert (rec["result"]["phase"], rec["result"]["exitCode"]) == ("Succeeded", 0), rec["result"]
    assert [(w["nodeRank"], w["joined"]) for w in rec["workers"]["items"]] == [(0, True), (1, True)]
    assert rec["workers"]["items"][0]["exitCode"] == 0
    assert server.job("finish")["currentRun"]["workersReady"] == 2
    assert_nothing_left(server.wait_released("finish"))


def test_a_running_run_survives_a_shutdown_and_a_crash_then_stops_cleanly(server):
    """SIGTERM (an upgrade) and then kill -9 (a crash) of the server while Running: the same
    Worker processes carry on, the Run stays Running under each new server, and a stop still
    ends it with nothing left."""
    server.submit(job_yaml("carry", run="echo started; sleep 600", pool_workers=1))
    job = server.wait_phase("carry", {"Running"}, timeout=120)
    before = pids(job)
    server.stop()  # graceful: the Runs carry on
    assert all(psutil.pid_exists(pid) for pid in before)
    server.start()
    wait_for("the Adopted event", lambda: any(e["reason"] == "Adopted" for e in events(server, "carry")), timeout=120)
    server.crash()
    server.start()
    wait_for("a second Adopted event",
             lambda: [e["reason"] for e in events(server, "carry")].count("Adopted") == 2, timeout=120)
    job = server.job("carry")
    assert job["phase"] == "Running" and pids(job) == before, job
    reasons = [e["reason"] for e in events(server, "carry")]
    assert reasons.count("ServerStopped") == 1 and reasons.count("NodeJoined") == 2, reasons
    assert server.cli("stop", "carry").returncode == 0
    job = server.wait_phase("carry", {"Stopped"}, timeout=60)
    assert_nothing_left(server.wait_released("carry"))


def test_a_worker_that_dies_while_the_server_is_down_is_reported_lost(server):
    """The non-head Worker is killed while no server runs: the next server fails the Run with
    WorkerLost naming its rank and the window in which it died."""
    server.submit(job_yaml("lose", run="sleep 600", pool_workers=1))
    job = server.wait_phase("lose", {"Running"}, timeout=120)
    server.crash()
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    os.killpg(pool["pid"], signal.SIGKILL)
    wait_for("the pool Worker to be gone", lambda: not alive(pool["pid"]), timeout=120)
    server.start()
    job = server.wait_phase("lose", {"Failed"}, timeout=60)
    assert job["reason"] == "WorkerLost", job
    assert "rank 1" in job["message"] and "while the RLark server was down, between" in job["message"]
    assert_nothing_left(server.wait_released("lose"))


def alive(pid: int) -> bool:
    """The process ``pid`` exists and is not a zombie."""
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_crash_while_starting_and_while_stopping(server):
    """kill -9 while the head is still in its prepare script: the adopted Run goes on to
    Running. kill -9 again while it is Stopping (its run script takes its time on SIGTERM): the
    next server finishes the stop; nothing is left."""
    gates = exchange_dir(server.home.parent / "gates")
    gate, slow = gates / "gate-prepare", gates / "gate-stop"
    prepare = f'while [ ! -e {gate} ]; do sleep 0.1; done'
    run = (f'trap "while [ ! -e {slow} ]; do sleep 0.1; done; exit 0" TERM; '
           'echo running; sleep 600 & wait')
    server.submit(job_yaml("phases", run=run, head_prepare=prepare, pool_workers=0, grace=60,
                           shared=gates))
    wait_for("the head to be preparing", lambda: (server.job("phases")["currentRun"] or {}).get("workers")
             and server.job("phases")["currentRun"]["workers"][0]["phase"] == "Preparing", timeout=120)
    server.crash()
    gate.touch()
    server.start()
    server.wait_phase("phases", {"Running"}, timeout=120)
    assert server.cli("stop", "phases").returncode == 0
    server.wait_phase("phases", {"Stopping"}, timeout=30)
    server.crash()
    slow.touch()
    server.start()
    server.wait_phase("phases", {"Stopped"}, timeout=60)
    reasons = [e["reason"] for e in events(server, "phases")]
    assert reasons.count("Adopted") == 2, reasons
    assert_nothing_left(server.wait_released("phases"))


def test_find_returns_the_outermost_process_of_a_worker_whose_pid_was_never_stored(tmp_path):
    """A Worker launched but not committed (the server died in between) is found by the
    environment RLark gave it: the process RLark started, not one of its children."""
    env = {**os.environ, "RLARK_RUN_ID": "findme123456", "RLARK_WORKER": "w-head-0"}
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"], env=env,
                            start_new_session=True)
    try:
        wait_for("the children", lambda: len(psutil.Process(proc.pid).children()) == 2, 10)
        rt = LocalRuntime(Reservations(str(tmp_path / "locks")))
        found = rt.find("findme123456", "w-head-0")
        assert found is not None and found.pid == proc.pid
        assert found.pid_started == psutil.Process(proc.pid).create_time()
        assert rt.find("findme123456", "w-pool-0") is None
        assert rt.find("other", "w-head-0") is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
