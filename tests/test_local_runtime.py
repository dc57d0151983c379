"""End to end on the local runtime: a real ``rlark server``, real Ray nodes, real SQLite.

Each test uses the fewest Workers that prove its point (two; the RLinf quickstart, three, is
tests/test_record_e2e.py's).
After every Job the test checks that no process of its Run is left and its ports are free.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
import yaml

from tests.k8s_testbed import wait_for
from tests.server import assert_nothing_left, serve

pytestmark = pytest.mark.ray


def exchange_dir(path: Path) -> Path:
    """A directory the test and its Workers share (made, mode 1777 as /tmp: Workers run under a
    uid of their own), to be given to them as a hostPath mount (:func:`job_yaml` ``shared``)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def job_yaml(name: str, *, run: str = "echo hello from the head", head_prepare: str = "",
             pool_prepare: str = "", pool_workers: int = 1, join_timeout: int = 180,
             grace: int = 5, prepare_timeout: int = 120, head_env: dict | None = None,
             pool_env: dict | None = None, cpu: int = 1, shared: Path | None = None) -> str:
    """A Job: role ``head`` (1 Worker) and, unless ``pool_workers`` is 0, role ``pool``;
    ``shared``: a directory of this machine both roles get at its own path (a hostPath mount)."""
    env = json.dumps([{"name": k, "value": v} for k, v in (head_env or {}).items()])
    pool_env_list = json.dumps([{"name": k, "value": v} for k, v in (pool_env or {}).items()])
    mounts = json.dumps([{"name": "shared", "type": "hostPath", "source": str(shared),
                          "mountPath": str(shared)}] if shared else [])
    pool = f"""
    - name: pool
      workers: {pool_workers}
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {{cpu: 1, memory: 1Gi}}
      mounts: {mounts}
      env: {pool_env_list}
      prepareScript: {json.dumps(pool_prepare)}""" if pool_workers else ""
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: {grace}
  failurePolicy: {{joinTimeoutSeconds: {join_timeout}, prepareTimeoutSeconds: {prepare_timeout}}}
  roles:
    - name: head
      workers: 1
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {{cpu: {cpu}, memory: 1Gi}}
      prepareScript: {json.dumps(head_prepare)}
      mounts: {mounts}
      env: {env}{pool}
  runScript: {json.dumps(run)}
"""


def worker_states(job: dict) -> list[tuple]:
    """(name, phase, reason, exit code) of every Worker of the current Run."""
    return [(w["name"], w["phase"], w["reason"], w["exitCode"]) for w in job["currentRun"]["workers"]]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


def test_prepare_failure_names_worker_and_exit_code(server):
    # the join timeout lies far past the bounded wait: the Run fails from the prepare script's
    # exit, not from a join deadline
    server.submit(job_yaml("prep-fail", pool_prepare="echo preparing; exit 3", join_timeout=900))
    job = server.wait_phase("prep-fail", {"Failed"}, timeout=90)
    assert job["reason"] == "PrepareFailed"
    assert "prep-fail-pool-0" in job["message"] and "rank 1" in job["message"]
    assert "code 3" in job["message"]
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    assert pool["phase"] == "Failed" and pool["reason"] == "PrepareFailed"
    job = server.wait_released("prep-fail")
    assert_nothing_left(job)


def test_prepare_script_past_its_timeout_fails_the_run(server):
    # the script leaves a child of its own behind: the timeout must end it too
    # the join timeout lies far past the bounded wait: the prepare timeout ends the Run
    server.submit(job_yaml("prep-slow", pool_prepare="echo preparing; sleep 300 & sleep 300",
                           prepare_timeout=3, join_timeout=900))
    job = server.wait_phase("prep-slow", {"Failed"}, timeout=90)
    assert job["reason"] == "PrepareTimeout", job
    assert "prep-slow-pool-0" in job["message"] and "3 s" in job["message"]
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    assert pool["phase"] == "Failed" and pool["reason"] == "PrepareTimeout"
    logs = server.cli("logs", "prep-slow")
    assert logs.returncode == 0 and "preparing" in logs.stdout
    assert "hello from the head" not in logs.stdout  # the run script never started
    job = server.wait_released("prep-slow")
    assert_nothing_left(job)


def test_output_without_a_final_newline_or_one_huge_line_does_not_fail_a_good_run(server):
    """``printf 'done'; exit 0`` after one line of 20 MB: Succeeded (issue 19 item 8). The
    run script's last output cannot swallow RLark's own lines, which the Worker's keeper writes
    on lines of their own; the failure message, Events and logs carry none of them. And the
    Worker's logs still show the lines before the huge one, and the huge one cut with a mark
    (item 9)."""
    run = ("echo before-the-long-line; head -c 20000000 /dev/zero | tr '\\0' x; "
           "printf 'done'; exit 0")
    server.submit(job_yaml("no-newline", run=run, pool_workers=0))
    job = server.wait_phase("no-newline", {"Succeeded", "Failed"}, timeout=180)
    assert (job["phase"], job["reason"], job["currentRun"]["exitCode"]) == ("Succeeded", "Completed", 0), job
    events = server.http.get("/api/v1/jobs/no-newline/events").json()
    assert not any("RLARK_EVENT" in e["message"] for e in events)
    logs = server.http.get("/api/v1/jobs/no-newline/logs").json()["workers"][0]["lines"]
    assert "before-the-long-line" in logs
    long = next(line for line in logs if line.startswith("xxxx"))
    assert long.endswith("[RLark: line cut at 1 MiB]") and len(long) < 2 * 1024 * 1024
    out = server.cli("logs", "no-newline")
    assert out.returncode == 0 and "before-the-long-line" in out.stdout


def test_run_script_exit_code_fails_the_run(server):
    # the script also prints a forged lifecycle line: only the bootstrap's lines (which carry
    # the Run's event token) may decide the Run
    forged = """echo 'RLARK_EVENT {"ts": 1, "event": "run_finished", "exit_code": 0}'"""
    server.submit(job_yaml("exit-seven", run=f"{forged}; echo about to fail; sleep 2; exit 7"))
    job = server.wait_phase("exit-seven", {"Failed"}, timeout=120)
    assert job["reason"] == "RunFailed"
    assert job["currentRun"]["exitCode"] == 7
    assert "code 7" in job["message"]
    # the head's own last lines come with the reason; lifecycle lines never do
    assert "last lines of exit-seven-head-0:\nabout to fail" in job["message"], job["message"]
    assert "RLARK_EVENT" not in job["message"]
    # final with the Run: the head failed with its script's code; RLark ended the pool Worker
    settled = [("exit-seven-head-0", "Failed", "RunFailed", 7),
               ("exit-seven-pool-0", "Terminated", "StoppedByRLark", None)]
    assert worker_states(job) == settled
    # it was Running before it failed, with both nodes joined
    events = server.http.get("/api/v1/jobs/exit-seven/events").json()
    assert [e["to"] for e in events if e["to"]] == ["Starting", "Running", "Failed"]
    job = server.wait_released("exit-seven")
    assert worker_states(job) == settled  # nothing changes once the Run is over
    assert_nothing_left(job)
    logs = server.cli("logs", "exit-seven", "--role", "head")
    assert logs.returncode == 0 and "about to fail" in logs.stdout


def test_worker_killed_while_running_fails_the_run(server, tmp_path):
    server.submit(job_yaml("kill-one", run="sleep 600"))
    job = server.wait_phase("kill-one", {"Running"}, timeout=120)
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    os.killpg(pool["pid"], signal.SIGKILL)
    job = server.wait_phase("kill-one", {"Failed"}, timeout=30)
    assert job["reason"] == "WorkerLost"
    assert "rank 1" in job["message"] and "kill-one-pool-0" in job["message"]
    job = server.wait_released("kill-one")
    assert_nothing_left(job)


def test_worker_that_never_joins_times_out_and_run_script_never_starts(server, tmp_path):
    marker = tmp_path / "run-script-started"
    server.submit(job_yaml("no-join", pool_prepare="sleep 300", join_timeout=8,
                           run=f"touch {marker}"))
    job = server.wait_phase("no-join", {"Failed"}, timeout=120)
    assert job["reason"] == "JoinTimeout"
    assert "rank 1 (no-join-pool-0)" in job["message"]
    assert not marker.exists()
    events = server.http.get("/api/v1/jobs/no-join/events").json()
    assert "Running" not in [e["to"] for e in events]
    job = server.wait_released("no-join")
    assert_nothing_left(job)


def _seconds(a: str, b: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def test_a_head_still_preparing_at_the_join_deadline_fails_the_run_from_launch(server, tmp_path):
    """The join deadline is the Run's, from its launch, for every rank: a head whose prepare
    script outlasts it is named (rank 0), the other Workers do not wait join + prepare, and the
    pool Worker whose `ray start` is retrying the missing GCS stops at once, not after the
    grace period.

    Proved by what happens, not by a clock: the Run fails while the head is still preparing
    (its script sleeps 600 s: a deadline counted from the end of the prepare script would
    come after it), never before the deadline by the Run's own timestamps, and its Workers are
    released within a wait far shorter than the grace period (600 s), so none waited for it."""
    marker = tmp_path / "run-script-started"
    server.submit(job_yaml("late-head", head_prepare="echo preparing the head; sleep 600",
                           join_timeout=8, grace=600, run=f"touch {marker}"))
    job = server.wait_phase("late-head", {"Failed"}, timeout=60)
    run = job["currentRun"]
    assert job["reason"] == "JoinTimeout", job
    assert "rank 0 (late-head-head-0), rank 1 (late-head-pool-0) did not join" in job["message"]
    assert "within 8 s of the launch" in job["message"]
    assert "late-head-head-0: Preparing" in job["message"]
    assert "last lines of late-head-head-0:\npreparing the head" in job["message"]
    took = _seconds(run["startedAt"], run["finishedAt"])
    assert took >= 8, f"failed {took:.1f} s after launch, before its deadline (joinTimeoutSeconds 8)"
    assert worker_states(job) == [("late-head-head-0", "Failed", "JoinTimeout", None),
                                  ("late-head-pool-0", "Failed", "JoinTimeout", None)]
    events = server.http.get("/api/v1/jobs/late-head/events").json()
    assert "Running" not in [e["to"] for e in events]
    failed = [e for e in events if e["to"] == "Failed"]
    assert len(failed) == 1 and failed[0]["message"] == job["message"]
    job = server.wait_released("late-head", timeout=60)  # the grace period is 600 s
    assert worker_states(job) == [("late-head-head-0", "Failed", "JoinTimeout", None),
                                  ("late-head-pool-0", "Failed", "JoinTimeout", None)]
    assert not marker.exists()
    assert_nothing_left(job)


def test_a_failed_prepare_script_shows_pips_own_error(server):
    """The reason comes with the failing Worker's last lines: in the status, the Event, the
    API's job and run views and the console's overview."""
    server.submit(job_yaml("prep-pip", pool_workers=0, head_prepare=(
        "python -m pip install --disable-pip-version-check --no-index rlark-no-such-package")))
    job = server.wait_phase("prep-pip", {"Failed"}, timeout=60)
    pip_says = "ERROR: No matching distribution found for rlark-no-such-package"
    assert job["reason"] == "PrepareFailed"
    first, rest = job["message"].split("\n", 1)
    assert first == ("Worker prep-pip-head-0 (rank 0, role head): prepare script exited with "
                     "code 1")
    assert rest.startswith("last lines of prep-pip-head-0:\n") and rest.endswith(pip_says), rest
    lines = rest.splitlines()[1:]
    assert 1 <= len(lines) <= 20 and len(rest.encode()) <= 4096 + 100
    assert not any(l.startswith("RLARK_EVENT") for l in lines)
    assert job["currentRun"]["message"] == job["message"]
    runs = server.http.get("/api/v1/jobs/prep-pip/runs").json()
    assert runs[-1]["message"] == job["message"]
    events = server.http.get("/api/v1/jobs/prep-pip/events").json()
    assert [e["message"] for e in events if e["reason"] == "PrepareFailed"] == [job["message"]]
    page = server.http.get("/jobs/prep-pip")
    assert page.status_code == 200
    import html
    assert f'<pre class="log" data-message-lines>{html.escape(rest, quote=True)}</pre>' in page.text
    assert_nothing_left(server.wait_released("prep-pip"))


def test_the_first_failing_command_of_the_run_script_ends_it(server):
    """errexit: a command that exits 3, then `echo saving logs`: RunFailed with exit code 3."""
    server.submit(job_yaml("errexit", pool_workers=0,
                           run="echo before; sh -c 'exit 3'; echo saving logs"))
    job = server.wait_phase("errexit", {"Failed"}, timeout=90)
    assert (job["reason"], job["currentRun"]["exitCode"]) == ("RunFailed", 3)
    assert job["message"].endswith("last lines of errexit-head-0:\nbefore"), job["message"]
    job = server.wait_released("errexit")
    logs = server.cli("logs", "errexit")
    assert "before" in logs.stdout and "saving logs" not in logs.stdout
    assert_nothing_left(job)


def test_a_failed_ray_start_is_ray_start_failed_with_rays_message(server):
    # RAY_START_HOOK names a class `ray start` loads first (Ray 2.60); a missing one fails it
    server.submit(job_yaml("bad-ray", pool_workers=0,
                           head_env={"RAY_START_HOOK": "rlark_no_such_module.hook"}))
    job = server.wait_phase("bad-ray", {"Failed"}, timeout=90)
    assert job["reason"] == "RayStartFailed", job
    assert "ModuleNotFoundError: No module named 'rlark_no_such_module'" in job["message"]
    assert_nothing_left(server.wait_released("bad-ray"))


#: a `ray start` hook (RAY_START_HOOK, loaded by `ray start` before it starts anything, Ray 2.60)
#: that fails the Worker's first `ray start` once the head's GCS answers, as Ray's own "The
#: current node timed out during startup" does on a busy machine, and lets the next one through
FLAKY_START_HOOK = """\
import os, socket, time
MARK = "/tmp/rlark-hook/failed-once"
def hook(params, head):
    if os.path.exists(MARK):
        return
    host, port = os.environ["RLARK_HEAD_ADDRESS"].rsplit(":", 1)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    open(MARK, "w").close()
    raise RuntimeError("rlark test: this first ray start fails")
"""


def test_a_ray_start_that_fails_before_its_node_is_up_is_started_once_more(server):
    prepare = ("mkdir -p /tmp/rlark-hook && cat > /tmp/rlark-hook/rlark_flaky_start.py <<'PY'\n"
               + FLAKY_START_HOOK + "PY\n")
    server.submit(job_yaml("ray-again", pool_prepare=prepare,
                           pool_env={"PYTHONPATH": "/tmp/rlark-hook",
                                     "RAY_START_HOOK": "rlark_flaky_start.hook"}))
    job = server.wait_phase("ray-again", {"Succeeded", "Failed"}, timeout=180)
    assert job["phase"] == "Succeeded", job["message"]
    events = server.http.get("/api/v1/jobs/ray-again/events").json()
    again = [e for e in events if e["reason"] == "RayStartRetried"]
    assert [(e["type"], e["worker"]) for e in again] == [("Warning", "ray-again-pool-0")], events
    assert again[0]["message"].startswith("`ray start` exited with code 1 before this Ray node "
                                          "was up; starting it again (attempt 2 of 2)")
    from rlark.console.messages import message_text
    from tests.english import english_words

    zh = message_text("RayStartRetried", again[0]["message"], "zh-CN")
    assert not english_words(zh), zh
    logs = server.cli("logs", "ray-again", "--worker", "ray-again-pool-0")
    # the first start's error and the second's success, both in the Worker's log
    assert logs.stdout.count("RuntimeError: rlark test: this first ray start fails") == 1, \
        logs.stdout[-3000:]
    assert_nothing_left(server.wait_released("ray-again"))


def test_stop_while_running_then_start_again_keeps_ranks(server):
    server.submit(job_yaml("stop-start", run="sleep 600", pool_workers=1))
    job = server.wait_phase("stop-start", {"Running"}, timeout=120)
    ranks_1 = {w["name"]: w["nodeRank"] for w in job["currentRun"]["workers"]}
    first_uid = job["currentRun"]["uid"]
    res = server.cli("stop", "stop-start")
    assert res.returncode == 0, res.stderr
    job = server.wait_phase("stop-start", {"Stopped"}, timeout=60)
    job = server.wait_released("stop-start")
    assert_nothing_left(job)
    assert worker_states(job) == [("stop-start-head-0", "Stopped", "StoppedByRLark", None),
                                  ("stop-start-pool-0", "Stopped", "StoppedByRLark", None)]
    assert job["currentRun"]["workersReady"] == 0

    res = server.cli("start", "stop-start")
    assert res.returncode == 0, res.stderr
    job = server.wait_phase("stop-start", {"Running"}, timeout=120)
    assert job["currentRun"]["number"] == 2 and job["currentRun"]["uid"] != first_uid
    ranks_2 = {w["name"]: w["nodeRank"] for w in job["currentRun"]["workers"]}
    assert ranks_2 == ranks_1 == {"stop-start-head-0": 0, "stop-start-pool-0": 1}
    assert server.cli("stop", "stop-start").returncode == 0
    server.wait_phase("stop-start", {"Stopped"}, timeout=60)
    assert_nothing_left(server.wait_released("stop-start"))


def test_logs_and_record_survive_the_end_and_a_server_restart(server):
    server.submit(job_yaml("durable", run="echo durable-output-line"))
    job = server.wait_phase("durable", {"Succeeded"}, timeout=120)
    # the first look at the Succeeded Run already shows every Worker's final status: the head's
    # run script's code, and the pool Worker RLark ends now as "stopped by RLark", no 143/137
    settled = [("durable-head-0", "Succeeded", "Completed", 0),
               ("durable-pool-0", "Completed", "StoppedByRLark", None)]
    assert worker_states(job) == settled
    assert job["currentRun"]["workersReady"] == 2 and job["workersReady"] == 2
    job = server.wait_released("durable")
    assert worker_states(job) == settled
    record_before = server.http.get("/api/v1/jobs/durable/record").json()
    assert record_before["result"]["phase"] == "Succeeded"
    assert record_before["workers"]["expected"] == record_before["workers"]["actual"] == 2
    assert [w["nodeRank"] for w in record_before["workers"]["items"]] == [0, 1]
    assert all(w["rayNodeId"] for w in record_before["workers"]["items"])

    server.restart()
    logs = server.cli("logs", "durable", "--rank", "0")
    assert logs.returncode == 0, logs.stderr
    assert "durable-output-line" in logs.stdout
    rec = server.cli("record", "durable", "--format", "json")
    assert rec.returncode == 0, rec.stderr
    assert json.loads(rec.stdout) == record_before
    md = server.cli("record", "durable", "--format", "md")
    assert "durable-head-0" in md.stdout and "Succeeded" in md.stdout
    desc = server.cli("describe", "job", "durable", "--format", "json")
    assert json.loads(desc.stdout)["phase"] == "Succeeded"
    assert_nothing_left(job)


@pytest.mark.rlinf
def worker_processes(pid: int) -> list[psutil.Process]:
    """Every process of the Worker whose ``unshare`` is ``pid``: those in the PID namespace of
    its keeper (the workload runs in sessions of its own, so its process group is not all)."""
    keeper = psutil.Process(pid).children()[0]
    ns = os.readlink(f"/proc/{keeper.pid}/ns/pid")
    out = []
    for p in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{p.pid}/ns/pid") == ns:
                out.append(p)
        except OSError:
            continue
    return out


def test_a_frozen_head_is_noticed_then_fails_the_run(server):
    """The head's process group (its keeper) stopped with SIGSTOP: nothing of the Worker
    answers, and no process has ended. Within 30 s and some the Run's Responsive condition is
    False with a Warning Event naming rank 0; after failurePolicy.unresponsiveTimeoutSeconds the
    Run fails with WorkerUnresponsive (issue 19 item 10)."""
    doc = yaml.safe_load(job_yaml("frozen-head", run="sleep 600", pool_workers=0, grace=3))
    # past the 30 s after which the Run is Responsive False (a pass or more in between, so the
    # condition and its Warning come before the failure), not far past: the test waits for both
    doc["spec"]["failurePolicy"]["unresponsiveTimeoutSeconds"] = 35
    server.submit(yaml.safe_dump(doc))
    job = server.wait_phase("frozen-head", {"Running"}, timeout=120)
    head = job["currentRun"]["workers"][0]
    os.killpg(head["pid"], signal.SIGSTOP)
    try:
        def noticed():
            conds = {c["type"]: c for c in server.job("frozen-head")["currentRun"]["conditions"]}
            c = conds.get("Responsive")
            return c is not None and c["status"] == "False" and c
        cond = wait_for("the Responsive condition to turn False", noticed, timeout=60)
        assert cond["reason"] == "WorkerUnresponsive" and "rank 0 (frozen-head-head-0)" in cond["message"]
        warned = [e for e in server.http.get("/api/v1/jobs/frozen-head/events").json()
                  if e["reason"] == "WorkerUnresponsive" and e["type"] == "Warning"]
        assert warned and "no line from its keeper since" in warned[0]["message"]
        job = server.wait_phase("frozen-head", {"Failed"}, timeout=90)
    finally:
        os.killpg(head["pid"], signal.SIGCONT)
    assert job["reason"] == "WorkerUnresponsive" and "unresponsiveTimeoutSeconds is 35 s" in job["message"]
    assert_nothing_left(server.wait_released("frozen-head"))


def test_frozen_worker_fails_the_run_with_node_lost(server):
    """A Worker whose processes are all alive but frozen (SIGSTOP) is invisible to the process
    table; Ray's health checks see its node die, and the head fails the Run (fail closed)."""
    # Ray's GCS health check, tightened on the head (where the GCS runs) so the test waits
    # seconds, not Ray's default ~30 s (ray/src/ray/common/ray_config_def.h: health_check_*);
    # checks from the node's registration on (the default first waits 5 s: the freeze may come
    # within that, as the Run is Running once every node joined)
    fast_health_check = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                         "RAY_health_check_failure_threshold": "3",
                         "RAY_health_check_initial_delay_ms": "0"}
    server.submit(job_yaml("frozen", run="sleep 600", grace=3, head_env=fast_health_check))
    job = server.wait_phase("frozen", {"Running"}, timeout=120)
    pool = next(w for w in job["currentRun"]["workers"] if w["role"] == "pool")
    frozen = worker_processes(pool["pid"])
    assert len(frozen) > 3  # the keeper, the bootstrap, ray start, Ray's own processes
    for p in frozen:
        p.send_signal(signal.SIGSTOP)
    try:
        job = server.wait_phase("frozen", {"Failed"}, timeout=90)
    finally:
        for p in frozen:
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                pass
    assert job["reason"] == "NodeLost"
    assert "rank 1" in job["message"]
    assert_nothing_left(server.wait_released("frozen"))
