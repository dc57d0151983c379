"""RLark Worker bootstrap: the one program every Worker runs, on every runtime.

It imports nothing but the standard library and (on the head, lazily) ``ray``, so it can be
shipped into any image as this single file and run with ``python worker.py``.

Contract (ARCHITECTURE.md, "Worker bootstrap contract"):

* Inputs come only from environment variables (``RLARK_*`` and ``RLINF_NODE_RANK``); see
  :class:`BootstrapConfig`. Nothing calls back to the RLark server.
* ``RLINF_NODE_RANK`` is exported before ``ray start`` (RLinf reads it from the raylet's
  environment, so it must be there when the raylet starts); each Ray node is also labelled with
  ``rlark.io/node-rank``, ``rlark.io/role`` and ``rlark.io/run`` so the head can verify the mapping.
* Order: facts -> prepare script (bounded) -> ``ray start`` -> head: join barrier on one Ray
  connection (polling every 0.1 s, naming missing ranks), rank check (0..N-1 exactly once),
  ``RAY_ADDRESS`` and the run script, whose exit code is the head's exit code; other Workers:
  wait for the head, ``ray start --block``, exit non-zero when their node fails. Every Worker's
  wait for the cluster ends ``RLARK_JOIN_TIMEOUT_SECONDS`` after its own start (prepare script
  included); RLark enforces the same deadline from the Run's launch for every rank.
* Prepare and run scripts run with ``bash -e -o pipefail -c`` (:func:`script_argv`): the first
  failing command ends the script with its exit code.
* This program runs under the Worker's keeper (``keeper.py``), the first process of every
  Worker: progress and facts are reported to it as JSON lines (``RLARK_REPORT_FD``), and it
  writes them, checked, as the Worker's lifecycle lines (``RLARK_EVENT {json}``), so every
  runtime learns them from the Worker's log. The keeper starts the head's run script itself
  when this program reports ``start_run`` (the join barrier passed) and tells it when the run
  script ended (``RLARK_CONTROL_FD``).

Fail closed: on any failure the bootstrap reports a reason and exits non-zero; it never goes on.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO

EVENT_PREFIX = "RLARK_EVENT "
LABEL_RANK = "rlark.io/node-rank"
LABEL_ROLE = "rlark.io/role"
LABEL_RUN = "rlark.io/run"
BARRIER_POLL_SECONDS = 0.1  # contract: at most 0.5 s; 0.1 s keeps join detection prompt
NODE_CHECK_SECONDS = 2.0  # while the run script runs, the head checks every rank's node this often
RAY_START_TIMEOUT = 180.0  # the head's own Ray must be up (GCS, raylet, driver) within this
HEAD_POLL_SECONDS = 0.1
JOIN_SLACK_SECONDS = 5.0  # see Bootstrap.join_deadline
#: after the head's GCS stops answering during the join barrier: how long to wait for the head's
#: own `ray start` to exit, which makes it a failed start (RayStartFailed) rather than HeadLost
RAY_EXIT_WAIT_SECONDS = 5.0

# Exit codes of the bootstrap itself (the head's run script exit code passes through unchanged;
# the lifecycle line names the reason, so these only need to be distinct and non-zero).
EXIT_PREPARE_FAILED = 80
EXIT_PREPARE_TIMEOUT = 81
EXIT_RAY_START_FAILED = 82
EXIT_HEAD_UNREACHABLE = 83
EXIT_JOIN_TIMEOUT = 84
EXIT_RANK_MISMATCH = 85
EXIT_NODE_LOST = 86
EXIT_BAD_CONFIG = 87
EXIT_STOPPED = 143

#: seconds one probe (a git or nvidia-smi call) may take, and all of them together on one Worker;
#: RLARK_FACTS_BUDGET_SECONDS changes the total. A probe that runs out of time is recorded as
#: absent with the reason, like a missing tool: a fact never fails the Run.
FACT_PROBE_SECONDS = 5.0
FACT_BUDGET_SECONDS = 20.0
#: the most of an uncommitted diff a Worker reports (bytes; its sha256 covers all of it)
DIFF_CAP_BYTES = 64 * 1024
#: the most of the Hydra files (all of them together) and of one Hydra output file a Worker
#: reports as text; every file's sha256 is reported whatever its size
CONFIG_TEXT_CAP_BYTES = 256 * 1024
CONFIG_MAX_FILES = 200
#: how deep and how wide the head looks for Hydra output directories after the run script
HYDRA_SEARCH_DEPTH = 5
HYDRA_SEARCH_ENTRIES = 20000
#: pip wheels that carry device libraries (NCCL, cuDNN, cuBLAS, the CUDA runtime...):
#: distribution names starting with these
DEVICE_LIB_PREFIXES = ("nvidia-", "cuda-", "pytorch-triton", "triton")

# Ray ports that a Worker may pin (``ray start --<name>=<port>``); head-only ones are skipped on
# other Workers. Flag names: `ray start --help` (Ray 2.60).
WORKER_PORT_FLAGS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
    "min-worker-port",
    "max-worker-port",
)
HEAD_PORT_FLAGS = ("dashboard-port", "ray-client-server-port")


class BootstrapError(Exception):
    """A failure with a reason code (``PrepareFailed``...) and the status to exit with."""

    def __init__(self, reason: str, message: str, status: int, **details):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status  # the bootstrap's own exit status
        self.details = details  # e.g. exit_code of the prepare script, missing_ranks


@dataclass
class BootstrapConfig:
    """Everything the bootstrap needs, read from the environment (see :meth:`from_env`)."""

    node_rank: int
    num_nodes: int
    role: str
    worker: str
    run_id: str
    head_address: str  # host:port of the Ray GCS on the head
    node_ip: str | None = None
    ray_ports: dict[str, int] = field(default_factory=dict)
    num_cpus: int | None = None
    num_gpus: int | None = None
    memory_bytes: int | None = None
    object_store_bytes: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    ray_temp_dir: str | None = None
    prepare_script: str = ""
    run_script: str = ""
    working_dir: str | None = None
    join_timeout: float = 300.0
    prepare_timeout: float = 1800.0
    ray_executable: str | None = None
    include_dashboard: bool = False
    stop_grace: float = 8.0  # seconds children get between SIGTERM and SIGKILL when stopping
    rlinf_config_dir: str | None = None  # spec.rlinf.configDir (head only), for the record
    rlinf_config_name: str | None = None
    facts_budget: float = FACT_BUDGET_SECONDS  # seconds all record-fact probes may take

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0

    @property
    def head_port(self) -> int:
        return int(self.head_address.rsplit(":", 1)[1])

    @property
    def head_host(self) -> str:
        return self.head_address.rsplit(":", 1)[0]

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "BootstrapConfig":
        """Read the configuration.

        Required: ``RLINF_NODE_RANK``, ``RLARK_NUM_NODES``, ``RLARK_HEAD_ADDRESS`` (host:port).
        Optional: ``RLARK_ROLE``, ``RLARK_WORKER``, ``RLARK_RUN_ID``, ``RLARK_NODE_IP``,
        ``RLARK_RAY_PORTS`` (JSON: ray start flag name -> port), ``RLARK_NUM_CPUS``,
        ``RLARK_NUM_GPUS``, ``RLARK_MEMORY_BYTES``, ``RLARK_OBJECT_STORE_BYTES``,
        ``RLARK_RESOURCES`` (JSON: name -> amount), ``RLARK_RAY_TEMP_DIR``,
        ``RLARK_PREPARE_SCRIPT``, ``RLARK_RUN_SCRIPT``, ``RLARK_WORKING_DIR``,
        ``RLARK_JOIN_TIMEOUT_SECONDS``, ``RLARK_PREPARE_TIMEOUT_SECONDS``, ``RLARK_RAY``,
        ``RLARK_RLINF_CONFIG_DIR``, ``RLARK_RLINF_CONFIG_NAME`` (the head snapshots those Hydra
        files for the run record), ``RLARK_FACTS_BUDGET_SECONDS``.

        Raises:
            BootstrapError: ``BadConfig`` naming the variable and its value.
        """

        def need(name: str) -> str:
            value = env.get(name, "")
            if not value:
                raise BootstrapError("BadConfig", f"{name} is not set", EXIT_BAD_CONFIG)
            return value

        def as_int(name: str, value: str | None) -> int | None:
            if value is None or value == "":
                return None
            try:
                return int(value)
            except ValueError:
                raise BootstrapError(
                    "BadConfig", f"{name}={value!r} is not an integer", EXIT_BAD_CONFIG
                ) from None

        def as_json(name: str, kind) -> dict:
            raw = env.get(name, "")
            if not raw:
                return {}
            try:
                value = json.loads(raw)
                if not isinstance(value, dict):
                    raise ValueError
                return {str(k): kind(v) for k, v in value.items()}
            except (ValueError, TypeError):
                raise BootstrapError(
                    "BadConfig",
                    f"{name}={raw!r} is not a JSON object of {kind.__name__} values",
                    EXIT_BAD_CONFIG,
                ) from None

        def as_float(name: str, default: float) -> float:
            raw = env.get(name) or ""
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                value = float("nan")
            if not (0 < value < float("inf")):
                raise BootstrapError(
                    "BadConfig", f"{name}={raw!r} is not a positive number of seconds", EXIT_BAD_CONFIG
                )
            return value

        def required_int(name: str) -> int:
            value = as_int(name, need(name))
            assert value is not None  # need() refused an empty value
            return value

        rank = required_int("RLINF_NODE_RANK")
        num_nodes = required_int("RLARK_NUM_NODES")
        head_address = need("RLARK_HEAD_ADDRESS")
        host, _, port = head_address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BootstrapError(
                "BadConfig", f"RLARK_HEAD_ADDRESS={head_address!r} is not host:port", EXIT_BAD_CONFIG
            )
        if not (0 <= rank < num_nodes):
            raise BootstrapError(
                "BadConfig",
                f"RLINF_NODE_RANK={rank} is outside 0..{num_nodes - 1} (RLARK_NUM_NODES={num_nodes})",
                EXIT_BAD_CONFIG,
            )
        return cls(
            node_rank=rank,
            num_nodes=num_nodes,
            role=env.get("RLARK_ROLE", ""),
            worker=env.get("RLARK_WORKER", socket.gethostname()),
            run_id=env.get("RLARK_RUN_ID", ""),
            head_address=head_address,
            node_ip=env.get("RLARK_NODE_IP") or None,
            ray_ports=as_json("RLARK_RAY_PORTS", int),
            num_cpus=as_int("RLARK_NUM_CPUS", env.get("RLARK_NUM_CPUS")),
            num_gpus=as_int("RLARK_NUM_GPUS", env.get("RLARK_NUM_GPUS")),
            memory_bytes=as_int("RLARK_MEMORY_BYTES", env.get("RLARK_MEMORY_BYTES")),
            object_store_bytes=as_int(
                "RLARK_OBJECT_STORE_BYTES", env.get("RLARK_OBJECT_STORE_BYTES")
            ),
            resources=as_json("RLARK_RESOURCES", float),
            ray_temp_dir=env.get("RLARK_RAY_TEMP_DIR") or None,
            prepare_script=env.get("RLARK_PREPARE_SCRIPT", ""),
            run_script=env.get("RLARK_RUN_SCRIPT", ""),
            working_dir=env.get("RLARK_WORKING_DIR") or None,
            join_timeout=as_float("RLARK_JOIN_TIMEOUT_SECONDS", 300.0),
            prepare_timeout=as_float("RLARK_PREPARE_TIMEOUT_SECONDS", 1800.0),
            ray_executable=env.get("RLARK_RAY") or None,
            stop_grace=as_float("RLARK_STOP_GRACE_SECONDS", 8.0),
            include_dashboard=env.get("RLARK_RAY_DASHBOARD", "") == "1",
            rlinf_config_dir=env.get("RLARK_RLINF_CONFIG_DIR") or None,
            rlinf_config_name=env.get("RLARK_RLINF_CONFIG_NAME") or None,
            facts_budget=as_float("RLARK_FACTS_BUDGET_SECONDS", FACT_BUDGET_SECONDS),
        )


# --- pure builders --------------------------------------------------------------------------------


#: how prepare and run scripts run: bash with errexit and pipefail, as CI systems run theirs, so
#: a failing command (also inside a pipeline) ends the script with that command's exit code
#: instead of being hidden by the commands after it
SCRIPT_SHELL = ("bash", "-e", "-o", "pipefail", "-c")


def script_argv(script: str) -> list[str]:
    """The argv that runs a prepare or run script (:data:`SCRIPT_SHELL`)."""
    return [*SCRIPT_SHELL, script]


def node_labels(cfg: BootstrapConfig) -> dict[str, str]:
    """Ray node labels that carry the rank, role and run of this Worker."""
    labels = {LABEL_RANK: str(cfg.node_rank)}
    if cfg.role:
        labels[LABEL_ROLE] = cfg.role
    if cfg.run_id:
        labels[LABEL_RUN] = cfg.run_id
    return labels


def build_ray_start_command(cfg: BootstrapConfig, ray: str = "ray") -> list[str]:
    """The ``ray start`` argv for this Worker (always ``--block``: the process lives as long as
    the node, and SIGTERM to it stops every Ray process it started, no ``ray stop`` needed).

    Flags (``ray start --help``, Ray 2.60; ``--memory`` and ``--labels`` are hidden options):
    head: ``--head --port``; others: ``--address``; both: ``--node-ip-address``, pinned ports,
    ``--num-cpus``, ``--num-gpus``, ``--memory`` (bytes), ``--object-store-memory`` (bytes),
    ``--resources`` (JSON), ``--labels`` (k=v,...), ``--temp-dir``, ``--disable-usage-stats``.
    """
    cmd = [ray, "start", "--block", "--disable-usage-stats"]
    port_flags: tuple[str, ...]
    if cfg.is_head:
        cmd += ["--head", f"--port={cfg.head_port}"]
        cmd.append(f"--include-dashboard={'true' if cfg.include_dashboard else 'false'}")
        port_flags = WORKER_PORT_FLAGS + HEAD_PORT_FLAGS
    else:
        cmd.append(f"--address={cfg.head_address}")
        port_flags = WORKER_PORT_FLAGS
    if cfg.node_ip:
        cmd.append(f"--node-ip-address={cfg.node_ip}")
    for flag in port_flags:
        if flag in cfg.ray_ports:
            cmd.append(f"--{flag}={cfg.ray_ports[flag]}")
    if cfg.num_cpus is not None:
        cmd.append(f"--num-cpus={cfg.num_cpus}")
    if cfg.num_gpus is not None:
        cmd.append(f"--num-gpus={cfg.num_gpus}")
    if cfg.memory_bytes is not None:
        cmd.append(f"--memory={cfg.memory_bytes}")
    if cfg.object_store_bytes is not None:
        cmd.append(f"--object-store-memory={cfg.object_store_bytes}")
    if cfg.resources:
        cmd.append("--resources=" + json.dumps(cfg.resources, sort_keys=True))
    cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(node_labels(cfg).items())))
    if cfg.ray_temp_dir:
        cmd.append(f"--temp-dir={cfg.ray_temp_dir}")
    return cmd


def check_ranks(nodes: list[dict], run_id: str, num_nodes: int) -> tuple[dict[int, dict], list[int], list[str]]:
    """Match alive Ray nodes of this run (by ``rlark.io/run`` label) to node ranks.

    Args:
        nodes: ``ray.nodes()`` output (dicts with ``Alive``, ``NodeID``, ``NodeManagerAddress``,
            ``Labels``).
    Returns:
        ``(by_rank, missing, problems)``: rank -> node dict for ranks seen once, the ranks of
        0..N-1 not seen, and human-readable problems (a rank seen twice, a rank outside 0..N-1,
        a dead node of this run). Pure; used by the join barrier.
    """
    by_rank: dict[int, dict] = {}
    problems: list[str] = []
    for node in nodes:
        labels = node.get("Labels") or {}
        if run_id and labels.get(LABEL_RUN) != run_id:
            continue
        raw = labels.get(LABEL_RANK)
        try:
            rank = int(raw if raw is not None else "")  # no label: ValueError, as a bad one
        except (TypeError, ValueError):
            problems.append(f"node {node.get('NodeID', '?')[:12]} has rank label {raw!r}")
            continue
        if not node.get("Alive"):
            problems.append(f"rank {rank} joined and then died")
            continue
        if not 0 <= rank < num_nodes:
            problems.append(f"rank {rank} is outside 0..{num_nodes - 1}")
        elif rank in by_rank:
            problems.append(
                f"rank {rank} is carried by two nodes ({by_rank[rank]['NodeManagerAddress']} and "
                f"{node.get('NodeManagerAddress')})"
            )
        else:
            by_rank[rank] = node
    missing = [r for r in range(num_nodes) if r not in by_rank]
    return by_rank, missing, problems


def raylet_flags(argv: list[str]) -> dict[str, str]:
    """``--name=value`` arguments of a raylet command line as a mapping (``node_id``,
    ``raylet_socket_name``, ``store_socket_name``, ``log_dir``, ``session_dir``...: the flags
    ray._private.services.start_raylet passes, 2.47-2.60). Pure."""
    out = {}
    for arg in argv[1:]:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            out[name] = value
    return out


#: what a Ray worker process logs when the raylet has no port left for it (core_worker_process.cc,
#: "Failed to register worker to Raylet: Invalid: No available ports. Please specify a wider port
#: range using --min-worker-port and --max-worker-port"; 2.47-2.60)
PORTS_EXHAUSTED = b"No available ports"
PORT_WATCH_SECONDS = 2.0
#: a log file is read at most this much at a time (the needle is looked for in what is new)
PORT_WATCH_READ_BYTES = 1 << 20


def find_port_exhaustion(log_dir: str, offsets: dict[str, int]) -> str | None:
    """Look through what is new in Ray's own log files in ``log_dir`` (``*.log``, ``*.err``,
    ``raylet.out``; not ``worker-*.out``, where tasks' prints go) since the ``offsets`` (path ->
    bytes read, updated) for :data:`PORTS_EXHAUSTED`. Returns the name of the first file that
    has it, else None."""
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return None
    for name in names:
        if not (name.endswith((".log", ".err")) or (name.startswith("raylet") and name.endswith(".out"))):
            continue
        path = os.path.join(log_dir, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        start = offsets.get(path, 0)
        if size <= start:
            continue
        # keep len(needle) bytes of overlap, so a line split across two reads is still seen
        start = max(0, start - len(PORTS_EXHAUSTED))
        try:
            with open(path, "rb") as f:
                f.seek(start)
                chunk = f.read(min(size - start, PORT_WATCH_READ_BYTES))
        except OSError:
            continue
        offsets[path] = start + len(chunk)
        if PORTS_EXHAUSTED in chunk:
            return name
    return None


def port_exhaustion_message(cfg: "BootstrapConfig", lo: int | None, hi: int | None, where: str) -> str:
    """The text of the RayWorkerPortsExhausted warning. Pure."""
    rng = (f"{hi - lo + 1} worker ports ({lo}-{hi})" if lo is not None and hi is not None
           else "Ray's worker ports")
    return (f"Ray on rank {cfg.node_rank} ({cfg.worker}) has no worker port left: every one of "
            f"its {rng} is held by a worker process, and a new worker could not start "
            f"(\"No available ports\" in {where}); the tasks or actors waiting for it wait "
            "forever. Give the role more with ray.workerPorts (the default is 16 per CPU).")


#: Ray versions this file's use of Ray internals was run against (tests/test_ray_versions.py,
#: Python 3.10 and 3.11): RLinf's minimum (2.47) up to 2.60. Inside this range the barrier reads
#: the node table with Ray's GcsClient (:class:`GcsNodes`); outside it, with the public
#: ``ray.nodes()`` (:class:`DriverNodes`).
RAY_TESTED_RANGE = ((2, 47), (2, 60))
#: before Ray 2.55 `ray start --temp-dir` is ignored on non-head nodes (ray-project/ray#57735):
#: every node uses the head's session directory and takes the first socket and log names free
#: there, so nodes of one Run on one host must start one at a time
#: (:meth:`Bootstrap._take_start_lock`)
RAY_PER_NODE_TEMP_DIR = (2, 55)
#: the first Ray with token authentication of its GCS and every other service (RAY_AUTH_MODE=token
#: and RAY_AUTH_TOKEN on every node and driver): docs.ray.io/en/latest/ray-security/token-auth.html
RAY_TOKEN_AUTH = (2, 52)
#: RLARK_RAY_NODES=gcs|driver chooses the node-table reader (default: by version, see above)
NODE_TABLE_METHODS = ("gcs", "driver")


def ray_version() -> tuple[int, int] | None:
    """(major, minor) of the installed Ray, from package metadata (nothing imported); None when
    Ray is not installed or its version is not ``X.Y...``."""
    raw = _version("ray") or ""
    parts = raw.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def node_table_method(version: tuple[int, int] | None, override: str | None = None) -> str:
    """``gcs`` inside :data:`RAY_TESTED_RANGE`, else ``driver``; ``override`` (RLARK_RAY_NODES)
    wins. Pure.

    Raises:
        BootstrapError: ``BadConfig`` for an override that is neither method.
    """
    if override:
        if override not in NODE_TABLE_METHODS:
            raise BootstrapError(
                "BadConfig", f"RLARK_RAY_NODES={override!r} is not one of "
                f"{', '.join(NODE_TABLE_METHODS)}", EXIT_BAD_CONFIG)
        return override
    low, high = RAY_TESTED_RANGE
    return "gcs" if version is not None and low <= version <= high else "driver"


def node_dict(node_id: str, alive: bool, address: str, hostname: str, labels: dict,
              resources: dict | None = None) -> dict:
    """One node as :func:`check_ranks` reads it (the keys and shapes of ``ray.nodes()``;
    ``Resources``: the node's total resources as Ray counts them, e.g. ``{"CPU": 1.0,
    "memory": 2147483648.0, "GPU": 1.0, "rdma/hca": 1.0}``)."""
    return {"NodeID": node_id, "Alive": bool(alive), "NodeManagerAddress": address,
            "NodeManagerHostname": hostname, "Labels": dict(labels or {}),
            "Resources": {str(k): float(v) for k, v in (resources or {}).items()}}


class GcsNodes:
    """The node table of a Ray cluster, read over one GCS connection with Ray's own GcsClient
    (``ray._raylet.GcsClient(address=...).get_all_node_info(timeout=...)``, what ``ray start``,
    ``ray status`` and the autoscaler use; the same call in every Ray of
    :data:`RAY_TESTED_RANGE`). Ray's public ``ray.nodes()`` needs a connected driver: measured
    here, 2.6 s to import Ray plus 3.2 s for ``ray.init`` on a busy 2-core host, and when the GCS
    dies it blocks about 60 s and then exits; this client answers in about 1 ms, and a GCS that
    goes away raises here within ``timeout`` instead of ending this process.
    """

    method = "gcs"

    def __init__(self, address: str, timeout: float = 5.0):
        # a Cython class: Ray's type information does not declare it
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        self.timeout = timeout
        self.client = GcsClient(address=address)

    def nodes(self) -> list[dict]:
        """Every node the GCS knows (:func:`node_dict`). The node state is compared with the
        message's own ``ALIVE`` constant, so no generated protobuf module is imported."""
        return [
            node_dict(node_id.hex(), info.state == info.ALIVE, info.node_manager_address,
                      info.node_manager_hostname, info.labels,
                      getattr(info, "resources_total", None))
            for node_id, info in self.client.get_all_node_info(timeout=self.timeout).items()
        ]

    def close(self) -> None:
        self.client = None


#: the driver DriverNodes runs: Ray's public API only; one JSON line per read on stdout
_DRIVER_PROGRAM = r"""
import json, sys, time
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
         namespace="rlark-barrier")
period = float(sys.argv[2])
while True:
    nodes = [{"NodeID": n.get("NodeID"), "Alive": n.get("Alive"),
              "NodeManagerAddress": n.get("NodeManagerAddress"),
              "NodeManagerHostname": n.get("NodeManagerHostname"),
              "Labels": n.get("Labels") or {},
              "Resources": n.get("Resources") or {}} for n in ray.nodes()]
    print(json.dumps(nodes), flush=True)
    time.sleep(period)
"""


class DriverNodes:
    """The node table through Ray's public API: a child process that is a Ray driver
    (``ray.init(address=...)``) and prints ``ray.nodes()`` as one JSON line every
    ``period`` seconds. For Rays outside :data:`RAY_TESTED_RANGE` (or RLARK_RAY_NODES=driver):
    slower to start (a driver connects in seconds) and slower to notice a dead GCS (``stale``
    seconds without a fresh table raise), but it needs nothing of Ray's internals. A child, so a
    driver that Ray ends when the GCS goes away does not take the bootstrap with it.
    """

    method = "driver"

    def __init__(self, address: str, env: dict[str, str], period: float = BARRIER_POLL_SECONDS,
                 stale: float = 10.0, connect_timeout: float = RAY_START_TIMEOUT,
                 on_spawn=None):
        self.address, self.period = address, period
        self.env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
        self.stale = stale
        self.connect_timeout = connect_timeout
        self.on_spawn = on_spawn  # e.g. the bootstrap's list of children to stop at the end
        self.started = 0.0
        self.proc: subprocess.Popen | None = None
        self._latest: list[dict] | None = None
        self._at = 0.0
        self._said = ""  # the driver's last line that was not a table
        self._lock = threading.Lock()

    def _spawn(self) -> subprocess.Popen:
        # on the first read, i.e. once this node's raylet runs: a driver connects through it
        self.started = time.monotonic()
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER_PROGRAM, self.address, str(self.period)],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        if self.on_spawn is not None:
            self.on_spawn(proc)
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout or ():
            try:
                table = json.loads(line) if line.startswith("[") else None
            except ValueError:
                table = None
            with self._lock:
                if isinstance(table, list):
                    self._latest, self._at = table, time.monotonic()
                elif line.strip():
                    self._said = line.strip()[-300:]  # Ray's own words, for the error

    def nodes(self) -> list[dict]:
        """The latest table (``[]`` while the driver connects).

        Raises:
            RuntimeError: the driver exited, did not connect within ``connect_timeout``, or
            printed nothing new for ``stale`` seconds (the GCS is gone).
        """
        proc = self.proc if self.proc is not None else self._spawn()
        with self._lock:
            latest, at = self._latest, self._at
        now = time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"the ray.nodes() driver exited with code {proc.returncode}"
                               + (f": {self._said}" if self._said else ""))
        if latest is None:
            if now - self.started > self.connect_timeout:
                raise RuntimeError("the ray.nodes() driver did not connect")
            return []
        if now - at > self.stale:
            raise RuntimeError(f"no node table from the ray.nodes() driver for {self.stale:g} s")
        return [node_dict(n.get("NodeID") or "", bool(n.get("Alive")),
                          n.get("NodeManagerAddress") or "", n.get("NodeManagerHostname") or "",
                          n.get("Labels") or {}, n.get("Resources")) for n in latest]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def open_node_table(address: str, env: dict[str, str], on_spawn=None) -> "GcsNodes | DriverNodes":
    """The node-table reader for this Worker's Ray (:func:`node_table_method`); ``on_spawn``
    gets the driver process of :class:`DriverNodes` when it starts.

    Raises:
        BootstrapError: ``BadConfig`` for a bad RLARK_RAY_NODES.
        Exception: the GCS does not answer (GcsClient's own error).
    """
    method = node_table_method(ray_version(), env.get("RLARK_RAY_NODES") or None)
    if method == "gcs":
        return GcsNodes(address)
    return DriverNodes(address, env, on_spawn=on_spawn)


# --- lifecycle lines ------------------------------------------------------------------------------

_emit_lock = threading.Lock()
#: the keeper's report pipe (RLARK_REPORT_FD, keeper.py): what this program reports goes there as
#: one JSON object per line, and the keeper alone writes the Worker's lifecycle lines. Without a
#: keeper (a test running this file alone) reports are lifecycle lines on stdout.
_report_fd: int | None = None


def emit(event: str, **data) -> None:
    """Report one event: a JSON line ``{"ts": <unix seconds>, "event": ..., ...}`` to the keeper
    (which checks it and writes it as a lifecycle line), or ``RLARK_EVENT {json}`` on stdout
    when there is no keeper."""
    body = {"ts": round(time.time(), 3), "event": event, **data}
    text = json.dumps(body)
    with _emit_lock:
        if _report_fd is not None:
            data_out = (text + "\n").encode()
            while data_out:
                try:
                    data_out = data_out[os.write(_report_fd, data_out):]
                except InterruptedError:
                    continue
                except OSError:  # the keeper is gone: nobody to report to
                    return
            return
        sys.stdout.write(EVENT_PREFIX + text + "\n")
        sys.stdout.flush()


class KeeperLink:
    """What the keeper tells this program (RLARK_CONTROL_FD, keeper.py): one line
    ``run_finished <exit status> <run start, unix seconds>`` once the head's run script ended.
    The end of the pipe means the keeper is gone: this Worker is being torn down."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = b""

    def wait(self, timeout: float) -> tuple[int, float] | None:
        """``(exit status, run start)`` once said, else None after ``timeout`` seconds.

        Raises:
            BootstrapError: ``Stopped`` when the keeper is gone.
        """
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                chunk = os.read(self.fd, 4096)
            except InterruptedError:
                return None
            if not chunk:
                raise BootstrapError("Stopped", "the keeper is gone", EXIT_STOPPED)
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            parts = line.decode(errors="replace").split()
            if len(parts) == 3 and parts[0] == "run_finished":
                try:
                    return int(parts[1]), float(parts[2])
                except ValueError:
                    continue
        return None


#: set by :func:`main` from RLARK_CONTROL_FD (None: no keeper)
_control: KeeperLink | None = None


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _visible_memory_bytes() -> int | None:
    """Memory this process may use: the cgroup v2 limit when set, else MemTotal."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            raw = f.read().strip()
        if raw != "max":
            return int(raw)
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    try:
        return sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return []


def _node_ip_guess(cfg: BootstrapConfig) -> str:
    if cfg.node_ip:
        return cfg.node_ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((cfg.head_host, cfg.head_port))
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def collect_facts(cfg: BootstrapConfig) -> dict:
    """Facts about this Worker for the run record: host, IP, rank, role, versions, CPUs, GPUs,
    memory (bytes). Cheap: versions come from package metadata, nothing heavy is imported."""
    cpus: int | None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "ip": _node_ip_guess(cfg),
        "node_rank": cfg.node_rank,
        "role": cfg.role,
        "worker": cfg.worker,
        "pid": os.getpid(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "ray": _version("ray"),
        "rlinf": _version("rlinf"),
        "torch": _version("torch"),
        "visible_cpus": cpus,
        "visible_gpus": _visible_gpus(),
        "visible_memory_bytes": _visible_memory_bytes(),
        "ray_resources": {
            "num_cpus": cfg.num_cpus,
            "num_gpus": cfg.num_gpus,
            "memory_bytes": cfg.memory_bytes,
            "object_store_bytes": cfg.object_store_bytes,
            "custom": cfg.resources,
            # None: Ray's own range (nothing pinned)
            "worker_ports": ([cfg.ray_ports["min-worker-port"], cfg.ray_ports["max-worker-port"]]
                             if "min-worker-port" in cfg.ray_ports
                             and "max-worker-port" in cfg.ray_ports else None),
        },
    }


# --- record facts (issue 14): code, versions, packages, devices; bounded, never fatal ---------------

class Budget:
    """A time budget (seconds, monotonic) shared by the probes of one Worker."""

    def __init__(self, seconds: float, probe_seconds: float = FACT_PROBE_SECONDS):
        self.deadline = time.monotonic() + seconds
        self.probe_seconds = probe_seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def probe_timeout(self) -> float:
        return min(self.probe_seconds, self.left())


def strip_credentials(url: str) -> str:
    """``url`` without credentials: the user and password of an ``http(s)``/``ftp`` URL (a token
    often sits there: ``https://x-access-token:T@github.com/o/r``) and its query; an ``ssh://``
    URL keeps its user and loses its password; scp-like ``git@host:path`` is kept (``git`` is
    not a credential). Pure."""
    from urllib.parse import urlsplit, urlunsplit

    url = url.strip()
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if parts.scheme in ("ssh", "git+ssh") and parts.username:
        host = f"{parts.username}@{host}"
    query = "" if parts.scheme.startswith(("http", "ftp", "git+http")) else parts.query
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def parse_direct_url(text: str) -> dict:
    """pip's ``direct_url.json`` of an installed distribution (PEP 610,
    https://packaging.python.org/en/latest/specifications/direct-url-data-structure/) as
    ``{"source": "vcs"|"dir"|"archive", "url", "vcs", "commit", "requestedRevision",
    "editable"}`` (keys without a value left out; the URL without credentials). Pure.

    Raises:
        ValueError: not JSON, or not an object with a ``url``.
    """
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise ValueError("direct_url.json has no url")
    out: dict = {"url": strip_credentials(data["url"])}
    vcs, dir_info, archive = data.get("vcs_info"), data.get("dir_info"), data.get("archive_info")
    if isinstance(vcs, dict):
        out.update(source="vcs", vcs=vcs.get("vcs"), commit=vcs.get("commit_id"),
                   requestedRevision=vcs.get("requested_revision"))
    elif isinstance(dir_info, dict):
        out.update(source="dir", editable=bool(dir_info.get("editable")))
    elif isinstance(archive, dict):
        out.update(source="archive", hash=archive.get("hash") or (archive.get("hashes") or None))
    return {k: v for k, v in out.items() if v is not None}


def parse_git_status(text: str) -> dict:
    """``git status --porcelain=v2 --branch --untracked-files=normal`` output as ``{"commit",
    "branch", "dirty", "changed", "untracked"}``: ``branch`` None when detached, ``commit`` None
    before the first commit; ``dirty`` when a tracked file differs from the commit (staged or
    not); ``changed``/``untracked``: how many entries of each. Pure (git-status(1), "Porcelain
    Format Version 2")."""
    commit = branch = None
    changed = untracked = 0
    for line in text.splitlines():
        if line.startswith("# branch.oid "):
            oid = line.split(" ", 2)[2].strip()
            commit = None if oid == "(initial)" else oid
        elif line.startswith("# branch.head "):
            head = line.split(" ", 2)[2].strip()
            branch = None if head == "(detached)" else head
        elif line.startswith("?"):
            untracked += 1
        elif line[:1] in ("1", "2", "u"):
            changed += 1
    return {"commit": commit, "branch": branch, "dirty": changed > 0, "changed": changed,
            "untracked": untracked}


def parse_nvidia_smi(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=uuid,name,driver_version,memory.total --format=csv,noheader,
    nounits`` output as ``[{"uuid", "model", "driver", "memoryMiB"}]``. Pure."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[0]:
            continue
        try:
            mem: int | None = int(float(cells[3]))
        except ValueError:
            mem = None
        gpus.append({"uuid": cells[0], "model": cells[1], "driver": cells[2], "memoryMiB": mem})
    return gpus


def parse_nvidia_proc_version(text: str) -> str | None:
    """The kernel driver version from ``/proc/driver/nvidia/version`` (``NVRM version: NVIDIA
    UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...``); None when absent. Pure."""
    import re

    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def parse_torch_version_py(text: str) -> dict:
    """``cuda``, ``hip`` and ``git_version`` from torch's generated ``torch/version.py`` (read as
    text: importing torch takes seconds and hundreds of MB). Pure."""
    import ast

    out: dict = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip", "git_version") \
                and isinstance(value, ast.Constant):
            out[target.id] = value.value
    return out


def package_list(dists: "list[tuple[str, str]]") -> tuple[list[str], str]:
    """``(["name==version", ...], sha256)`` of an environment's distributions: names normalised
    as PEP 503 does, sorted, duplicates (one dist on two paths) kept once; the hash is of the
    lines joined by newlines, so equal environments hash equal. Pure."""
    import hashlib
    import re

    lines = sorted({f"{re.sub(r'[-_.]+', '-', n).lower()}=={v}" for n, v in dists if n})
    return lines, hashlib.sha256("\n".join(lines).encode()).hexdigest()


def cap_bytes(data: bytes, cap: int) -> tuple[str, bool]:
    """``data`` as text (UTF-8, bad bytes replaced), at most ``cap`` bytes of it, and whether it
    was cut. Pure."""
    return data[:cap].decode("utf-8", errors="replace"), len(data) > cap


def _probe(argv: list[str], budget: Budget, cwd: str | None = None,
           cap: int = 1 << 20) -> tuple[int, bytes, str, bool] | str:
    """Run ``argv`` within the budget: ``(exit code, first cap bytes of stdout, sha256 of all
    of stdout, cut)`` or why not (text: not installed, timed out, no budget left). stdout is
    hashed while it is read, so memory stays at ``cap`` whatever the command prints."""
    import hashlib

    timeout = budget.probe_timeout()
    if timeout <= 0:
        return "no time left in the facts budget"
    # GIT_DISCOVERY_ACROSS_FILESYSTEM: a local Worker's workingDir is an overlay mount, and git
    # stops looking for the checkout's .git at a file system boundary (git(1), ENVIRONMENT)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0",
           "LC_ALL": "C", "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1"}
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    digest, kept, size = hashlib.sha256(), bytearray(), 0

    def read() -> None:
        nonlocal size
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(65536), b""):  # type: ignore[union-attr]
            digest.update(chunk)
            size += len(chunk)
            if len(kept) < cap:
                kept.extend(chunk[:cap - len(kept)])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(1.0)
        return f"{shlex.join(argv[:4])} took longer than {timeout:.1f} s"
    reader.join(max(0.1, budget.probe_timeout()))
    return code, bytes(kept), digest.hexdigest(), size > cap


def git_facts(path: str, budget: Budget, diff_cap: int = DIFF_CAP_BYTES) -> dict:
    """The git checkout ``path`` is in: ``{"path", "root", "commit", "branch", "remote", "dirty",
    "changed", "untracked", "diffSha256", "diffBytes", "diff", "diffCut"}`` (the diff is ``git
    diff HEAD --binary`` of tracked files: what ``git apply`` restores on the commit), or
    ``{"path", "absent": why}`` when ``path`` is no checkout, git is missing or time ran out."""
    # safe.directory: the Worker runs under its own uid, which does not own the user's checkout
    # (git refuses such a "dubious ownership" repository otherwise; git-config(1))
    git = ["git", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off", "-c", "safe.directory=*"]
    top = _probe(git + ["rev-parse", "--show-toplevel"], budget, cwd=path)
    if isinstance(top, str):
        return {"path": path, "absent": top}
    if top[0] != 0:
        return {"path": path, "absent": "not in a git checkout"}
    out: dict = {"path": path, "root": top[1].decode(errors="replace").strip()}
    status = _probe(git + ["status", "--porcelain=v2", "--branch", "--untracked-files=normal"],
                    budget, cwd=path)
    if isinstance(status, str) or status[0] != 0:
        out["absent"] = status if isinstance(status, str) else "git status failed"
        return out
    out.update(parse_git_status(status[1].decode(errors="replace")))
    remote = _probe(git + ["config", "--get", "remote.origin.url"], budget, cwd=path)
    out["remote"] = (strip_credentials(remote[1].decode(errors="replace"))
                     if not isinstance(remote, str) and remote[0] == 0 else None)
    if out.get("commit"):
        diff = _probe(git + ["diff", "HEAD", "--binary", "--no-color", "--no-ext-diff"],
                      budget, cwd=path, cap=diff_cap)
        if isinstance(diff, str):
            out["diffAbsent"] = diff
        elif diff[0] == 0:
            text, _ = cap_bytes(diff[1], diff_cap)
            out.update(diffSha256=diff[2] if out["dirty"] else None, diff=text or None,
                       diffCut=diff[3])
    return out


def rlinf_code_facts(budget: Budget) -> dict:
    """Where the installed RLinf comes from: pip's ``direct_url.json`` when pip installed it
    from a URL, a directory or a VCS, and the git checkout its package directory is in (an
    editable install or a checkout on PYTHONPATH); ``{"absent": why}`` without RLinf."""
    import importlib.util

    out: dict = {}
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("rlinf")
            out["version"] = dist.version
            raw = dist.read_text("direct_url.json")
            if raw:
                try:
                    out["directUrl"] = parse_direct_url(raw)
                except ValueError as exc:
                    out["directUrl"] = {"absent": f"unreadable direct_url.json: {exc}"}
            else:
                out["directUrl"] = {"absent": "installed from an index (no direct_url.json)"}
        except PackageNotFoundError:
            out["directUrl"] = {"absent": "no rlinf distribution installed"}
        spec = importlib.util.find_spec("rlinf")  # finds, does not import, a top-level package
    except Exception as exc:  # a broken environment is a fact too, not a failure
        return {**out, "absent": f"{type(exc).__name__}: {exc}"}
    if spec is None or not spec.origin and not spec.submodule_search_locations:
        return {**out, "absent": "rlinf is not importable"} if "version" not in out else out
    where = (list(spec.submodule_search_locations or []) or [os.path.dirname(spec.origin or "")])[0]
    out["packageDir"] = where
    if installed_copy(where):
        # a wheel's copy inside an environment: a checkout around it (a venv inside a project)
        # is not where RLinf came from
        out["git"] = {"path": where, "absent": "installed copy (site-packages), not a checkout"}
    else:
        out["git"] = git_facts(where, budget)
    return out


def installed_copy(path: str) -> bool:
    """Whether ``path`` lies in an environment's ``site-packages`` or ``dist-packages``. Pure."""
    return any(p in ("site-packages", "dist-packages") for p in path.split(os.sep))


def device_facts(budget: Budget) -> dict:
    """GPUs (UUID, model, driver, memory) from ``nvidia-smi``, the driver from
    ``/proc/driver/nvidia/version`` when nvidia-smi is missing, and device files present
    (``/dev/nvidia*``, ``/dev/infiniband/*``). Absent things are ``None`` with a reason."""
    out: dict = {"gpus": None, "driver": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        got = _probe([smi, "--query-gpu=uuid,name,driver_version,memory.total",
                      "--format=csv,noheader,nounits"], budget)
        if isinstance(got, str):
            out["gpusAbsent"] = got
        elif got[0] != 0:
            out["gpusAbsent"] = f"nvidia-smi exited with {got[0]}"
        else:
            out["gpus"] = parse_nvidia_smi(got[1].decode(errors="replace"))
            out["driver"] = next((g["driver"] for g in out["gpus"] if g.get("driver")), None)
    else:
        out["gpusAbsent"] = "nvidia-smi not found"
    if out["driver"] is None:
        try:
            with open("/proc/driver/nvidia/version") as f:
                out["driver"] = parse_nvidia_proc_version(f.read())
        except OSError:
            out["driverAbsent"] = "no NVIDIA driver (no /proc/driver/nvidia/version)"
    files = []
    for d, prefix in (("/dev", "nvidia"), ("/dev/infiniband", "")):
        try:
            files += sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix))
        except OSError:
            pass
    out["deviceFiles"] = files
    return out


def version_facts() -> dict:
    """Versions beyond :func:`collect_facts`'s: the CUDA (or ROCm) runtime torch was built with
    (``torch.version.cuda`` read from ``torch/version.py``, torch not imported), and the device
    library wheels installed (NCCL, cuDNN... :data:`DEVICE_LIB_PREFIXES`), with ``nccl`` picked
    out; absent ones are None."""
    import importlib.util

    out: dict = {"torchCuda": None, "torchHip": None, "nccl": None, "deviceLibs": {}}
    try:
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
            with open(path) as f:
                tv = parse_torch_version_py(f.read())
            out["torchCuda"], out["torchHip"] = tv.get("cuda"), tv.get("hip")
    except (OSError, ImportError, ValueError):
        pass
    try:
        from importlib.metadata import distributions

        for dist in distributions():
            name = (dist.metadata["Name"] or "").lower()
            if name.startswith(DEVICE_LIB_PREFIXES):
                out["deviceLibs"][name] = dist.version
                if "nccl" in name:
                    out["nccl"] = dist.version
    except Exception:  # noqa: BLE001 - a broken dist's metadata is not worth failing for
        pass
    return out


def packages_facts() -> dict:
    """The installed-package list of this Worker's Python and its sha256 (:func:`package_list`)."""
    try:
        from importlib.metadata import distributions

        lines, digest = package_list([(d.metadata["Name"] or "", d.version) for d in distributions()])
    except Exception as exc:  # noqa: BLE001
        return {"absent": f"{type(exc).__name__}: {exc}"}
    return {"sha256": digest, "count": len(lines), "list": lines}


def config_snapshot(config_dir: str, config_name: str, cap: int = CONFIG_TEXT_CAP_BYTES,
                    max_files: int = CONFIG_MAX_FILES) -> dict:
    """The Hydra files of ``config_dir`` as this Worker sees them: every ``*.yaml``/``*.yml``
    below it (at most ``max_files``, sorted), each ``{"path" (relative), "sha256", "bytes",
    "text"}``; ``text`` only while the texts together stay within ``cap`` bytes (the primary
    config ``config_name`` first). ``{"absent": why}`` when the directory is not there."""
    import hashlib

    if not os.path.isdir(config_dir):
        return {"dir": config_dir, "name": config_name, "absent": "not a directory in this Worker"}
    primary = f"{config_name.removesuffix('.yaml')}.yaml"
    found: list[str] = []
    for root, dirs, names in os.walk(config_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if n.endswith((".yaml", ".yml")):
                found.append(os.path.relpath(os.path.join(root, n), config_dir))
        if len(found) > max_files:
            break
    found.sort(key=lambda p: (p != primary, p))
    files, used = [], 0
    for rel in found[:max_files]:
        try:
            with open(os.path.join(config_dir, rel), "rb") as f:
                data = f.read(cap + 1) if used < cap else b""
                digest = hashlib.sha256(data)
                size = len(data)
                for chunk in iter(lambda: f.read(65536), b""):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            files.append({"path": rel, "absent": exc.strerror or str(exc)})
            continue
        entry: dict = {"path": rel, "sha256": digest.hexdigest(), "bytes": size}
        if size <= cap - used:
            entry["text"] = data.decode("utf-8", errors="replace")
            used += size
        files.append(entry)
    return {"dir": config_dir, "name": config_name, "files": files,
            "filesCut": len(found) > max_files}


def find_hydra_outputs(top: str, since: float, depth: int = HYDRA_SEARCH_DEPTH,
                       max_entries: int = HYDRA_SEARCH_ENTRIES) -> list[str]:
    """Directories below ``top`` (at most ``depth`` levels, ``max_entries`` entries looked at)
    holding a ``.hydra/config.yaml`` written at or after ``since`` (unix seconds): the output
    directories Hydra's ``@hydra.main`` wrote during the run script, newest first."""
    hits: list[tuple[float, str]] = []
    seen = 0
    base = top.rstrip("/").count("/")
    for root, dirs, names in os.walk(top):
        seen += len(dirs) + len(names)
        if ".hydra" in dirs:
            cfg = os.path.join(root, ".hydra", "config.yaml")
            try:
                mtime = os.stat(cfg).st_mtime
            except OSError:
                mtime = -1
            if mtime >= since:
                hits.append((mtime, root))
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        if root.count("/") - base >= depth:
            dirs[:] = []
        if seen > max_entries:
            break
    return [r for _, r in sorted(hits, reverse=True)]


def hydra_output_facts(directory: str, cap: int = CONFIG_TEXT_CAP_BYTES) -> dict:
    """``.hydra/config.yaml`` and ``overrides.yaml`` of one Hydra output directory: ``{"dir",
    "files": {name: {"sha256", "bytes", "text", "cut"}}}`` (each text cut at ``cap``, so the
    lifecycle line stays well under RLark's 1 MiB line limit; Hydra's own ``hydra.yaml`` is left
    out)."""
    import hashlib

    files = {}
    for name in ("config.yaml", "overrides.yaml"):
        try:
            with open(os.path.join(directory, ".hydra", name), "rb") as f:
                data = f.read()
        except OSError:
            continue
        text, cut = cap_bytes(data, cap)
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                       "text": text, "cut": cut}
    return {"dir": directory, "files": files}


def raylet_env_value(pid: int, name: str) -> str | None:
    """``name`` in the environment of process ``pid`` (``/proc/PID/environ``): what the raylet
    was started with, which every Ray worker process on that node (RLinf's node probe actor
    included, rlinf/scheduler/cluster/cluster.py ``get_sys_env_var``) inherits. None when unset.

    Raises:
        OSError: the process is gone or not readable.
    """
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            key, _, value = item.partition(b"=")
            if key.decode(errors="replace") == name:
                return value.decode(errors="replace")
    return None


def record_facts(cfg: BootstrapConfig, budget: Budget) -> dict:
    """What the run record needs beyond :func:`collect_facts`, within ``budget``: ``code``
    (working directory and RLinf), ``versions`` (:func:`version_facts`), ``devices``
    (:func:`device_facts`), ``packages`` (:func:`packages_facts`), ``config`` (the head's
    snapshot of the Hydra files, :func:`config_snapshot`) and ``factsSeconds``. Never raises:
    a part that fails is ``{"absent": why}``."""
    started = time.monotonic()
    out: dict = {}

    def part(key: str, fn) -> None:
        try:
            out[key] = fn()
        except Exception as exc:  # noqa: BLE001 - a missing fact never fails the Run
            out[key] = {"absent": f"{type(exc).__name__}: {exc}"}

    workdir = cfg.working_dir or os.getcwd()
    part("code", lambda: {"workingDir": git_facts(workdir, budget),
                          "rlinf": rlinf_code_facts(budget)})
    part("versions_extra", version_facts)
    part("devices", lambda: device_facts(budget))
    part("packages", packages_facts)
    if cfg.is_head and cfg.rlinf_config_dir and cfg.rlinf_config_name:
        config_dir = cfg.rlinf_config_dir
        if not os.path.isabs(config_dir):
            config_dir = os.path.join(workdir, config_dir)
        part("config", lambda: config_snapshot(config_dir, cfg.rlinf_config_name or ""))
    out["factsSeconds"] = round(time.monotonic() - started, 3)
    return out


# --- processes --------------------------------------------------------------------------------------


class Bootstrap:
    """One Worker's life. ``run()`` returns the exit code."""

    def __init__(self, cfg: BootstrapConfig, env: dict[str, str]):
        self.cfg = cfg
        self.env = dict(env)
        self.env["RLINF_NODE_RANK"] = str(cfg.node_rank)  # exported before `ray start`
        self.env.pop("RAY_ADDRESS", None)
        bindir = os.path.dirname(sys.executable)
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        self.stopping = threading.Event()
        self.children: list[subprocess.Popen] = []
        self.ray_proc: subprocess.Popen | None = None
        #: the join deadline counts from this Worker's start (its prepare script included), as
        #: RLark counts the Run's from the launch; JOIN_SLACK_SECONDS later, so that RLark's own
        #: check (which names every missing rank and what it is doing) comes first; this one
        #: holds when no server watches
        self.join_deadline = time.monotonic() + cfg.join_timeout + JOIN_SLACK_SECONDS
        #: this Worker's Ray node is up (its raylet runs): only then does ``ray start`` hold
        #: anything that SIGTERM must let it stop cleanly
        self.node_up = False
        self._start_lock_file: IO[str] | None = None  # see _take_start_lock
        self._port_watch_started = False
        self.gcs: GcsNodes | DriverNodes | None = None
        self.raylet_pid: int | None = None  # this node's raylet, once own_raylet_args found it
        self.budget = Budget(cfg.facts_budget)

    @property
    def ray(self) -> subprocess.Popen:
        """This Worker's ``ray start`` process (RuntimeError before :meth:`start_ray` ran it)."""
        if self.ray_proc is None:
            raise RuntimeError("`ray start` has not been run yet")
        return self.ray_proc

    # signals
    def on_stop_signal(self, signum, _frame) -> None:
        self.stopping.set()
        for proc in list(self.children):
            if proc.poll() is None:
                try:
                    proc.send_signal(self._stop_signal_for(proc))
                except ProcessLookupError:
                    pass

    def _stop_signal_for(self, proc: subprocess.Popen) -> int:
        """SIGTERM, except for a Worker's ``ray start`` whose node is not up yet: it may be
        retrying the head's GCS, where it ignores SIGTERM for up to a minute (Ray 2.60), and it
        has started nothing yet that needs a clean stop, so it gets SIGKILL."""
        if proc is self.ray_proc and not self.node_up and not self.cfg.is_head:
            return signal.SIGKILL
        return signal.SIGTERM

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv,
            env=env or self.env,
            cwd=self.cfg.working_dir or None,
            stdin=subprocess.DEVNULL,
        )
        self.children.append(proc)
        if self.stopping.is_set():
            proc.send_signal(signal.SIGTERM)
        return proc

    def _ray(self) -> str:
        if self.cfg.ray_executable:
            return self.cfg.ray_executable
        local = os.path.join(os.path.dirname(sys.executable), "ray")
        if os.access(local, os.X_OK):
            return local
        found = shutil.which("ray", path=self.env.get("PATH"))
        if not found:
            raise BootstrapError(
                "RayStartFailed",
                f"no `ray` executable next to {sys.executable} or on PATH; install ray in the "
                "Worker's environment",
                EXIT_RAY_START_FAILED,
            )
        return found

    def _check_stopped(self) -> None:
        if self.stopping.is_set():
            raise BootstrapError("Stopped", "stopped by signal", EXIT_STOPPED)

    def prepare(self) -> None:
        script = self.cfg.prepare_script
        if not script.strip():
            return
        emit("phase", phase="Preparing")
        started = time.monotonic()
        proc = self._spawn(script_argv(script))
        try:
            code = proc.wait(timeout=self.cfg.prepare_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BootstrapError(
                "PrepareTimeout",
                f"prepare script still running after {self.cfg.prepare_timeout:g} s",
                EXIT_PREPARE_TIMEOUT,
                timeout_seconds=self.cfg.prepare_timeout,
            ) from None
        self._check_stopped()
        if code != 0:
            # the Worker exits with the script's own code where it is one (1..127), so `EXIT`
            # columns show what the user's script returned
            raise BootstrapError(
                "PrepareFailed",
                f"prepare script exited with code {code}",
                code if 0 < code < 128 else EXIT_PREPARE_FAILED,
                exit_code=code,
            )
        emit("phase", phase="Prepared", seconds=round(time.monotonic() - started, 3))

    def check_ray_auth(self) -> None:
        """Token authentication of this Run's Ray cluster (``RAY_AUTH_MODE=token`` from RLark):
        a Ray older than :data:`RAY_TOKEN_AUTH` ignores it, so it would run with a GCS anyone
        on its network may join. Refused (``RayTooOld``), unless the server allows
        unauthenticated Ray (``RLARK_ALLOW_UNAUTHENTICATED_RAY=1``); a ``facts`` line says
        which held (``ray_auth``), for the run record.

        Raises:
            BootstrapError: ``RayTooOld``.
        """
        if self.env.get("RAY_AUTH_MODE") != "token":
            emit("facts", ray_auth={"mode": "none", "why": "the server gave this Run no token"})
            return
        version = ray_version()
        if version is None or version >= RAY_TOKEN_AUTH:
            emit("facts", ray_auth={"mode": "token"})
            return
        shown = ".".join(map(str, version))
        want = ".".join(map(str, RAY_TOKEN_AUTH))
        if self.env.get("RLARK_ALLOW_UNAUTHENTICATED_RAY") == "1":
            for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
                self.env.pop(name, None)
            emit("facts", ray_auth={"mode": "none", "why": f"Ray {shown} has no token "
                                    f"authentication (Ray {want}+); the server allows that"})
            return
        raise BootstrapError(
            "RayTooOld",
            f"Ray {shown} in this Worker's environment has no token authentication (Ray {want} "
            "or later), so any process on its network could join this Run's Ray cluster; "
            f"install ray>={want} (e.g. in the prepare script), or have the server's "
            "administrator allow unauthenticated Ray (rlark server --allow-unauthenticated-ray)",
            EXIT_BAD_CONFIG,
        )

    def start_ray(self) -> subprocess.Popen:
        argv = build_ray_start_command(self.cfg, self._ray())
        if self.cfg.ray_temp_dir:
            os.makedirs(self.cfg.ray_temp_dir, exist_ok=True)
        self._take_start_lock()
        emit("phase", phase="StartingRay", command=shlex.join(argv))
        self.ray_proc = self._spawn(argv)
        return self.ray_proc

    # Ray < 2.55 on a shared host: one node starts at a time (RAY_PER_NODE_TEMP_DIR)
    def _start_lock_path(self) -> str | None:
        """The Run's start lock beside the Workers' Ray temp dirs, when this Worker's Ray puts
        every node of the Run into the head's session directory (Ray < 2.55 ignores a non-head
        node's ``--temp-dir``), i.e. the nodes share a host's /tmp (the local runtime); else
        None. Nodes then start one at a time, as Ray's own multi-node-on-one-host test cluster
        starts them (ray.cluster_utils), so each takes its own socket and log names there."""
        version = ray_version()
        if not self.cfg.ray_temp_dir or version is None or version >= RAY_PER_NODE_TEMP_DIR:
            return None
        parent = os.path.dirname(os.path.abspath(self.cfg.ray_temp_dir))
        return os.path.join(parent, f".{self.cfg.run_id or 'run'}.ray-start.lock")

    def _take_start_lock(self) -> None:
        """Hold the start lock (:meth:`_start_lock_path`) until :meth:`wait_node_up` ends.
        Other Workers first wait for the head's GCS (which the head opens holding the lock), so
        no Worker holds it while waiting for a head that cannot start."""
        path = self._start_lock_path()
        if path is None or self._start_lock_file is not None:
            return
        import fcntl

        if not self.cfg.is_head:
            while not _port_open(self.cfg.head_host, self.cfg.head_port):
                self._check_stopped()
                if time.monotonic() > self.join_deadline:
                    return  # the caller's deadline check reports it
                time.sleep(HEAD_POLL_SECONDS)
        f = open(path, "a")
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if self.stopping.is_set() or time.monotonic() > self.join_deadline:
                    f.close()
                    self._check_stopped()
                    return
                time.sleep(HEAD_POLL_SECONDS)
        self._start_lock_file = f

    def _release_start_lock(self) -> None:
        f, self._start_lock_file = self._start_lock_file, None
        if f is not None:
            f.close()  # closing the file drops its flock

    # "No available ports": Ray's worker-port range is exhausted
    def _watch_worker_ports(self, raylet: dict[str, str]) -> None:
        """Watch this node's Ray logs (the raylet's ``--log_dir``) in a thread and emit one
        ``warning`` lifecycle line (reason ``RayWorkerPortsExhausted``) when a worker process
        could not start for want of a port. Skipped where the log directory is the head's and
        this is not the head (Ray < 2.55, shared session): the head watches it for all nodes."""
        log_dir = raylet.get("log_dir")
        if not log_dir or self._port_watch_started:
            return
        own = (self.cfg.is_head or not self.cfg.ray_temp_dir
               or os.path.abspath(log_dir).startswith(os.path.abspath(self.cfg.ray_temp_dir) + os.sep))
        if not own:
            return
        self._port_watch_started = True
        lo = self.cfg.ray_ports.get("min-worker-port")
        hi = self.cfg.ray_ports.get("max-worker-port")

        def watch() -> None:
            offsets: dict[str, int] = {}
            while not self.stopping.wait(PORT_WATCH_SECONDS):
                where = find_port_exhaustion(log_dir, offsets)
                if where:
                    emit("warning", reason="RayWorkerPortsExhausted",
                         message=port_exhaustion_message(self.cfg, lo, hi, where),
                         node_rank=self.cfg.node_rank, worker=self.cfg.worker)
                    return

        threading.Thread(target=watch, daemon=True).start()

    def _ray_exited(self, what: str) -> BootstrapError:
        """The failure of this Worker's ``ray start`` ending: ``RayStartFailed`` before its node
        was up; after, ``HeadLost`` on the head (its GCS and raylet are the Run's cluster, so
        the cluster is gone) and ``NodeLost`` on any other Worker."""
        code = self.ray.poll() if self.ray_proc else None
        self._check_stopped()
        if what == "start":
            return BootstrapError("RayStartFailed",
                                  f"`ray start` exited with code {code} before the node was up",
                                  EXIT_RAY_START_FAILED, exit_code=code)
        if self.cfg.is_head:
            return BootstrapError("HeadLost",
                                  f"the head's `ray start` (its GCS and raylet) exited with code "
                                  f"{code}: the Run's Ray cluster is gone", EXIT_NODE_LOST,
                                  exit_code=code)
        return BootstrapError("NodeLost",
                              f"`ray start` exited with code {code} while the node should be alive",
                              EXIT_NODE_LOST, exit_code=code)

    def find_own_node_id(self) -> str | None:
        """This node's Ray node id from its raylet's command line (``--node_id=``)."""
        args = self.own_raylet_args()
        return args.get("node_id") if args else None

    def own_raylet_args(self) -> dict[str, str] | None:
        """This node's raylet's ``--name=value`` flags (``node_id``, ``raylet_socket_name``,
        ``store_socket_name``, ``log_dir``...; :func:`raylet_flags`), found the way Ray's own
        driver finds a local raylet (ray._private.services.find_node_ids); the node IP and
        node-manager port single it out when several raylets are visible. None: not running."""
        want_port = self.cfg.ray_ports.get("node-manager-port")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"/raylet"):
                continue
            args = [a.decode(errors="replace") for a in argv]
            if self.cfg.node_ip and f"--node_ip_address={self.cfg.node_ip}" not in args:
                continue
            if want_port and f"--node_manager_port={want_port}" not in args:
                continue
            flags = raylet_flags(args)
            if flags.get("node_id"):
                self.raylet_pid = int(pid)
                return flags
        return None

    def _report_raylet_rank(self) -> None:
        """A ``facts`` line with the ``RLINF_NODE_RANK`` this node's raylet really has in its
        environment (:func:`raylet_env_value`), the value RLinf's node probe reads."""
        if self.raylet_pid is None:
            return
        try:
            value = raylet_env_value(self.raylet_pid, "RLINF_NODE_RANK")
            emit("facts", ray_node_rank={"rayletPid": self.raylet_pid, "rayletEnv": value,
                                         "source": f"/proc/{self.raylet_pid}/environ"})
        except OSError as exc:
            emit("facts", ray_node_rank={"rayletPid": self.raylet_pid,
                                         "absent": exc.strerror or str(exc)})

    def wait_node_up(self, deadline: float) -> str | None:
        """Wait until this node's raylet runs (it is started only once the GCS answered) and
        return its node id; None when ``ray start`` exited first or the deadline passed. Under
        :meth:`_start_lock` also until its sockets exist (the next node's names depend on them),
        and the lock is released on the way out. Starts :meth:`_watch_worker_ports`."""
        try:
            return self._wait_node_up(deadline)
        finally:
            self._release_start_lock()

    def _wait_node_up(self, deadline: float) -> str | None:
        while time.monotonic() < deadline:
            if self.ray.poll() is not None:
                return None
            self._check_stopped()
            args = self.own_raylet_args()
            if args and (self._start_lock_file is None or all(
                    os.path.exists(args.get(k) or "/")
                    for k in ("raylet_socket_name", "store_socket_name"))):
                self.node_up = True
                self._watch_worker_ports(args)
                self._report_raylet_rank()
                return args["node_id"]
            time.sleep(HEAD_POLL_SECONDS)
        return None

    # head
    def join_barrier(self) -> dict[int, dict]:
        cfg = self.cfg
        start_deadline = time.monotonic() + max(RAY_START_TIMEOUT, cfg.join_timeout)
        while not _port_open(cfg.head_host, cfg.head_port):
            if self.ray.poll() is not None:
                raise self._ray_exited("start")
            self._check_stopped()
            if time.monotonic() > start_deadline:
                raise BootstrapError(
                    "RayStartFailed", "the head's GCS never opened its port", EXIT_RAY_START_FAILED
                )
            time.sleep(0.05)
        try:
            self.gcs = open_node_table(cfg.head_address, self.env, on_spawn=self.children.append)
        except BootstrapError:
            raise
        except Exception as exc:  # the port is open but the GCS does not answer
            self._check_stopped()
            raise BootstrapError(
                "RayStartFailed", f"the head's GCS does not answer ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})", EXIT_RAY_START_FAILED,
            ) from None
        node_id = self.wait_node_up(start_deadline)
        if node_id is None:
            if self.ray.poll() is not None:
                raise self._ray_exited("start")
            self._check_stopped()
            raise BootstrapError("RayStartFailed", "the head's raylet never started",
                                 EXIT_RAY_START_FAILED)
        emit("phase", phase="RayStarted", ray_node_id=node_id)
        deadline = self.join_deadline  # from this Worker's start, prepare script included
        emit("phase", phase="Joining", expected=cfg.num_nodes)
        last: tuple | None = None
        registered = False  # the head's own node is in the GCS's table: its `ray start` is done
        while True:
            if self.ray.poll() is not None:
                raise self._ray_exited("alive" if registered else "start")
            self._check_stopped()
            try:
                nodes = self._nodes()
            except BootstrapError:
                # a head whose own `ray start` fails (Ray's "The current node timed out during
                # startup") takes its GCS down with it: a failed start, not a lost head
                if not registered and self._ray_exits_within(RAY_EXIT_WAIT_SECONDS):
                    raise self._ray_exited("start") from None
                raise
            by_rank, missing, problems = check_ranks(nodes, cfg.run_id, cfg.num_nodes)
            registered = registered or 0 in by_rank
            state = (tuple(sorted(by_rank)), tuple(problems))
            if state != last:
                last = state
                emit(
                    "nodes",
                    joined=[
                        {
                            "node_rank": r,
                            "ray_node_id": n["NodeID"],
                            "ip": n["NodeManagerAddress"],
                            "hostname": n.get("NodeManagerHostname"),
                            "role": (n.get("Labels") or {}).get(LABEL_ROLE),
                            # as Ray's node table has them (GcsNodeInfo labels, resources_total)
                            "labels": n.get("Labels") or {},
                            "resources": n.get("Resources") or {},
                        }
                        for r, n in sorted(by_rank.items())
                    ],
                    missing=missing,
                )
            if problems:
                raise BootstrapError(
                    "RankMismatch",
                    "node ranks are wrong: " + "; ".join(problems),
                    EXIT_RANK_MISMATCH,
                    problems=problems,
                )
            if not missing:
                return by_rank
            if time.monotonic() > deadline:
                raise BootstrapError(
                    "JoinTimeout",
                    f"rank{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(str, missing))} did not join within "
                    f"{cfg.join_timeout + JOIN_SLACK_SECONDS:g} s of the head's start",
                    EXIT_JOIN_TIMEOUT,
                    missing_ranks=missing,
                    joined_ranks=sorted(by_rank),
                )
            time.sleep(BARRIER_POLL_SECONDS)

    def _ray_exits_within(self, seconds: float) -> bool:
        """Whether this Worker's ``ray start`` exits within ``seconds``."""
        try:
            self.ray.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _nodes(self) -> list[dict]:
        if self.gcs is None:
            raise RuntimeError("the node table is not open yet (start_ray opens it)")
        try:
            return self.gcs.nodes()
        except Exception as exc:
            self._check_stopped()
            raise BootstrapError(
                "HeadLost", f"lost the connection to this Run's Ray GCS ({type(exc).__name__})",
                EXIT_NODE_LOST,
            ) from None

    def run_head(self) -> int:
        """Start the head's Ray, pass the join barrier, then have the keeper start the run script
        (keeper.py: it starts and waits for it, so its exit status is observed, not reported)
        and watch every rank's node until the keeper says the run script ended. Returns the
        run script's exit status as the keeper saw it.

        Raises:
            BootstrapError: the barrier failed, a node was lost while the run script ran (the
                keeper stops the run script when it reads the ``failed`` report), or there is no
                keeper to start the run script (``BadConfig``).
        """
        if _control is None:
            raise BootstrapError("BadConfig", "RLARK_CONTROL_FD is not set: the head's run script "
                                 "is started by RLark's keeper (keeper.py), which is not there",
                                 EXIT_BAD_CONFIG)
        self.start_ray()
        # Ray's Python package takes a second to import: do it while the head's Ray starts
        threading.Thread(target=lambda: __import__("ray._raylet"), daemon=True).start()
        self.join_barrier()
        emit("start_run")
        # The barrier's connection stays open: the head keeps checking that every rank's node is
        # alive (a frozen or partitioned Worker is invisible to its process table; Ray's health
        # checks see it), and reports a failure, which makes the keeper stop the run script,
        # instead of letting RLinf wait on a dead node.
        next_check = time.monotonic() + NODE_CHECK_SECONDS
        try:
            while True:
                said = _control.wait(0.5)
                if said is not None:
                    code, run_started = said
                    break
                if self.stopping.is_set():
                    continue
                failure = None
                if self.ray.poll() is not None:
                    failure = self._ray_exited("alive")
                elif time.monotonic() >= next_check:
                    next_check = time.monotonic() + NODE_CHECK_SECONDS
                    try:
                        _, missing, problems = check_ranks(self._nodes(), self.cfg.run_id,
                                                           self.cfg.num_nodes)
                    except BootstrapError as exc:
                        failure = exc
                    else:
                        if missing or problems:
                            lost = ", ".join(map(str, missing))
                            failure = BootstrapError(
                                "NodeLost",
                                f"Ray no longer sees the node of rank{'s' if len(missing) > 1 else ''} "
                                f"{lost} alive" if missing else "; ".join(problems),
                                EXIT_NODE_LOST, missing_ranks=missing,
                            )
                if failure is not None:
                    raise failure
        finally:
            if self.gcs is not None:
                self.gcs.close()
            self.gcs = None
        self._check_stopped()
        self._report_hydra_outputs(run_started)
        return code

    def _report_hydra_outputs(self, since: float) -> None:
        """A ``facts`` line with the Hydra output directory the run script wrote (the newest
        ``.hydra/config.yaml`` below the working directory written since it started), so the
        record holds the config RLinf really ran; nothing when there is none."""
        try:
            top = self.cfg.working_dir or os.getcwd()
            found = find_hydra_outputs(top, since - 1.0)
            if found:
                emit("facts", hydra_output={**hydra_output_facts(found[0]),
                                            "others": found[1:10]})
        except Exception as exc:  # noqa: BLE001 - a missing fact never fails the Run
            emit("facts", hydra_output={"absent": f"{type(exc).__name__}: {exc}"})

    # other Workers
    def _head_unreachable(self, budget: float) -> BootstrapError:
        return BootstrapError(
            "HeadUnreachable",
            f"could not join the head {self.cfg.head_address} within {budget:g} s of this "
            "Worker's start",
            EXIT_HEAD_UNREACHABLE,
        )

    def run_worker(self) -> int:
        cfg = self.cfg
        budget = cfg.join_timeout + JOIN_SLACK_SECONDS  # from this Worker's start, prepare included
        deadline = self.join_deadline
        emit("phase", phase="WaitingForHead", head=cfg.head_address)
        while True:
            # `ray start --address` retries the head itself, so starting at once overlaps its own
            # start-up (seconds of imports) with the head's; if it gives up before the head is
            # up (a long prepare script on the head), wait for the head's port and try again.
            proc = self.start_ray()
            node_id = self.wait_node_up(deadline)
            if node_id is not None:
                break
            self._check_stopped()
            if proc.poll() is None:
                proc.kill()  # still retrying the GCS, deaf to SIGTERM; nothing of it runs yet
                proc.wait()
            if time.monotonic() > deadline:
                raise self._head_unreachable(budget)
            if _port_open(cfg.head_host, cfg.head_port):
                raise self._ray_exited("start")  # the head answers: this node failed by itself
            emit("phase", phase="WaitingForHead", head=cfg.head_address, retry=True)
            while not _port_open(cfg.head_host, cfg.head_port):
                self._check_stopped()
                if time.monotonic() > deadline:
                    raise self._head_unreachable(budget)
                time.sleep(HEAD_POLL_SECONDS)
        emit("phase", phase="RayStarted", ray_node_id=node_id)
        code = proc.wait()
        self._check_stopped()
        raise BootstrapError(
            "NodeLost",
            f"`ray start --block` exited with code {code}: this Ray node is gone",
            EXIT_NODE_LOST,
            exit_code=code,
        )

    def run(self) -> int:
        try:
            emit("facts", **collect_facts(self.cfg))
            if self.cfg.working_dir and not os.path.isdir(self.cfg.working_dir):
                # e.g. a path of the submitting machine that is not in the image (Kubernetes)
                raise BootstrapError(
                    "BadConfig",
                    f"RLARK_WORKING_DIR={self.cfg.working_dir!r} (spec.workingDir) is not a "
                    "directory in this Worker",
                    EXIT_BAD_CONFIG,
                )
            self.prepare()
            self.check_ray_auth()  # after the prepare script, which may install Ray
            # after the prepare script, so what it installed is what is recorded
            emit("facts", **record_facts(self.cfg, self.budget))
            code = self.run_head() if self.cfg.is_head else self.run_worker()
        except BootstrapError as exc:
            if exc.reason == "Stopped" or self.stopping.is_set():
                code = EXIT_STOPPED  # the keeper reports the stop
            else:
                emit(
                    "failed",
                    reason=exc.reason,
                    message=exc.message,
                    node_rank=self.cfg.node_rank,
                    worker=self.cfg.worker,
                    status=exc.status,  # what this Worker exits with (shown once its Run ends)
                    **exc.details,
                )
                code = exc.status
        finally:
            self.shutdown(self.cfg.stop_grace)
        return code

    def shutdown(self, grace: float = 10.0) -> None:
        """Terminate every child still running (Ray node, scripts): SIGTERM, then SIGKILL."""
        alive = [p for p in self.children if p.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(self._stop_signal_for(proc))
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        for proc in alive:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def main() -> int:
    """Entry point: ``python worker.py`` with the ``RLARK_*`` environment, started by the keeper
    (keeper.py), which gives it ``RLARK_REPORT_FD`` and ``RLARK_CONTROL_FD``."""
    global _report_fd, _control
    if isinstance(sys.stdout, io.TextIOWrapper):  # the workload's lines reach the log at once
        sys.stdout.reconfigure(line_buffering=True)
    fd = os.environ.pop("RLARK_REPORT_FD", "")
    _report_fd = int(fd) if fd.isdigit() else None
    fd = os.environ.pop("RLARK_CONTROL_FD", "")
    _control = KeeperLink(int(fd)) if fd.isdigit() else None
    try:
        cfg = BootstrapConfig.from_env(dict(os.environ))
    except BootstrapError as exc:
        emit("failed", reason=exc.reason, message=exc.message, status=exc.status)
        return exc.status
    boot = Bootstrap(cfg, dict(os.environ))
    signal.signal(signal.SIGTERM, boot.on_stop_signal)
    signal.signal(signal.SIGINT, boot.on_stop_signal)
    return boot.run()


if __name__ == "__main__":
    sys.exit(main())
