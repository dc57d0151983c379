"""Ray's worker ports and object store per Worker: sized to the role, settable, checked before a
Job starts, shown to users, and Ray's port exhaustion reported (issue 10, item 4).

Ray gives every worker process of a node one port from ``--min-worker-port..--max-worker-port``
(each task worker, actor and driver); one that finds none never starts ("No available ports"),
and whatever waits for it waits forever. Seen: one Worker with ``cpu: 8`` whose run script
started 56 actors with ``num_cpus=0`` got 48 ports whatever its size: 47 started, 9 hung.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rlark.preflight.job import check_job
from rlark.runtimes.local.preflight import check_for_local_runtime
from rlark.spec import parse_job
from tests.server import assert_nothing_left, serve

HOST = {"cpu": 2, "memory": 24 * 2**30, "gpu": 0}

# A run script that starts N cheap actors (num_cpus=0: not bounded by the node's CPUs) and says
# how many answered within a bound; exit 0 only when all did.
ACTORS = r"""
import os, sys, time
import ray
n, timeout = int(sys.argv[1]), float(sys.argv[2])
stop_file = sys.argv[3] if len(sys.argv) > 3 else None  # the test says when it has seen enough
ray.init()
@ray.remote(num_cpus=0)
class Cheap:
    def ping(self):
        return 1
actors = [Cheap.remote() for _ in range(n)]
pending, ready = [a.ping.remote() for a in actors], []
deadline = time.monotonic() + timeout
while pending and time.monotonic() < deadline and not (stop_file and os.path.exists(stop_file)):
    done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
    ready += done
print(f"ACTORS_STARTED {len(ready)} of {n}", flush=True)
sys.exit(0 if len(ready) == n else 1)
"""


def one_worker_job(name: str, resources: dict, run: str, ray: dict | None = None,
                   working_dir: Path | None = None, mounts: list[dict] | None = None) -> str:
    role: dict = {"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0", "resources": resources}
    if ray:
        role["ray"] = ray
    if mounts:
        role["mounts"] = mounts
    spec: dict = {"headRole": "head", "failurePolicy": {"joinTimeoutSeconds": 120},
                  "terminationGracePeriodSeconds": 5, "roles": [role], "runScript": run}
    if working_dir is not None:
        spec["workingDir"] = str(working_dir)
    return json.dumps({"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
                       "spec": spec})


def actors_dir(tmp_path: Path) -> Path:
    """A working directory holding the run script's ``actors.py`` (a Worker sees the server's
    files only through its Job's workingDir and mounts: its /tmp is its own)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "actors.py").write_text(ACTORS)
    return work


def findings_of(role: dict, host: dict | None = None) -> dict[str, list]:
    job, errors = parse_job({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "p"},
        "spec": {"headRole": "h", "runScript": "true",
                 "roles": [{"name": "h", "image": "x/y:1", **role}]}})
    assert job is not None, errors
    out: dict[str, list] = {}
    for f in check_job(job) + check_for_local_runtime(job, host or HOST):
        out.setdefault(f.code, []).append(f)
    return out


# --- preflight ------------------------------------------------------------------------------------


def test_a_set_range_tight_for_the_role_is_a_warning():
    found = findings_of({"resources": {"cpu": 8}, "ray": {"workerPorts": 20}})
    (tight,) = found["WorkerPortsTight"]
    assert tight.severity == "warning" and tight.path == "spec.roles[0].ray.workerPorts"
    assert "20 worker ports for 8 CPUs" in tight.message and "No available ports" in tight.message
    assert "at least 32" in tight.hint
    assert "WorkerPortsTight" not in findings_of({"resources": {"cpu": 8}, "ray": {"workerPorts": 32}})


def test_the_default_range_is_never_tight_until_its_cap():
    for cpu in (1, 8, 64, 1024):
        assert "WorkerPortsTight" not in findings_of({"resources": {"cpu": cpu}}), cpu
    (capped,) = findings_of({"resources": {"cpu": 2000}})["WorkerPortsTight"]
    assert "default stops at 4096" in capped.message and "4096 worker ports for 2000 CPUs" in capped.message


def test_a_role_without_cpu_is_measured_against_this_machine():
    """Without resources.cpu the Ray node offers all of the host's CPUs."""
    (tight,) = findings_of({"ray": {"workerPorts": 20}}, {**HOST, "cpu": 64})["WorkerPortsTight"]
    assert "20 worker ports for 64 CPUs" in tight.message and "all of this machine's" in tight.message
    assert "WorkerPortsTight" not in findings_of({"ray": {"workerPorts": 20}}, {**HOST, "cpu": 2})


@pytest.mark.parametrize("value", [0, -5, 55535])
def test_worker_ports_out_of_range(value):
    (bad,) = findings_of({"ray": {"workerPorts": value}})["InvalidWorkerPorts"]
    assert bad.severity == "error" and f"= {value} must be between 1 and 55534" in bad.message


def test_more_worker_ports_than_one_machine_has():
    (one,) = findings_of({"ray": {"workerPorts": 13000}})["ExceedsLocalPorts"]
    assert one.path == "spec.roles[0].ray.workerPorts" and "12720" in one.message
    (total,) = findings_of({"workers": 70, "resources": {"cpu": 8}})["ExceedsLocalPorts"]
    assert "70 Workers need 13440 ports in all" in total.message  # 70 blocks of 192 ports
    assert "ExceedsLocalPorts" not in findings_of({"workers": 66, "resources": {"cpu": 8}})


def test_object_store_memory_rules():
    (small,) = findings_of({"resources": {"objectStoreMemory": "64Mi"}})["ObjectStoreTooSmall"]
    assert small.severity == "error" and "75Mi" in small.message
    (bad,) = findings_of({"resources": {"objectStoreMemory": "lots"}})["InvalidObjectStoreMemory"]
    assert bad.path == "spec.roles[0].resources.objectStoreMemory"
    (big,) = findings_of({"resources": {"memory": "1Gi", "objectStoreMemory": "1Gi"}})[
        "ObjectStoreExceedsMemory"]
    assert big.severity == "warning"
    assert findings_of({"resources": {"memory": "4Gi", "objectStoreMemory": "1Gi"}}).keys() <= {
        "ExceedsHostCpu"}


# --- for real -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


def head_lines(server, name: str) -> list[str]:
    logs = server.http.get(f"/api/v1/jobs/{name}/logs", params={"role": "head"}).json()
    return logs["workers"][0]["lines"]


@pytest.mark.ray
def test_56_actors_on_a_worker_with_8_cpus_all_start(server, tmp_path):
    """The issue's example: one Worker, cpu 8, 56 actors with num_cpus=0. Its range is now sized
    to the role (16 per CPU: 128, filling 3 units of 64 ports: 176), so all 56 start."""
    server.submit(one_worker_job("actors56", {"cpu": 8, "memory": "4Gi"}, "python actors.py 56 300",
                                 working_dir=actors_dir(tmp_path)))
    job = server.wait_phase("actors56", {"Succeeded", "Failed"}, timeout=420)
    lines = head_lines(server, "actors56")
    assert job["phase"] == "Succeeded", (job["reason"], job["message"], lines[-20:])
    assert any(line.startswith("ACTORS_STARTED 56 of 56") for line in lines)
    (task,) = job["currentRun"]["tasks"]
    assert task["rayNode"]["workerPorts"] == 176 and task["rayNode"]["workerPortsSet"] is False
    assert task["rayNode"]["objectStoreBytes"] == int(4 * 2**30 * 0.3)
    # describe shows what each Worker's Ray node got; the record what it ran with
    desc = server.cli("describe", "job", "actors56")
    assert desc.returncode == 0, desc.stderr
    assert "176 worker ports" in desc.stdout and "1.2 GiB object store" in desc.stdout
    record = server.http.get("/api/v1/jobs/actors56/record").json()
    (worker,) = record["workers"]["items"]
    lo, hi = worker["rayNode"]["workerPorts"]
    assert hi - lo + 1 == 176 and worker["rayNode"]["objectStoreBytes"] == int(4 * 2**30 * 0.3)
    events = server.http.get("/api/v1/jobs/actors56/events").json()
    assert not [e for e in events if e["reason"] == "RayWorkerPortsExhausted"]
    assert_nothing_left(server.wait_released("actors56"))


@pytest.mark.ray
def test_exhausted_worker_ports_are_a_warning_event(server, tmp_path):
    """A range too small for the run script (4 ports, 6 actors): the actors beyond it never
    start, and the Worker's bootstrap sees Ray's "No available ports" and says so as a Warning
    Event naming the Worker, while the Run goes on."""
    signal = tmp_path / "signal"  # the test's word to the run script, through a hostPath mount
    signal.mkdir()
    seen = signal / "warning-seen"
    server.submit(one_worker_job(
        "few-ports", {"cpu": 1, "memory": "1Gi"},
        "python actors.py 6 120 /signal/warning-seen || echo not all started",
        ray={"workerPorts": 4}, working_dir=actors_dir(tmp_path),
        mounts=[{"name": "signal", "type": "hostPath", "source": str(signal), "mountPath": "/signal"}]))
    deadline = time.monotonic() + 180
    while True:
        events = server.http.get("/api/v1/jobs/few-ports/events").json()
        warned = [e for e in events if e["reason"] == "RayWorkerPortsExhausted"]
        if warned:
            break
        job = server.job("few-ports")
        assert job["phase"] not in ("Failed", "Stopped"), (job["reason"], job["message"])
        assert time.monotonic() < deadline, f"no RayWorkerPortsExhausted event: {events}"
        time.sleep(0.5)
    seen.touch()  # the actors still waiting will never start: the run script may end now
    (event,) = warned
    assert event["type"] == "Warning" and event["worker"] == "few-ports-head-0"
    assert "no worker port left" in event["message"] and "4 worker ports" in event["message"]
    assert "ray.workerPorts" in event["message"]
    job = server.wait_phase("few-ports", {"Succeeded", "Failed"}, timeout=180)
    assert job["phase"] == "Succeeded"  # the run script's own choice (`|| echo`)
    started = [line for line in head_lines(server, "few-ports") if line.startswith("ACTORS_STARTED")]
    assert started and not started[0].startswith("ACTORS_STARTED 6 ")
    (task,) = job["currentRun"]["tasks"]
    assert task["rayNode"]["workerPorts"] == 4 and task["rayNode"]["workerPortsSet"] is True
    assert_nothing_left(server.wait_released("few-ports"))
