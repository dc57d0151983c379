"""Pure builders shared by the runtimes (Ray resources, bootstrap environment, local ports and
addresses, the Worker command line) and the run record."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import yaml

from rlark.bootstrap import archive
from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.ray_node import build_ray_start_command
from rlark.ranks import plan_workers
from rlark.record.build import RECORD_VERSION, build_record
from rlark.record.export import render
from rlark.runtimes.base import (
    OBJECT_STORE_DEFAULT,
    OBJECT_STORE_MAX,
    OBJECT_STORE_MIN,
    bootstrap_env,
    local_block_size,
    ray_node_summary,
    ray_node_view,
    ray_resources,
    taken_port_ranges,
    worker_ports,
)
from rlark.runtimes.local.runtime import keeper_argv, python_for, server_archive
from rlark.runtimes.local.isolation import Mode
from rlark.runtimes.local.ports import (
    LOOPBACK_FIRST,
    MAX_BLOCK_SIZE,
    PORT_RANGE_END,
    PORT_RANGE_START,
    UNIT,
    block_size,
    block_units,
    default_worker_ports,
    pick_loopback,
    pick_port_block,
    port_layout,
    unit_bases,
    worker_ports_of,
)
from rlark.spec import Job, job_to_dict, parse_job

GiB = 2**30
MiB = 2**20


def make_job(head: dict | None = None, pool: dict | None = None, **spec) -> Job:
    """Job ``ppo``: role ``head`` (1 Worker) and ``pool`` (2 Workers). No preflight, so tests can
    also build specs preflight would refuse."""
    job, findings = parse_job(
        {
            "apiVersion": "rlark.io/v1",
            "kind": "Job",
            "metadata": {"name": "ppo"},
            "spec": {
                "headRole": "head",
                "runScript": "python train.py",
                "roles": [
                    {"name": "head", "workers": 1, "image": "rlinf:1", **(head or {})},
                    {"name": "pool", "workers": 2, "image": "rlinf:1", **(pool or {})},
                ],
                **spec,
            },
        }
    )
    assert findings == [], findings
    return job


# --- ray_resources ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resources, cpus, memory, store",
    [
        ({}, None, None, OBJECT_STORE_DEFAULT),
        ({"cpu": "500m"}, 1, None, OBJECT_STORE_DEFAULT),
        ({"cpu": 2}, 2, None, OBJECT_STORE_DEFAULT),
        ({"cpu": 2.5}, 3, None, OBJECT_STORE_DEFAULT),
        ({"cpu": "2001m"}, 3, None, OBJECT_STORE_DEFAULT),
        ({"memory": "8Gi"}, None, 8 * GiB, int(8 * GiB * 0.3)),
        ({"memory": "1G"}, None, 10**9, int(10**9 * 0.3)),
        ({"memory": 4 * GiB}, None, 4 * GiB, int(4 * GiB * 0.3)),
        ({"memory": "20Gi"}, None, 20 * GiB, OBJECT_STORE_MAX),
        ({"memory": "256Mi"}, None, 256 * MiB, OBJECT_STORE_MIN),
    ],
    ids=["none", "cpu-500m", "cpu-2", "cpu-2.5", "cpu-2001m", "mem-8Gi", "mem-1G", "mem-int",
         "mem-clamped-high", "mem-clamped-low"],
)
def test_ray_resources(resources, cpus, memory, store):
    res = ray_resources(make_job(head={"resources": resources}).spec.roles[0])
    assert (res.num_cpus, res.memory_bytes, res.object_store_bytes) == (cpus, memory, store)
    assert res.num_gpus == 0 and res.custom == {}


def test_ray_resources_object_store_bounds():
    assert OBJECT_STORE_MIN == 128 * MiB and OBJECT_STORE_MAX == 4 * GiB
    assert OBJECT_STORE_DEFAULT == 512 * MiB


@pytest.mark.parametrize("resources, store", [
    ({"objectStoreMemory": "2Gi"}, 2 * GiB),
    ({"objectStoreMemory": "2Gi", "memory": "1Gi"}, 2 * GiB),  # set: not derived from memory
    ({"objectStoreMemory": 100 * MiB}, 100 * MiB),
    ({"objectStoreMemory": "6Gi", "memory": "64Gi"}, 6 * GiB),  # above the default's 4 GiB cap
])
def test_object_store_memory_is_a_settable_resource(resources, store):
    role = make_job(head={"resources": resources}).spec.roles[0]
    assert ray_resources(role).object_store_bytes == store
    assert ray_node_view(role, "local", host_cpus=2)["objectStoreBytes"] == store
    env = envs(make_job(head={"resources": resources}))["ppo-head-0"]
    assert env["RLARK_OBJECT_STORE_BYTES"] == str(store)
    cmd = build_ray_start_command(BootstrapConfig.from_env(env))
    assert f"--object-store-memory={store}" in cmd


def test_ray_resources_gpus_and_devices():
    role = make_job(head={"resources": {"gpu": 2, "devices": {"rdma/hca": 1, "a": 3}}}).spec.roles[0]
    res = ray_resources(role)
    assert res.num_gpus == 2
    assert res.custom == {"a": 3.0, "rdma/hca": 1.0}
    assert all(isinstance(v, float) for v in res.custom.values())


# --- bootstrap_env ------------------------------------------------------------------------------------


def envs(job: Job, **kw) -> dict[str, dict[str, str]]:
    return {
        w.name: bootstrap_env(job, w, run_uid="uid1", head_address="127.0.0.2:20000", **kw)
        for w in plan_workers(job)
    }


def test_bootstrap_env_per_worker():
    job = make_job(pool={"env": [{"name": "FOO", "value": "bar"}]})
    out = envs(job)
    assert {n: e["RLINF_NODE_RANK"] for n, e in out.items()} == {
        "ppo-head-0": "0",
        "ppo-pool-0": "1",
        "ppo-pool-1": "2",
    }
    for name, e in out.items():
        assert e["RLARK_WORKER"] == name
        assert e["RLARK_JOB"] == "ppo" and e["RLARK_RUN_ID"] == "uid1"
        assert e["RLARK_NUM_NODES"] == "3"
        assert e["RLARK_HEAD_ADDRESS"] == "127.0.0.2:20000"
        assert e["RLARK_JOIN_TIMEOUT_SECONDS"] == "300"
        assert e["RLARK_PREPARE_TIMEOUT_SECONDS"] == "1800"
    assert out["ppo-head-0"]["RLARK_ROLE"] == "head" and out["ppo-pool-1"]["RLARK_ROLE"] == "pool"
    assert "FOO" not in out["ppo-head-0"]
    assert out["ppo-pool-0"]["FOO"] == "bar" and out["ppo-pool-1"]["FOO"] == "bar"


def test_bootstrap_env_run_script_only_on_head():
    out = envs(make_job())
    assert out["ppo-head-0"]["RLARK_RUN_SCRIPT"] == "python train.py"
    assert "RLARK_RUN_SCRIPT" not in out["ppo-pool-0"]
    assert "RLARK_RUN_SCRIPT" not in out["ppo-pool-1"]


def test_bootstrap_env_rlark_variables_cannot_be_overridden():
    reserved = [
        {"name": "RLINF_NODE_RANK", "value": "99"},
        {"name": "RLARK_JOB", "value": "evil"},
        {"name": "RLARK_NUM_NODES", "value": "1"},
        {"name": "RLARK_HEAD_ADDRESS", "value": "evil:1"},
    ]
    job = make_job(head={"env": reserved}, pool={"env": reserved})
    for w in plan_workers(job):
        e = bootstrap_env(job, w, run_uid="u", head_address="h:1",
                          extra={"RLARK_WORKER": "evil", "RLINF_NODE_RANK": "98"})
        assert e["RLINF_NODE_RANK"] == str(w.node_rank)
        assert (e["RLARK_JOB"], e["RLARK_NUM_NODES"], e["RLARK_HEAD_ADDRESS"]) == ("ppo", "3", "h:1")
        assert e["RLARK_WORKER"] == w.name


def test_bootstrap_env_role_cannot_inject_conditional_rlark_variables():
    job = make_job(pool={"env": [{"name": "RLARK_RUN_SCRIPT", "value": "rm -rf /"},
                                 {"name": "RLARK_NUM_CPUS", "value": "64"}]})
    pool = envs(job)["ppo-pool-0"]
    assert "RLARK_RUN_SCRIPT" not in pool and "RLARK_NUM_CPUS" not in pool


def test_bootstrap_env_drain_timeout_default_and_override():
    assert {e["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] for e in envs(make_job()).values()} == {"0"}
    job = make_job(pool={"env": [{"name": "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "value": "30"}]})
    out = envs(job)
    assert out["ppo-pool-0"]["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "30"
    assert out["ppo-head-0"]["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"


def test_bootstrap_env_optional_variables():
    bare = envs(make_job())["ppo-pool-0"]
    for name in ("RLARK_NUM_CPUS", "RLARK_MEMORY_BYTES", "RLARK_RESOURCES", "RLARK_WORKING_DIR",
                 "RLARK_NODE_IP", "RLARK_RAY_PORTS", "RLARK_RAY_TEMP_DIR"):
        assert name not in bare
    assert bare["RLARK_NUM_GPUS"] == "0"
    assert bare["RLARK_OBJECT_STORE_BYTES"] == str(OBJECT_STORE_DEFAULT)
    job = make_job(
        pool={"resources": {"cpu": "1500m", "memory": "2Gi", "gpu": 1, "devices": {"rdma/hca": 1}},
              "prepareScript": "pip list"},
        workingDir="/w",
        failurePolicy={"joinTimeoutSeconds": 12.5},
    )
    full = envs(job, node_ip="127.0.0.3", ray_ports={"node-manager-port": 20065},
                ray_temp_dir="/tmp/r")["ppo-pool-0"]
    assert full["RLARK_NUM_CPUS"] == "2" and full["RLARK_NUM_GPUS"] == "1"
    assert full["RLARK_MEMORY_BYTES"] == str(2 * GiB)
    assert json.loads(full["RLARK_RESOURCES"]) == {"rdma/hca": 1.0}
    assert full["RLARK_PREPARE_SCRIPT"] == "pip list"
    assert full["RLARK_WORKING_DIR"] == "/w" and full["RLARK_NODE_IP"] == "127.0.0.3"
    assert json.loads(full["RLARK_RAY_PORTS"]) == {"node-manager-port": 20065}
    assert full["RLARK_RAY_TEMP_DIR"] == "/tmp/r"
    assert full["RLARK_JOIN_TIMEOUT_SECONDS"] == "12.5"


def test_bootstrap_env_is_read_back_by_the_bootstrap():
    """The controller's environment and the bootstrap's parser agree (one contract)."""
    job = make_job(pool={"resources": {"cpu": 2, "memory": "1Gi", "devices": {"rdma/hca": 1}}})
    ports = port_layout(20064, 3 * UNIT)
    ports.pop("gcs")
    worker = plan_workers(job)[2]
    env = bootstrap_env(job, worker, run_uid="uid1", head_address="127.0.0.2:20000",
                        node_ip="127.0.0.4", ray_ports=ports, ray_temp_dir="/tmp/r")
    cfg = BootstrapConfig.from_env(env)
    assert (cfg.node_rank, cfg.num_nodes, cfg.role, cfg.worker, cfg.run_id) == (
        2, 3, "pool", "ppo-pool-1", "uid1")
    assert (cfg.num_cpus, cfg.memory_bytes, cfg.resources) == (2, GiB, {"rdma/hca": 1.0})
    assert cfg.ray_ports == ports and cfg.node_ip == "127.0.0.4"
    cmd = build_ray_start_command(cfg)
    assert "--address=127.0.0.2:20000" in cmd and "--labels=rlark.io/node-rank=2,rlark.io/role=pool,rlark.io/run=uid1" in cmd
    assert "--dashboard-port=20071" not in cmd and "--node-manager-port=20065" in cmd


# --- local ports and addresses ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [UNIT, 3 * UNIT, MAX_BLOCK_SIZE])
def test_port_layout_every_block(size):
    bases = list(range(PORT_RANGE_START, PORT_RANGE_END - size + 1, UNIT))
    assert bases[0] == PORT_RANGE_START and bases
    for base in bases:
        ports = port_layout(base, size)
        assert all(PORT_RANGE_START <= p < 32768 for p in ports.values()), base
        assert len(set(ports.values())) == len(ports), base
        lo, hi = ports["min-worker-port"], ports["max-worker-port"]
        assert (lo, hi) == (base + 16, base + size - 1)
        assert hi - lo + 1 == worker_ports_of(size)
        single = [p for k, p in ports.items() if k not in ("min-worker-port", "max-worker-port")]
        assert all(base <= p < lo for p in single), base  # none inside the worker port range
    assert list(unit_bases())[-1] + UNIT <= PORT_RANGE_END


def test_port_layout_with_a_set_worker_range():
    """A role's ray.workerPorts is the range's exact size; the block around it is whole units."""
    ports = port_layout(20064, 2 * UNIT, worker_ports=70)
    assert (ports["min-worker-port"], ports["max-worker-port"]) == (20080, 20149)
    with pytest.raises(ValueError, match="do not fit"):
        port_layout(20064, UNIT, worker_ports=49)


@pytest.mark.parametrize("cpus, ports, size, given", [
    (1, 48, 64, 48),       # the floor: one unit, as before sizes followed the role
    (3, 48, 64, 48),
    (4, 64, 128, 112),
    (8, 128, 192, 176),    # the issue's example: 56 actors + a driver fit
    (16, 256, 320, 304),
    (1000, 4096, 4160, 4144),  # the default stops at 4096
])
def test_default_worker_ports_follow_the_cpus(cpus, ports, size, given):
    assert default_worker_ports(cpus) == ports
    assert block_size(ports) == size and size % UNIT == 0
    assert worker_ports_of(size) == given >= ports
    role = make_job(head={"resources": {"cpu": cpus}}).spec.roles[0]
    assert worker_ports(role, host_cpus=2) == ports
    assert local_block_size(role, host_cpus=2) == size
    assert ray_node_view(role, "local", host_cpus=2)["workerPorts"] == given


def test_worker_ports_without_cpu_follow_the_host():
    role = make_job().spec.roles[0]
    assert worker_ports(role, host_cpus=8) == 128 and worker_ports(role, host_cpus=1) == 48


@pytest.mark.parametrize("value, size", [(1, 64), (48, 64), (49, 128), (500, 576), (12720, MAX_BLOCK_SIZE)])
def test_worker_ports_set_on_the_role(value, size):
    role = make_job(head={"resources": {"cpu": 64}, "ray": {"workerPorts": value}}).spec.roles[0]
    assert ray_resources(role).worker_ports == value
    assert worker_ports(role, host_cpus=2) == value  # the role's value wins over the CPUs
    assert local_block_size(role, host_cpus=2) == size
    view = ray_node_view(role, "local", host_cpus=2)
    assert view["workerPorts"] == value and view["workerPortsSet"] is True  # exactly
    # a runtime that pins no ports (Kubernetes): the value is the range, from Ray's own start
    assert ray_node_view(role, "kubernetes")["workerPorts"] == value


def test_worker_ports_on_a_runtime_without_pinned_ports():
    """Kubernetes places no ports: the role's value becomes --min/--max-worker-port from
    Ray's own 10002; without a value Ray's own range stays."""
    job = make_job(pool={"ray": {"workerPorts": 300}})
    env = envs(job)
    assert json.loads(env["ppo-pool-0"]["RLARK_RAY_PORTS"]) == {
        "min-worker-port": 10002, "max-worker-port": 10301}
    assert "RLARK_RAY_PORTS" not in env["ppo-head-0"]
    assert ray_node_view(job.spec.roles[0], "kubernetes")["workerPorts"] == 9998
    # a runtime that pins them (local) keeps its own range
    pinned = envs(job, ray_ports={"min-worker-port": 20016, "max-worker-port": 20319})
    assert json.loads(pinned["ppo-pool-0"]["RLARK_RAY_PORTS"])["min-worker-port"] == 20016


def test_ray_node_summary():
    role = make_job(head={"resources": {"cpu": 8, "memory": "4Gi", "gpu": 1}}).spec.roles[0]
    assert ray_node_summary(ray_node_view(role, "local", host_cpus=2)) == (
        "8 CPUs, 1 GPU, 4 GiB memory, 1.2 GiB object store, 176 worker ports")
    bare = make_job().spec.roles[0]
    assert ray_node_summary(ray_node_view(bare, "local", host_cpus=1)) == (
        "512 MiB object store, 48 worker ports")


def test_taken_port_ranges_follow_each_role():
    job = make_job(head={"resources": {"cpu": 8}}, pool={"ray": {"workerPorts": 500}})
    spec = job_to_dict(job)
    live = [(20000, spec, "head"), (20192, spec, "pool"), (None, spec, "pool"),
            (21000, {"not": "a job"}, "x")]
    assert taken_port_ranges(live, host_cpus=2) == {
        (20000, 20192), (20192, 20768), (21000, 21064)}  # an unreadable spec: one unit


def test_port_layout_names_the_ray_start_flags():
    ports = port_layout(20000)
    assert ports["gcs"] == 20000
    assert {"node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port",
            "min-worker-port", "max-worker-port", "dashboard-port",
            "ray-client-server-port"} <= set(ports)


def test_pick_port_block_lowest_free():
    assert pick_port_block([], UNIT, lambda b: True) == PORT_RANGE_START
    assert pick_port_block([(20000, 20064), (20128, 20192)], UNIT, lambda b: True) == 20064
    assert pick_port_block([(20000, 20064)], UNIT, lambda b: True,
                           exclude=[(20064, 20128)]) == 20128


def test_pick_port_block_of_any_size_overlaps_no_taken_range():
    taken = [(20000, 20192), (20256, 20320)]  # a 3-unit block, a gap of one unit, one unit
    assert pick_port_block(taken, UNIT, lambda b: True) == 20192  # fits the gap
    assert pick_port_block(taken, 2 * UNIT, lambda b: True) == 20320  # does not
    base = pick_port_block(taken, 5 * UNIT, lambda b: True)
    assert all(not (s < base + 5 * UNIT and base < e) for s, e in taken)
    assert list(block_units(20000, 3 * UNIT)) == [20000, 20064, 20128]


def test_pick_port_block_skips_blocks_that_are_not_free():
    asked = []

    def is_free(base):
        asked.append(base)
        return base >= 20192

    assert pick_port_block([(20064, 20128)], UNIT, is_free) == 20192
    assert asked == [20000, 20128, 20192]  # the used block is not even probed


def test_pick_port_block_full():
    everything = [(b, b + UNIT) for b in unit_bases()]
    with pytest.raises(RuntimeError, match="no free block of 64 ports"):
        pick_port_block(everything, UNIT, lambda b: True)
    with pytest.raises(RuntimeError, match="ray.workerPorts"):
        pick_port_block([], MAX_BLOCK_SIZE + UNIT, lambda b: True)
    with pytest.raises(RuntimeError):
        pick_port_block([], UNIT, lambda b: False)


def test_pick_loopback():
    assert LOOPBACK_FIRST.exploded == "127.0.0.2"
    assert pick_loopback([]) == "127.0.0.2"
    assert pick_loopback(["127.0.0.2", "127.0.0.3"]) == "127.0.0.4"
    assert pick_loopback(["127.0.0.2"], exclude=["127.0.0.3"]) == "127.0.0.4"
    assert pick_loopback(["127.0.0.3"]) == "127.0.0.2"


def test_pick_loopback_skips_0_and_255():
    used = [f"127.0.0.{i}" for i in range(2, 255)]
    assert pick_loopback(used) == "127.0.1.1"  # not 127.0.0.255, not 127.0.1.0
    used += [f"127.0.1.{i}" for i in range(1, 255)]
    assert pick_loopback(used) == "127.0.2.1"


# --- local runtime command line ------------------------------------------------------------------------


#: where a server keeps its bootstrap archive (server_archive), as a keeper's command line names it
PYZ = "/home/rl/.rlark/bootstrap/rlark-bootstrap-0123456789abcdef.pyz"


def test_keeper_argv_plain_runs_the_servers_interpreter_isolated():
    keeper = [sys.executable, "-I", "-S", PYZ, "keeper"]
    assert keeper_argv(PYZ, None) == keeper
    assert keeper_argv(PYZ, Mode.process_group) == keeper


def test_keeper_argv_pid_namespace():
    for mode in (Mode.pid_namespace, Mode.user_namespace):
        argv = keeper_argv(PYZ, mode)
        # by its absolute path: never looked up on a PATH a Job could set
        assert os.path.isabs(argv[0]) and argv[0].endswith("/unshare")
        assert {"--pid", "--fork", "--mount-proc", "--ipc"} <= set(argv)
        assert any(a.startswith("--kill-child") for a in argv)
        assert argv[-5:] == [sys.executable, "-I", "-S", PYZ, "keeper"]
    assert "--map-current-user" in keeper_argv(PYZ, Mode.user_namespace)
    assert "--map-current-user" not in keeper_argv(PYZ, Mode.pid_namespace)


def test_keeper_argv_cgroup_joins_before_the_keeper_runs():
    argv = keeper_argv(PYZ, Mode.cgroup, "/sys/fs/cgroup/rlark-workers/abc-0")
    assert argv[:2] == ["/bin/sh", "-c"] and "exec" in argv[2]
    assert argv[3:] == ["/sys/fs/cgroup/rlark-workers/abc-0/cgroup.procs", sys.executable, "-I",
                        "-S", PYZ, "keeper"]
    with pytest.raises(ValueError, match="cgroup directory"):
        keeper_argv(PYZ, Mode.cgroup)


def test_the_servers_archive_is_the_bootstrap_in_its_private_home(rlark_home):
    """Keepers (root, where the server is root) run the archive from the server's own home,
    which no Worker sees; it is this checkout's bootstrap (with this interpreter's bytecode),
    read-only, under a name of its hash."""
    path = server_archive()
    built = archive.local_archive()
    assert path == str(rlark_home / "bootstrap" / built.name)
    with open(path, "rb") as f:
        assert f.read() == built.data
    assert os.stat(path).st_mode & 0o777 == 0o444
    assert os.stat(rlark_home / "bootstrap").st_mode & 0o777 == 0o700
    assert server_archive() == path  # found, not written twice


def _shipped_modules() -> dict[str, str]:
    """Module name -> source text of every module in the bootstrap archive (what ships into a
    Worker; ``__main__`` is the archive's entry)."""
    entries = archive.archive_entries(archive.package_sources())
    return {path[:-3].replace("/", "."): data.decode() for path, data in entries.items()}


def _imports(text: str) -> list[tuple[str, int, bool]]:
    """``(module, line, at module level)`` of every import in ``text``; a relative import fails
    (the modules keep their absolute names inside the archive)."""
    import ast

    tree = ast.parse(text)
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.ClassDef))
              for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) not in nested) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"relative import at line {node.lineno}"
            names = [f"{node.module}.{a.name}" if node.module == "rlark.bootstrap" else node.module
                     for a in node.names]
            out += [(n, node.lineno, id(node) not in nested) for n in names]
    return out


#: archive modules that only ever run under the server's own interpreter, never the image's, with
#: what they may import beyond the archive: the object-storage copier (bootstrap/objectcopy.py;
#: the keeper starts it with the server's Python, RLARK_KEEPER_COPY_PYTHON, copy mode being
#: refused where Workers do not share the server's machine)
SERVER_PYTHON_ONLY = {"rlark.bootstrap.objectcopy": {"boto3", "botocore"}}


def test_bootstrap_imports_only_the_standard_library_ray_and_itself():
    """The archive runs in every Worker's image (ARCHITECTURE.md's bootstrap contract), where
    RLark itself is not installed: anything but the standard library, ray and the archive's own
    modules breaks it there."""
    modules = _shipped_modules()
    assert {"__main__", "rlark.bootstrap.worker", "rlark.bootstrap.keeper"} <= set(modules)
    outside = sorted((m, name, line) for m, text in modules.items()
                     for name, line, _ in _imports(text)
                     if name not in modules and name.split(".")[0] != "ray"
                     and name.split(".")[0] not in sys.stdlib_module_names
                     and not (m in SERVER_PYTHON_ONLY and name.split(".")[0] in SERVER_PYTHON_ONLY[m]))
    assert not outside, f"the bootstrap imports what a Worker's image may not have: {outside}"
    seen = {name for text in modules.values() for name, _, _ in _imports(text)}
    assert {"json", "subprocess", "rlark.bootstrap.config"} <= seen  # the walk sees the imports


def test_the_keeper_imports_only_the_standard_library_and_at_the_top():
    """The keeper runs as ``python -I -S`` and must import nothing the workload could change:
    the standard library and the archive's own modules only, and in every module it loads each
    import at module level (before any workload runs)."""
    modules = _shipped_modules()
    todo, closure = ["rlark.bootstrap.keeper"], set()
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        for dep, line, top in _imports(modules[name]):
            assert top, f"{name} imports {dep} inside a function (line {line})"
            if dep in modules:
                todo.append(dep)
            else:
                assert dep.split(".")[0] in sys.stdlib_module_names, f"{name} imports {dep}"
    assert {"rlark.bootstrap.sandbox", "rlark.bootstrap.relay", "rlark.bootstrap.lifecycle"} <= closure
    assert "rlark.bootstrap.worker" not in closure and "rlark.bootstrap.facts" not in closure


def test_python_for(tmp_path):
    assert python_for(None) == sys.executable
    assert python_for("") == sys.executable
    assert python_for("/usr/bin/python3") == "/usr/bin/python3"
    assert python_for(str(tmp_path)) == str(tmp_path / "bin" / "python")  # a virtualenv dir


# --- run record ----------------------------------------------------------------------------------------

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # the store hands out UTC times


def record_inputs():
    job = make_job(
        head={"image": "docker.io/rlinf/rlinf:0.3.0",
              "mounts": [{"name": "data", "type": "hostPath", "source": "/srv/data",
                          "mountPath": "/data", "readOnly": True}]},
        pool={"image": "docker.io/rlinf/rlinf@sha256:" + "ab" * 32,
              "mounts": [{"name": "ckpt", "type": "pvc", "source": "ckpt-claim", "mountPath": "/ckpt"}]},
        rlinf={"configDir": "config", "configName": "ppo", "overrides": ["runner.max_epochs=1"]},
        workingDir="/w",
    )
    run = SimpleNamespace(
        spec=job_to_dict(job), number=3, uid="abc123", cause="Restart", runtime="local",
        phase="Succeeded", reason="Completed", message="the run script exited with code 0",
        exit_code=0, created_at=T0, started_at=T0 + timedelta(seconds=1),
        running_at=T0 + timedelta(seconds=5), finished_at=T0 + timedelta(seconds=61.5),
    )

    def worker(rank, name, role, joined, facts, **kw):
        base = dict(
            name=name, role=role, node_rank=rank, is_head=rank == 0, host="box", ip=None,
            node_ip=f"127.0.0.{rank + 2}", ray_node_id=f"{rank}" * 40,
            lifecycle={"joined": True} if joined else {}, phase="Exited", reason="",
            exit_code=0, started_at=T0, finished_at=T0 + timedelta(seconds=60),
            log_path=f"/logs/ppo/3/{name}.log", facts=facts,
        )
        return SimpleNamespace(**{**base, **kw})

    facts = {"python": "3.12.1", "ray": "2.60.0", "rlinf": None, "torch": "2.5.0",
             "ray_resources": {"num_cpus": 1, "num_gpus": 0, "memory_bytes": GiB,
                               "object_store_bytes": 300 * MiB, "custom": {},
                               "worker_ports": [20016, 20063]}}
    workers = [  # deliberately not in rank order
        worker(2, "ppo-pool-1", "pool", False, None, phase="Failed", reason="PrepareFailed", exit_code=80),
        worker(0, "ppo-head-0", "head", True, dict(facts), ip="10.0.0.1", phase="Succeeded"),
        worker(1, "ppo-pool-0", "pool", True, {**facts, "torch": "2.6.0"}),
    ]
    return SimpleNamespace(name="ppo"), run, workers


def test_build_record():
    job, run, workers = record_inputs()
    rec = build_record(job, run, workers, logs_root="/logs")
    assert rec["recordVersion"] == RECORD_VERSION
    assert (rec["job"], rec["run"], rec["runUid"], rec["cause"], rec["runtime"]) == (
        "ppo", 3, "abc123", "Restart", "local")
    assert rec["result"] == {"phase": "Succeeded", "reason": "Completed",
                             "message": "the run script exited with code 0", "exitCode": 0}
    assert rec["workers"]["expected"] == 3 and rec["workers"]["actual"] == 2
    items = rec["workers"]["items"]
    assert [w["nodeRank"] for w in items] == [0, 1, 2]
    assert [w["name"] for w in items] == ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"]
    assert [w["isHead"] for w in items] == [True, False, False]
    assert [w["joined"] for w in items] == [True, True, False]
    assert items[0]["ip"] == "10.0.0.1" and items[1]["ip"] == "127.0.0.3"  # falls back to node IP
    assert items[2]["reason"] == "PrepareFailed" and items[1]["reason"] is None
    assert items[2]["facts"] == {}
    # each Worker's Ray: its version and what its node was started with
    assert [w["rayVersion"] for w in items] == ["2.60.0", "2.60.0", None]
    assert items[0]["rayNode"] == {"numCpus": 1, "numGpus": 0, "memoryBytes": GiB,
                                   "objectStoreBytes": 300 * MiB, "workerPorts": [20016, 20063]}
    assert items[2]["rayNode"] is None
    assert rec["images"] == {"head": "docker.io/rlinf/rlinf:0.3.0",
                             "pool": "docker.io/rlinf/rlinf@sha256:" + "ab" * 32}
    assert rec["rlinf"] == {"configDir": "config", "configName": "ppo",
                            "overrides": ["runner.max_epochs=1"]}
    assert rec["headRole"] == "head" and rec["workingDir"] == "/w"
    assert rec["mounts"] == [
        {"role": "head", "name": "data", "type": "hostPath", "source": "/srv/data",
         "mountPath": "/data", "readOnly": True},
        {"role": "pool", "name": "ckpt", "type": "pvc", "source": "ckpt-claim",
         "mountPath": "/ckpt", "readOnly": False},
    ]
    assert rec["versions"] == {"python": ["3.12.1"], "ray": ["2.60.0"], "rlinf": [],
                               "torch": ["2.5.0", "2.6.0"], "cuda": [], "nvidiaDriver": [],
                               "nccl": [], "deviceLibs": {}, "packageLists": []}
    # two Workers ran different torch versions: the versions check fails and names them
    versions = next(c for c in rec["checks"]["items"] if c["id"] == "versions")
    assert versions["status"] == "fail"
    assert versions["evidence"] == ["Workers run 2 different torch versions: 2.5.0 on rank 0; "
                                    "2.6.0 on rank 1", "no versions reported by rank 2 (ppo-pool-1)"]
    assert rec["times"]["durationSeconds"] == 60.5
    assert rec["times"]["created"] == "2026-01-02T03:04:05+00:00"
    assert items[0]["finishedAt"] == "2026-01-02T03:05:05+00:00"
    assert rec["logs"] == {"root": "/logs", "workers": {w.name: w.log_path for w in workers}}
    assert rec["spec"] == run.spec


def test_build_record_of_a_run_that_never_started():
    job, run, workers = record_inputs()
    run.started_at = run.running_at = run.finished_at = None
    for w in workers:
        w.lifecycle, w.facts = None, None
    rec = build_record(job, run, workers)
    assert rec["times"]["durationSeconds"] is None and rec["times"]["started"] is None
    assert rec["workers"]["actual"] == 0 and rec["workers"]["expected"] == 3
    assert {k: v for k, v in rec["versions"].items() if v} == {}
    assert rec["logs"]["root"] is None
    workers = next(c for c in rec["checks"]["items"] if c["id"] == "workers")
    assert workers["status"] == "fail" and workers["evidence"] == [
        "0 of 3 expected Workers joined; missing rank 0 (ppo-head-0), rank 1 (ppo-pool-0), "
        "rank 2 (ppo-pool-1)"]


def test_render_json_and_yaml_round_trip():
    rec = build_record(*record_inputs())
    assert json.loads(render(rec, "json")) == rec
    assert yaml.safe_load(render(rec, "yaml")) == rec


@pytest.mark.parametrize("fmt", ["md", "markdown"])
def test_render_markdown(fmt):
    rec = build_record(*record_inputs())
    md = render(rec, fmt)
    assert md.startswith("# Run record: ppo run 3\n")
    assert "**Succeeded** (Completed)" in md
    assert "2 joined of 3 expected" in md
    assert "torch 2.5.0/2.6.0" in md and "rlinf -" in md
    assert "- head: `docker.io/rlinf/rlinf:0.3.0`" in md
    assert '"configName": "ppo"' in md
    workers = md.split("## Workers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in workers.splitlines() if line.startswith("| ") and "ppo-" in line]
    assert [r.split(" | ")[1] for r in rows] == ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"]
    assert "| 2 | ppo-pool-1 | pool |" in md and "| Failed | 80 |" in md
    assert "| 2.60.0 | 300 MiB | 20016-20063 (48) |" in md
    assert "## Mounts" in md and "| pool | ckpt | pvc | ckpt-claim | /ckpt | False |" in md


def test_render_markdown_without_mounts():
    job, run, workers = record_inputs()
    for role in run.spec["spec"]["roles"]:
        role["mounts"] = []
    assert "## Mounts" not in render(build_record(job, run, workers), "md")


@pytest.mark.parametrize("fmt", ["xml", "JSON", ""])
def test_render_unknown_format(fmt):
    with pytest.raises(ValueError, match="unknown record format"):
        render(build_record(*record_inputs()), fmt)
