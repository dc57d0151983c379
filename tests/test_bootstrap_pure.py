"""The pure parts of the Worker bootstrap (config, ``ray start`` argv, rank check) and the
controller's lifecycle-line parser. No process, no Ray."""

from __future__ import annotations

import json
import socket

import pytest

from rlark.bootstrap import cgroups
from rlark.bootstrap.barrier import check_ranks
from rlark.bootstrap.config import BootstrapConfig, BootstrapError
from rlark.bootstrap.lifecycle import EVENT_PREFIX, lifecycle_line
from rlark.bootstrap.ray_node import (
    HEAD_PORT_FLAGS,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_RUN,
    WORKER_PORT_FLAGS,
    build_ray_start_command,
)
from rlark.bootstrap.relay import Channel
from rlark.bootstrap.scripts import script_argv
from rlark.controller.lifecycle import parse_lifecycle

REQUIRED = {
    "RLINF_NODE_RANK": "1",
    "RLARK_NUM_NODES": "3",
    "RLARK_HEAD_ADDRESS": "127.0.0.2:20000",
}

# --- BootstrapConfig.from_env ---------------------------------------------------------------------


def test_from_env_minimal_defaults():
    cfg = BootstrapConfig.from_env(dict(REQUIRED))
    assert (cfg.node_rank, cfg.num_nodes) == (1, 3)
    assert (cfg.head_host, cfg.head_port) == ("127.0.0.2", 20000)
    assert cfg.is_head is False
    assert cfg.worker == socket.gethostname()
    assert cfg.role == "" and cfg.run_id == "" and cfg.node_ip is None
    assert cfg.ray_ports == {} and cfg.resources == {}
    assert cfg.num_cpus is None and cfg.num_gpus is None and cfg.memory_bytes is None
    assert (cfg.join_timeout, cfg.prepare_timeout) == (300.0, 1800.0)
    assert cfg.include_dashboard is False and cfg.ray_temp_dir is None


def test_from_env_full():
    cfg = BootstrapConfig.from_env(
        {
            **REQUIRED,
            "RLINF_NODE_RANK": "0",
            "RLARK_ROLE": "head",
            "RLARK_WORKER": "ppo-head-0",
            "RLARK_RUN_ID": "abc123",
            "RLARK_NODE_IP": "127.0.0.2",
            "RLARK_RAY_PORTS": json.dumps({"node-manager-port": 20001, "dashboard-port": 20007}),
            "RLARK_NUM_CPUS": "2",
            "RLARK_NUM_GPUS": "1",
            "RLARK_MEMORY_BYTES": "1073741824",
            "RLARK_OBJECT_STORE_BYTES": "268435456",
            "RLARK_RESOURCES": json.dumps({"rdma/hca": 1}),
            "RLARK_RAY_TEMP_DIR": "/tmp/r",
            "RLARK_PREPARE_SCRIPT": "echo prep",
            "RLARK_RUN_SCRIPT": "echo run",
            "RLARK_WORKING_DIR": "/w",
            "RLARK_JOIN_TIMEOUT_SECONDS": "12.5",
            "RLARK_PREPARE_TIMEOUT_SECONDS": "60",
            "RLARK_RAY": "/opt/ray",
            "RLARK_RAY_DASHBOARD": "1",
        }
    )
    assert cfg.is_head and cfg.role == "head" and cfg.worker == "ppo-head-0"
    assert cfg.run_id == "abc123" and cfg.node_ip == "127.0.0.2"
    assert cfg.ray_ports == {"node-manager-port": 20001, "dashboard-port": 20007}
    assert (cfg.num_cpus, cfg.num_gpus) == (2, 1)
    assert (cfg.memory_bytes, cfg.object_store_bytes) == (2**30, 2**28)
    assert cfg.resources == {"rdma/hca": 1.0}
    assert cfg.ray_temp_dir == "/tmp/r" and cfg.working_dir == "/w"
    assert (cfg.prepare_script, cfg.run_script) == ("echo prep", "echo run")
    assert (cfg.join_timeout, cfg.prepare_timeout) == (12.5, 60.0)
    assert cfg.ray_executable == "/opt/ray" and cfg.include_dashboard is True


def _bad_config(env: dict) -> BootstrapError:
    with pytest.raises(BootstrapError) as info:
        BootstrapConfig.from_env(env)
    assert info.value.reason == "BadConfig"
    return info.value


@pytest.mark.parametrize("name", sorted(REQUIRED))
@pytest.mark.parametrize("how", ["absent", "empty"])
def test_from_env_required(name, how):
    env = dict(REQUIRED)
    if how == "absent":
        del env[name]
    else:
        env[name] = ""
    err = _bad_config(env)
    assert name in err.message and "not set" in err.message


@pytest.mark.parametrize(
    "name, value",
    [
        ("RLINF_NODE_RANK", "one"),
        ("RLINF_NODE_RANK", "1.0"),
        ("RLARK_NUM_NODES", "three"),
        ("RLARK_HEAD_ADDRESS", "head-without-port"),
        ("RLARK_NUM_CPUS", "2.5"),
        ("RLARK_NUM_GPUS", "x"),
        ("RLARK_MEMORY_BYTES", "8Gi"),
        ("RLARK_OBJECT_STORE_BYTES", "lots"),
        ("RLARK_RAY_PORTS", "{not json"),
        ("RLARK_RAY_PORTS", "[20001]"),
        ("RLARK_RESOURCES", '"rdma"'),
    ],
    ids=lambda v: v if len(v) < 20 else v[:20],
)
def test_from_env_bad_value_names_the_variable(name, value):
    err = _bad_config({**REQUIRED, name: value})
    assert name in err.message


@pytest.mark.parametrize(
    "name, value",
    [
        ("RLARK_RAY_PORTS", '{"node-manager-port": "x"}'),
        ("RLARK_RESOURCES", '{"rdma/hca": "one"}'),
        ("RLARK_JOIN_TIMEOUT_SECONDS", "soon"),
        ("RLARK_PREPARE_TIMEOUT_SECONDS", "1h"),
        ("RLARK_HEAD_ADDRESS", "head:port"),
    ],
    ids=["ports-value", "resources-value", "join-timeout", "prepare-timeout", "head-port"],
)
def test_from_env_bad_value_inside_json_or_float(name, value):
    err = _bad_config({**REQUIRED, name: value})
    assert name in err.message


@pytest.mark.parametrize(
    "rank, nodes",
    [("3", "3"), ("-1", "3"), ("0", "0"), ("5", "2")],
    ids=["rank-equals-n", "negative", "zero-nodes", "rank-above"],
)
def test_from_env_rank_outside_range(rank, nodes):
    err = _bad_config({**REQUIRED, "RLINF_NODE_RANK": rank, "RLARK_NUM_NODES": nodes})
    assert "RLINF_NODE_RANK" in err.message and rank in err.message


def test_from_env_last_rank_is_accepted():
    cfg = BootstrapConfig.from_env({**REQUIRED, "RLINF_NODE_RANK": "2"})
    assert cfg.node_rank == 2 and not cfg.is_head


# --- ray start argv -----------------------------------------------------------------------------

ALL_PORTS = {flag: 20001 + i for i, flag in enumerate(WORKER_PORT_FLAGS + HEAD_PORT_FLAGS)}


def cfg(rank: int = 0, **kw) -> BootstrapConfig:
    base = dict(
        node_rank=rank,
        num_nodes=3,
        role="head" if rank == 0 else "pool",
        worker=f"w{rank}",
        run_id="run1",
        head_address="127.0.0.2:20000",
    )
    return BootstrapConfig(**{**base, **kw})


def flags(cmd: list[str]) -> dict[str, str | None]:
    out = {}
    for arg in cmd[2:]:
        key, _, value = arg.partition("=")
        out[key] = value if _ else None
    return out


def test_head_command():
    cmd = build_ray_start_command(cfg(0, node_ip="127.0.0.2", ray_ports=ALL_PORTS), ray="/venv/bin/ray")
    assert cmd[:2] == ["/venv/bin/ray", "start"]
    f = flags(cmd)
    assert "--head" in f and "--block" in f and "--disable-usage-stats" in f
    assert f["--port"] == "20000"
    assert "--address" not in f
    assert f["--include-dashboard"] == "false"
    assert f["--node-ip-address"] == "127.0.0.2"
    for flag, port in ALL_PORTS.items():
        assert f[f"--{flag}"] == str(port)
    assert f["--labels"] == f"{LABEL_RANK}=0,{LABEL_ROLE}=head,{LABEL_RUN}=run1"


def test_worker_command():
    cmd = build_ray_start_command(cfg(2, ray_ports=ALL_PORTS))
    f = flags(cmd)
    assert cmd[:2] == ["ray", "start"]
    assert "--block" in f
    assert f["--address"] == "127.0.0.2:20000"
    assert "--head" not in f and "--port" not in f and "--include-dashboard" not in f
    assert "--node-ip-address" not in f
    for flag in WORKER_PORT_FLAGS:
        assert f[f"--{flag}"] == str(ALL_PORTS[flag])
    for flag in HEAD_PORT_FLAGS:
        assert f"--{flag}" not in f
    assert f["--labels"] == f"{LABEL_RANK}=2,{LABEL_ROLE}=pool,{LABEL_RUN}=run1"


def test_dashboard_on_head_when_asked():
    assert "--include-dashboard=true" in build_ray_start_command(cfg(0, include_dashboard=True))


@pytest.mark.parametrize("rank", [0, 1])
def test_only_given_ports_are_pinned(rank):
    cmd = build_ray_start_command(cfg(rank, ray_ports={"node-manager-port": 20001}))
    port_args = [a for a in cmd if a.split("=")[0].endswith("-port")]
    expected = ["--node-manager-port=20001"] + (["--port=20000"] if rank == 0 else [])
    assert sorted(port_args) == sorted(expected)


def test_resources_and_temp_dir():
    cmd = build_ray_start_command(
        cfg(1, num_cpus=2, num_gpus=1, memory_bytes=2**31, object_store_bytes=2**28,
            resources={"rdma/hca": 1.0, "a": 2.0}, ray_temp_dir="/tmp/rlark/x")
    )
    f = flags(cmd)
    assert f["--num-cpus"] == "2" and f["--num-gpus"] == "1"
    assert f["--memory"] == str(2**31) and f["--object-store-memory"] == str(2**28)
    assert json.loads(f["--resources"]) == {"rdma/hca": 1.0, "a": 2.0}
    assert f["--temp-dir"] == "/tmp/rlark/x"


def test_unset_resources_are_not_passed():
    f = flags(build_ray_start_command(cfg(1, role="", run_id="")))
    for flag in ("--num-cpus", "--num-gpus", "--memory", "--object-store-memory",
                 "--resources", "--temp-dir"):
        assert flag not in f
    assert f["--labels"] == f"{LABEL_RANK}=1"  # rank label always, role/run only when known


@pytest.mark.parametrize("rank", [0, 1])
def test_never_stop(rank):
    cmd = build_ray_start_command(cfg(rank, ray_ports=ALL_PORTS, num_cpus=1, ray_temp_dir="/t"))
    assert not any("stop" in a for a in cmd), cmd


# --- check_ranks ----------------------------------------------------------------------------------


def node(rank, run="run1", alive=True, addr=None, node_id=None):
    labels = {LABEL_ROLE: "pool"}
    if rank is not None:
        labels[LABEL_RANK] = str(rank)
    if run is not None:
        labels[LABEL_RUN] = run
    return {
        "Alive": alive,
        "NodeID": node_id or f"{rank}".ljust(16, "f"),
        "NodeManagerAddress": addr or f"127.0.0.{2 + (rank if isinstance(rank, int) else 50)}",
        "Labels": labels,
    }


def test_check_ranks_all_present():
    nodes = [node(2), node(0), node(1)]
    by_rank, missing, problems = check_ranks(nodes, "run1", 3)
    assert sorted(by_rank) == [0, 1, 2] and by_rank[2] is nodes[0]
    assert missing == [] and problems == []


def test_check_ranks_missing_listed():
    by_rank, missing, problems = check_ranks([node(0), node(2)], "run1", 4)
    assert sorted(by_rank) == [0, 2] and missing == [1, 3] and problems == []


def test_check_ranks_duplicate_rank():
    _, missing, problems = check_ranks(
        [node(0), node(1, addr="10.0.0.1"), node(1, addr="10.0.0.2")], "run1", 2
    )
    assert missing == []
    assert len(problems) == 1
    assert "rank 1" in problems[0] and "10.0.0.1" in problems[0] and "10.0.0.2" in problems[0]


@pytest.mark.parametrize("rank", [3, -1, 99])
def test_check_ranks_outside_range(rank):
    by_rank, missing, problems = check_ranks([node(0), node(1), node(2), node(rank)], "run1", 3)
    assert sorted(by_rank) == [0, 1, 2] and missing == []
    assert problems == [f"rank {rank} is outside 0..2"]


def test_check_ranks_dead_node_of_this_run():
    by_rank, missing, problems = check_ranks([node(0), node(1, alive=False)], "run1", 2)
    assert missing == [1] and sorted(by_rank) == [0]
    assert problems == []


def test_check_ranks_a_rank_started_again_beside_its_dead_entry():
    """A Worker whose first `ray start` failed after its node registered starts it again: the
    table keeps the dead entry, and the new node carries the rank (no "two nodes" problem)."""
    by_rank, missing, problems = check_ranks(
        [node(0), node(1, addr="10.0.0.1", alive=False), node(1, addr="10.0.0.2")], "run1", 2)
    assert missing == [] and problems == []
    assert by_rank[1]["NodeManagerAddress"] == "10.0.0.2"


def test_check_ranks_ignores_other_runs():
    nodes = [
        node(0),
        node(1, run="other"),  # a leftover of an earlier Run with the same ranks
        node(1, run="other", alive=False),
        node(7, run="other"),
        node(0, run=None),  # a node without RLark labels at all
    ]
    by_rank, missing, problems = check_ranks(nodes, "run1", 2)
    assert list(by_rank) == [0] and by_rank[0] is nodes[0]
    assert missing == [1] and problems == []


@pytest.mark.parametrize("raw", ["x", None, "1.5"], ids=["text", "absent", "fraction"])
def test_check_ranks_bad_label_value(raw):
    n = node(1)
    if raw is None:
        del n["Labels"][LABEL_RANK]
    else:
        n["Labels"][LABEL_RANK] = raw
    by_rank, missing, problems = check_ranks([node(0), n], "run1", 2)
    assert missing == [1] and len(problems) == 1
    assert repr(raw) in problems[0] and n["NodeID"][:12] in problems[0]


# --- lifecycle lines --------------------------------------------------------------------------------


def line(event: str, **data) -> bytes:
    return (EVENT_PREFIX + json.dumps({"event": event, **data}) + "\n").encode()


def test_the_line_builder_writes_what_the_server_reads():
    """``lifecycle_line`` is the one builder of a lifecycle line: the keeper writes with it, and
    so may anything that stands in for a Worker (kwok Pods in the Kubernetes tests)."""
    text = lifecycle_line("exit", ts=12.5, code=3, tok="t0k")
    assert text == 'RLARK_EVENT {"ts": 12.5, "event": "exit", "code": 3, "tok": "t0k"}'
    events, _ = parse_lifecycle((text + "\n").encode(), 0, token="t0k")
    assert events == [{"ts": 12.5, "event": "exit", "code": 3}]  # the token checked, then dropped
    assert "\n" not in lifecycle_line("facts", note="two\nlines")  # one line, whatever the data
    assert json.loads(lifecycle_line("facts", when=object)[len(EVENT_PREFIX):])["when"]  # str()
    out = bytearray()
    Channel(out.extend).emit("exit", code=3)  # the keeper's own lines are the builder's
    (written,), _ = parse_lifecycle(bytes(out), 0)
    assert written["event"] == "exit" and written["code"] == 3 and written["ts"] > 1.7e9


def test_parse_complete_lines_skipping_other_output():
    chunk = (
        b"starting...\n"
        + line("facts", node_rank=1)
        + b"some log RLARK_EVENT {\"event\": \"fake\"}\n"  # prefix not at the start of the line
        + b"RLARK_EVENT {broken json\n"
        + b"RLARK_EVENT [1, 2]\n"  # not an object
        + b'RLARK_EVENT {"no_event": 1}\n'
        + line("phase", phase="Preparing")
    )
    events, offset = parse_lifecycle(chunk, 1000)
    assert events == [{"event": "facts", "node_rank": 1}, {"event": "phase", "phase": "Preparing"}]
    assert offset == 1000 + len(chunk)


def test_partial_trailing_line_is_kept_for_later():
    first = line("facts", node_rank=0)
    partial = line("running", pid=42)
    chunk = first + partial[:10]
    events, offset = parse_lifecycle(chunk, 500)
    assert events == [{"event": "facts", "node_rank": 0}]
    assert offset == 500 + len(first)
    # next read starts at the new offset and sees the whole line
    events, offset = parse_lifecycle(partial, offset)
    assert events == [{"event": "running", "pid": 42}]
    assert offset == 500 + len(first) + len(partial)


def test_no_newline_means_nothing_yet():
    assert parse_lifecycle(line("exit", code=0)[:-1], 77) == ([], 77)
    assert parse_lifecycle(b"", 77) == ([], 77)


def test_any_split_point_gives_the_same_events():
    log = (
        line("facts", node_rank=0)
        + b"noise without newline then newline\n"
        + line("phase", phase="Joining")
        + b"RLARK_EVENT {oops\n"
        + line("run_finished", exit_code=0)
    )
    whole, end = parse_lifecycle(log, 0)
    assert len(whole) == 3 and end == len(log)
    for cut in range(len(log) + 1):
        first, off = parse_lifecycle(log[:cut], 0)
        rest, off2 = parse_lifecycle(log[off:], off)
        assert first + rest == whole, cut
        assert off2 == len(log), cut


# --- how scripts run: errexit and pipefail ------------------------------------------------------


@pytest.mark.parametrize("script, code, out", [
    # the example: a command that exits 3, then `echo saving logs`
    ("echo before; sh -c 'exit 3'; echo saving logs", 3, "before\n"),
    ("false | cat; echo after a failed pipeline", 1, ""),  # pipefail
    ("echo one; echo two", 0, "one\ntwo\n"),
    ("if false; then echo no; fi; false || echo handled", 0, "handled\n"),  # tested commands pass
])
def test_scripts_stop_at_the_first_failing_command(script, code, out):
    import subprocess

    assert script_argv(script) == ["bash", "-e", "-o", "pipefail", "-c", script]
    done = subprocess.run(script_argv(script), capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (code, out)


# --- the memory cgroup's OOM-kill count (bootstrap/cgroups.py) --------------------------------------

#: what a Worker's container on the test bed's real node (containerd, runc, cgroup v1, no cgroup
#: namespace) showed: its /proc/self/cgroup and the cgroup lines of its /proc/self/mountinfo
POD = "/rlark-testbed-19480/kubepods/pod42a5f902-1f0f-4d1e-ada0-21beda5399ba/b86c2f64c3e41a24c8f05b85f218ba02eb57c00ea8243b2f00f09f3a62d67d8f"
POD_CGROUP = f"""\
9:name=systemd:{POD}
8:pids:{POD}
4:memory:{POD}
1:cpu:{POD}
0::{POD}
"""
POD_MOUNTINFO = f"""\
147 146 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
148 147 0:29 {POD} /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
151 147 0:32 {POD} /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
155 147 0:36 {POD} /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
156 147 0:37 {POD} /sys/fs/cgroup/systemd ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,name=systemd
"""
#: this machine's server side (cgroup v1 memory hierarchy mounted whole, a hybrid v2 one beside it)
HOST_CGROUP = "4:memory:/process_api/960d9926084e14aa23b6340e03d9c42f\n1:cpu:/\n0::/\n"
HOST_MOUNTINFO = """\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
#: a cgroup v2 container with its own cgroup namespace (containerd's default on v2)
V2_CGROUP = "0::/\n"
V2_MOUNTINFO = "1200 1190 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n"


@pytest.mark.parametrize("proc_cgroup, mountinfo, found", [
    (POD_CGROUP, POD_MOUNTINFO, [(1, "/sys/fs/cgroup/memory")]),  # the container's own cgroup
    (HOST_CGROUP, HOST_MOUNTINFO, [(1, "/sys/fs/cgroup/memory/process_api/960d9926084e14aa23b6340e03d9c42f"),
                                   (2, "/sys/fs/cgroup/unified")]),
    (V2_CGROUP, V2_MOUNTINFO, [(2, "/sys/fs/cgroup")]),
    ("4:memory:/elsewhere\n", POD_MOUNTINFO, []),  # a cgroup the mount does not show
    (POD_CGROUP, "", []),
])
def test_the_memory_cgroup_is_found_from_proc_self(proc_cgroup, mountinfo, found):
    mounts = cgroups.parse_mountinfo(mountinfo)
    assert cgroups.memory_cgroup_dirs(mounts, cgroups.parse_proc_cgroup(proc_cgroup)) == found


@pytest.mark.parametrize("text, count", [
    ("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", 0),  # cgroup v1 memory.oom_control
    ("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", 1),  # ... after the run script's kill
    ("oom_kill_disable 0\nunder_oom 0\n", None),  # Linux before 4.13: no count
    ("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", 2),  # v2 memory.events
    ("", None),
    ("oom_kill many\n", None),
])
def test_the_oom_kill_count_of_the_kernels_files(text, count):
    assert cgroups.parse_oom_kills(text) == count


@pytest.mark.parametrize("text, limit", [
    ("1073741824\n", 1 << 30),  # a Pod's resources.memory 1Gi (v1 memory.limit_in_bytes, v2 memory.max)
    ("9223372036854771712\n", None),  # v1 with no limit
    ("max\n", None),  # v2 with no limit
    ("", None),
])
def test_the_memory_limit_of_the_kernels_files(text, limit):
    assert cgroups.parse_memory_limit(text) == limit


def test_this_process_s_memory_cgroup_is_the_one_proc_self_names():
    """The thin reader on this machine: the directory /proc/self/cgroup and mountinfo name, its
    count readable (again and again, from the descriptor opened once)."""
    cg = cgroups.find_memory_cgroup()
    if cg is None:
        pytest.skip("no memory cgroup with an OOM-kill count on this machine")
    try:
        with open("/proc/self/cgroup") as f:
            own = cgroups.parse_proc_cgroup(f.read())
        with open("/proc/self/mountinfo") as f:
            dirs = cgroups.memory_cgroup_dirs(cgroups.parse_mountinfo(f.read()), own)
        assert (cg.version, cg.path) in dirs
        count = cg.oom_kills()
        assert isinstance(count, int) and cg.oom_kills() is not None and count >= 0
    finally:
        cg.close()
