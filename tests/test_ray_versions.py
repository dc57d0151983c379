"""The Worker bootstrap runs unmodified where RLinf runs (issue 10, item 14): Python 3.10 and
3.11, Ray 2.47 (RLinf's minimum), a mid version (2.54, the last before Ray honours a non-head
node's ``--temp-dir``) and 2.60. Each combination is a virtualenv holding only
``ray[default]==X`` (``scripts/worker-envs``, cached outside the repository); a Job whose
roles' ``local.python`` point into it must Succeed, with every rank present, and its run record
must name each Worker's Ray and Python versions. The Job has 3 Workers where Ray puts every node
of a Run into the head's session directory (Ray < 2.55: two non-head nodes then take turns with
the Run's start lock, ``ray_node.py``), else 2 (a head and one other node prove a cluster forms;
3 nodes on Ray 2.60 are ``tests/test_record_e2e.py``'s quickstart).

The node-table reader outside the tested Ray range is the public ``ray.nodes()`` from a driver
(:class:`DriverNodes`); it is run here too, against the oldest and the newest Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from rlark.bootstrap import archive
from rlark.bootstrap.config import BootstrapError
from rlark.bootstrap.node_table import node_table_method
from rlark.bootstrap.port_watch import find_port_exhaustion
from rlark.bootstrap.ray_node import RAY_PER_NODE_TEMP_DIR, raylet_flags
from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir, serve

REPO = Path(__file__).resolve().parent.parent
MATRIX = [("3.10", "2.47.1"), ("3.10", "2.54.1"), ("3.10", "2.60.0"),
          ("3.11", "2.47.1"), ("3.11", "2.54.1"), ("3.11", "2.60.0")]


def worker_envs() -> dict[str, Path]:
    """``"<python>-<ray>" -> env dir`` of the envs ``scripts/worker-envs`` has ready."""
    out = subprocess.run([str(REPO / "scripts" / "worker-envs"), "list"], capture_output=True,
                         text=True, timeout=60)
    return {name: Path(path) for name, path in
            (line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)}


def env_for(python: str, ray: str) -> Path:
    env = worker_envs().get(f"{python}-{ray}")
    if env is None:
        pytest.skip(f"no Worker env for Python {python} + Ray {ray}: run scripts/worker-envs build "
                    "(scripts/test does)")
    return env


# --- pure: which reader for which Ray -----------------------------------------------------------


@pytest.mark.parametrize("version, method", [
    ((2, 47), "gcs"), ((2, 54), "gcs"), ((2, 60), "gcs"),
    ((2, 46), "driver"), ((2, 61), "driver"), ((3, 0), "driver"), (None, "driver"),
])
def test_node_table_method_by_version(version, method):
    assert node_table_method(version) == method
    assert node_table_method(version, "driver") == "driver"


def test_node_table_method_override_is_checked():
    with pytest.raises(BootstrapError, match="RLARK_RAY_NODES='grpc'"):
        node_table_method((2, 60), "grpc")


def test_raylet_flags():
    argv = ["/x/raylet", "--node_id=abc", "--raylet_socket_name=/t/s/raylet",
            "--store_socket_name=/t/s/plasma_store", "--log_dir=/t/s/logs", "positional"]
    assert raylet_flags(argv) == {
        "node_id": "abc", "raylet_socket_name": "/t/s/raylet",
        "store_socket_name": "/t/s/plasma_store", "log_dir": "/t/s/logs"}


def test_find_port_exhaustion_reads_only_what_is_new(tmp_path):
    offsets: dict[str, int] = {}
    (tmp_path / "raylet.out").write_text("all good\n")
    (tmp_path / "notes.txt").write_text("No available ports\n")  # not a Ray log file
    (tmp_path / "worker-07.out").write_text("No available ports\n")  # a task's own print
    assert find_port_exhaustion(str(tmp_path), offsets) is None
    err = tmp_path / "worker-01-02.err"
    err.write_text("starting\n")
    assert find_port_exhaustion(str(tmp_path), offsets) is None
    with err.open("a") as f:  # the needle arrives split across two writes
        f.write("Failed to register worker to Raylet: Invalid: No avail")
    assert find_port_exhaustion(str(tmp_path), offsets) is None
    with err.open("a") as f:
        f.write("able ports. Please specify a wider port range\n")
    assert find_port_exhaustion(str(tmp_path), offsets) == "worker-01-02.err"
    assert find_port_exhaustion(str(tmp_path / "missing"), {}) is None


# --- for real: a multi-Worker Job per (Python, Ray) -----------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server whose administrator allows Ray without token authentication: the matrix holds
    RLinf's minimum, Ray 2.47, which has none (2.52+ has)."""
    home = tmp_path_factory.mktemp("rlark-home")
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(),
                             "RLARK_ALLOW_UNAUTHENTICATED_RAY": "1"}).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.ray
def test_a_ray_without_token_authentication_is_refused_unless_the_server_allows_it(tmp_path_factory):
    """Ray 2.47 takes any process of the machine into its cluster: a server that does not allow
    that refuses the Job at submit (RayTooOld, an error naming the role's Python); the matrix's
    server, which allows it, only warns."""
    env = env_for("3.11", "2.47.1")
    for srv in serve(tmp_path_factory.mktemp("rlark-home")):
        r = srv.http.post("/api/v1/jobs", content=job_yaml("old-ray", env).encode(),
                          headers={"Content-Type": "application/yaml"})
        assert r.status_code == 422, r.text
        found = [f for f in r.json()["detail"]["findings"] if f["code"] == "RayTooOld"]
        assert {(f["severity"], f["path"]) for f in found} == {
            ("error", "spec.roles[0].local.python"), ("error", "spec.roles[1].local.python")}, found
        assert all("Ray 2.47" in f["message"] for f in found)
        assert srv.http.get("/api/v1/jobs").json()["items"] == []  # nothing was stored


RUN_SCRIPT = (
    'python -c "import platform, ray; ray.init(); '
    "alive = [n for n in ray.nodes() if n['Alive']]; "
    "print('CLUSTER', len(alive), ray.__version__, platform.python_version())\""
)


def workers_for(ray: str) -> int:
    """How many Workers the matrix's Job for ``ray`` has (the module's docstring says why)."""
    return 3 if tuple(int(x) for x in ray.split(".")[:2]) < RAY_PER_NODE_TEMP_DIR else 2


def job_yaml(name: str, python: Path, workers: int = 3) -> str:
    role = {"image": "docker.io/rlinf/rlinf:0.3.0", "resources": {"cpu": 1, "memory": "1Gi"},
            "local": {"python": str(python)}}
    return json.dumps({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"headRole": "head", "failurePolicy": {"joinTimeoutSeconds": 180},
                 "terminationGracePeriodSeconds": 5, "runScript": RUN_SCRIPT,
                 "roles": [{"name": "head", "workers": 1, **role},
                           {"name": "pool", "workers": workers - 1, **role}]},
    })


@pytest.mark.ray
@pytest.mark.parametrize("python, ray", MATRIX, ids=[f"py{p}-ray{r}" for p, r in MATRIX])
def test_a_multi_worker_job_succeeds(server, python, ray):
    env = env_for(python, ray)
    name = f"py{python.replace('.', '')}-ray{ray.replace('.', '')}"
    n = workers_for(ray)
    started = time.monotonic()
    server.submit(job_yaml(name, env, n))
    job = server.wait_phase(name, {"Succeeded", "Failed"}, timeout=400)
    logs = server.http.get(f"/api/v1/jobs/{name}/logs", params={"role": "head"}).json()
    lines = logs["workers"][0]["lines"]
    assert job["phase"] == "Succeeded", (job["reason"], job["message"], lines[-30:])
    assert f"CLUSTER {n} {ray} {python}" in " ".join(lines), lines[-10:]
    assert sorted(w["nodeRank"] for w in job["currentRun"]["workers"]) == list(range(n))
    record = server.http.get(f"/api/v1/jobs/{name}/record").json()
    items = record["workers"]["items"]
    assert [w["rayVersion"] for w in items] == [ray] * n
    assert all(w["facts"]["python"].startswith(python + ".") for w in items)
    assert all(w["facts"]["python_executable"].startswith(str(env)) for w in items)
    assert record["versions"]["ray"] == [ray] and record["workers"]["actual"] == n
    print(f"{name}: Succeeded in {time.monotonic() - started:.1f} s")
    assert_nothing_left(server.wait_released(name))


# --- for real: the public ray.nodes() reader, on the oldest and the newest Ray ---------------------

# Runs in the Worker env's own Python, as PID 1 of its own PID namespace when possible (as a
# local Worker's bootstrap runs), importing the bootstrap from its archive: starts a Ray head,
# waits for its raylet, reads the node table with the bootstrap's DriverNodes, kills the GCS and
# times how long the reader takes to notice.
# Prints one JSON object per step; when it exits, the kernel ends the namespace with everything
# Ray started.
DRIVER_CHECK = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])  # the bootstrap archive, as it travels into a Worker
from rlark.bootstrap import barrier, node_table, ray_node
ray_start, address = json.loads(sys.argv[2]), sys.argv[3]
head = subprocess.Popen(ray_start, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True)

def raylet():
    for pid in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
        except OSError:
            continue
        if argv and argv[0].endswith("/raylet") and f"--gcs-address={address}" in " ".join(argv):
            return ray_node.raylet_flags(argv)
    return None

deadline = time.monotonic() + 180
while not ((flags := raylet()) and os.path.exists(flags.get("raylet_socket_name", "/none"))):
    assert head.poll() is None, f"ray start exited with {head.returncode}"
    assert time.monotonic() < deadline, "the head's raylet never started"
    time.sleep(0.2)
table = node_table.DriverNodes(address, dict(os.environ), stale=5.0)
deadline = time.monotonic() + 120
while not (nodes := table.nodes()):
    assert time.monotonic() < deadline, "the driver never listed a node"
    time.sleep(0.1)
by_rank, missing, problems = barrier.check_ranks(nodes, "drv", 1)
print(json.dumps({"ranks": sorted(by_rank), "missing": missing, "problems": problems,
                  "labels": nodes[0]["Labels"]}), flush=True)
port = address.rsplit(":", 1)[1]
for pid in os.listdir("/proc"):  # the GCS dies
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    except OSError:
        continue
    if argv and argv[0].endswith("gcs_server") and f"--gcs_server_port={port}" in argv:
        os.kill(int(pid), 9)
t = time.monotonic()
while True:
    try:
        table.nodes()
    except RuntimeError as exc:
        print(json.dumps({"raised": str(exc), "after": time.monotonic() - t}), flush=True)
        break
    assert time.monotonic() - t < 60, "a dead GCS went unnoticed"
    time.sleep(0.2)
table.close()
os.killpg(head.pid, 9)
"""


def _head_command(env: Path, tmp: str):
    """``ray start --head`` of ``env`` on a free loopback address and port block, reserved
    host-wide as the local runtime reserves them (other tests' Workers may run meanwhile).
    Returns (argv, GCS address, release)."""
    from rlark.runtimes.local.ports import UNIT, can_bind, pick_loopback, pick_port_block, port_layout
    from rlark.runtimes.local.reservations import Reservations

    res = Reservations()
    used: set[str] = set()
    ip = pick_loopback(used)
    while not res.try_reserve("ip", ip):
        used.add(ip)
        ip = pick_loopback(used)

    def free(base: int) -> bool:
        if not res.try_reserve("ports", base):
            return False
        if can_bind(ip, range(base, base + UNIT)):
            return True
        res.release("ports", base)
        return False

    base = pick_port_block([], UNIT, free)
    ports = port_layout(base)
    argv = [str(env / "bin" / "ray"), "start", "--head", "--block", "--disable-usage-stats",
            f"--port={ports['gcs']}", "--include-dashboard=false", f"--node-ip-address={ip}",
            *(f"--{k}={v}" for k, v in ports.items() if k != "gcs"),
            "--num-cpus=1", "--object-store-memory=100000000",
            "--labels=rlark.io/node-rank=0,rlark.io/run=drv", f"--temp-dir={tmp}"]

    def release():
        res.release("ports", base)
        res.release("ip", ip)

    return argv, f"{ip}:{ports['gcs']}", release


@pytest.mark.ray
@pytest.mark.parametrize("python, ray", [("3.10", "2.47.1"), ("3.11", "2.60.0")],
                         ids=["py3.10-ray2.47.1", "py3.11-ray2.60.0"])
def test_driver_node_table_lists_ranks_and_notices_a_dead_gcs(python, ray, tmp_path):
    from rlark.runtimes.local.runtime import use_pid_namespace

    env = env_for(python, ray)
    argv, address, release = _head_command(env, ray_tmp_dir())
    cmd = [str(env / "bin" / "python"), "-c", DRIVER_CHECK, archive.install(str(tmp_path)),
           json.dumps(argv), address]
    if use_pid_namespace():
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                             env={**os.environ, "RAY_ADDRESS": ""})
    finally:
        release()
    steps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and len(steps) == 2, (out.returncode, out.stdout, out.stderr[-3000:])
    first, second = steps
    assert first["ranks"] == [0] and first["missing"] == [] and first["problems"] == []
    assert first["labels"]["rlark.io/run"] == "drv"
    assert "raised" in second and second["after"] < 30, second
