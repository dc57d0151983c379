"""Nothing a Run started outlives it, in every kind of Worker isolation (issue 10, item 16; issue
13, item 6), with real servers and real Ray nodes.

The attack: a run script that detaches a process with an empty environment and its own session
(``setsid env -i``), so neither its process group nor its environment ties it to the Run; then
the Run is stopped, or ends by itself. The safe outcome: that process is gone, and the tests'
leftover check (tests/server.py ``run_processes``: by PID namespace, by Worker cgroup, or by
environment) finds nothing of the Run. The servers: root with CAP_SYS_ADMIN (a PID namespace
per Worker), root without it (``setpriv``: a default container, where no PID namespace can be
made and auto picks a cgroup per Worker), and root asking for a cgroup per Worker; a server that
crashes and is replaced by one without CAP_SYS_ADMIN still ends an adopted Worker whole; and a
server run by a user other than root (``nobody``: a PID namespace inside a user namespace).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rlark.runtimes.local.runtime import use_pid_namespace
from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir, run_processes
from tests.test_local_isolation import AS_USER, NOBODY

pytestmark = pytest.mark.ray

NO_SYS_ADMIN = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"]

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  roles:
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1, memory: 1Gi}}}}
  runScript: |
    setsid env -i /bin/sleep 604 < /dev/null > /dev/null 2>&1 &
    {rest}
"""

#: the servers under test: (id, isolation shown by /api/v1/server, wrapper, environment)
SERVERS = {
    "pid-namespace": ("pid-namespace", [], {}),
    "cgroup": ("cgroup", [], {"RLARK_WORKER_ISOLATION": "cgroup"}),
    "no-sys-admin": ("cgroup", NO_SYS_ADMIN, {}),
    "non-root": ("user-namespace", None, {}),
}


def _as_nobody(srv_env: dict) -> tuple[Path, list[str], dict]:
    """A home, Ray temp dir and lock dir the user ``nobody`` owns, and the wrapper that runs
    the server as that user (tests/test_local_isolation.py ``AS_USER``)."""
    base = Path(tempfile.mkdtemp(prefix="rlark-nobody-", dir="/tmp"))
    base.chmod(0o755)
    dirs = {name: base / name for name in ("home", "locks")}
    dirs["ray"] = Path(ray_tmp_dir())
    for d in dirs.values():
        d.mkdir(parents=True)
        os.chown(d, NOBODY, NOBODY)
    top = Path(sys.executable).resolve().relative_to("/root").parts[0] \
        if Path(sys.executable).resolve().is_relative_to("/root") else ".none"
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_USER, "as-user", top, ""]
    env = {**srv_env, "RLARK_RAY_TMP": str(dirs["ray"]), "RLARK_LOCK_DIR": str(dirs["locks"]),
           "RLARK_TEST_UID": str(NOBODY), "HOME": str(dirs["home"])}
    return dirs["home"], wrap, env


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request, tmp_path_factory):
    assert os.geteuid() == 0, "run as root: these servers change privileges (CI does)"
    if request.param == "pid-namespace" and not use_pid_namespace():
        pytest.skip("this machine cannot make PID namespaces")
    mode, wrap, env = SERVERS[request.param]
    env = {"RLARK_RAY_TMP": ray_tmp_dir(), **env}
    home = None
    if wrap is None:  # a user other than root
        home, wrap, env = _as_nobody(env)
    srv = RlarkServer(home or tmp_path_factory.mktemp("rlark-home"), env, wrap=wrap).start()
    srv.mode = mode
    try:
        yield srv
    finally:
        srv.stop()
        if home is not None:
            shutil.rmtree(home.parent, ignore_errors=True)


def hidden_process(server: RlarkServer, uid: str) -> psutil.Process:
    """The run script's detached ``/bin/sleep 604``, once it exists (bounded)."""
    deadline = time.monotonic() + 30
    def cmdline(p: psutil.Process) -> list[str]:
        try:
            return p.cmdline()
        except psutil.Error:  # ended (or a zombie) since it was listed
            return []

    while True:  # the run script has just started: wait for its detached child
        hidden = [p for p in run_processes(uid) if cmdline(p)[:2] == ["/bin/sleep", "604"]]
        if hidden:
            (proc,) = hidden
            return proc
        assert time.monotonic() < deadline, [cmdline(p) for p in run_processes(uid)]
        time.sleep(0.2)


def gone(proc: psutil.Process, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_server_says_what_isolation_its_workers_get(server):
    health = server.http.get("/api/v1/server").json()
    assert health["workerIsolation"] == server.mode
    node = server.http.get("/api/v1/nodes").json()["items"][0]
    assert node["isolation"]["mode"] == server.mode and node["isolation"]["strong"] is True
    log = (server.home / "server.log").read_text()
    assert f"Worker isolation: {server.mode}" in log


def test_a_process_that_drops_the_run_id_is_gone_once_the_run_is_stopped(server):
    name = f"hide-{server.mode}"[:30]
    server.submit(JOB.format(name=name, rest="sleep 600"))
    job = server.wait_phase(name, {"Running"}, timeout=180)
    proc = hidden_process(server, job["currentRun"]["uid"])
    # nothing in it names the Run: no environment, a session of its own
    assert proc.environ() == {}
    assert os.getsid(proc.pid) == proc.pid
    assert server.cli("stop", name).returncode == 0
    server.wait_phase(name, {"Stopped"}, timeout=60)
    assert_nothing_left(server.wait_released(name))
    assert gone(proc)


def test_a_process_the_run_script_leaves_behind_ends_with_the_run(server):
    name = f"leave-{server.mode}"[:30]
    server.submit(JOB.format(name=name, rest="echo done"))
    job = server.wait_phase(name, {"Running", "Succeeded"}, timeout=180)
    proc = hidden_process(server, job["currentRun"]["uid"])
    job = server.wait_phase(name, {"Succeeded"}, timeout=120)
    assert_nothing_left(server.wait_released(name))
    assert gone(proc)


def test_an_adopted_cgroup_worker_is_ended_whole_by_a_server_without_cap_sys_admin(tmp_path):
    """The server that launched the Worker (a cgroup per Worker) is killed; the next one runs
    without CAP_SYS_ADMIN, adopts the Run from the store (PID, start time and cgroup path) and
    stops it: the detached process goes with it."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"RLARK_RAY_TMP": ray_tmp_dir(), "RLARK_WORKER_ISOLATION": "cgroup",
           "RLARK_STOP_RUNS_ON_EXIT": "0"}
    first = RlarkServer(home, env).start()
    try:
        first.submit(JOB.format(name="adopted", rest="sleep 600"))
        job = first.wait_phase("adopted", {"Running"}, timeout=180)
        proc = hidden_process(first, job["currentRun"]["uid"])
    finally:
        first.crash()
    later = first  # the same store, address and credentials; another process
    later.env.update({"RLARK_WORKER_ISOLATION": "auto", "RLARK_STOP_RUNS_ON_EXIT": "1"})
    later.wrap = NO_SYS_ADMIN
    later.start()
    try:
        assert later.http.get("/api/v1/server").json()["workerIsolation"] == "cgroup"
        assert not gone(proc, timeout=0)  # still running after the crash
        assert later.cli("stop", "adopted").returncode == 0
        later.wait_phase("adopted", {"Stopped"}, timeout=60)
        assert_nothing_left(later.wait_released("adopted"))
        assert gone(proc)
    finally:
        later.stop()
