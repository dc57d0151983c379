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
  connection (polling every 0.1 s, bounded by ``RLARK_JOIN_TIMEOUT_SECONDS``, naming missing
  ranks), rank check (0..N-1 exactly once), ``RAY_ADDRESS`` and the run script, whose exit code
  is the head's exit code; other Workers: wait for the head, ``ray start --block``, exit non-zero
  when their node fails.
* Progress and facts are written to stdout as lifecycle lines: ``RLARK_EVENT {json}``, one JSON
  object per line, so every runtime learns them from the Worker's log.

Fail closed: on any failure the bootstrap reports a reason and exits non-zero; it never goes on.
"""

from __future__ import annotations

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

EVENT_PREFIX = "RLARK_EVENT "
LABEL_RANK = "rlark.io/node-rank"
LABEL_ROLE = "rlark.io/role"
LABEL_RUN = "rlark.io/run"
BARRIER_POLL_SECONDS = 0.1  # contract: at most 0.5 s; 0.1 s keeps join detection prompt
NODE_CHECK_SECONDS = 2.0  # while the run script runs, the head checks every rank's node this often
RAY_START_TIMEOUT = 180.0  # the head's own Ray must be up (GCS, raylet, driver) within this
HEAD_POLL_SECONDS = 0.1

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
        ``RLARK_JOIN_TIMEOUT_SECONDS``, ``RLARK_PREPARE_TIMEOUT_SECONDS``, ``RLARK_RAY``.

        Raises:
            BootstrapError: ``BadConfig`` naming the variable and its value.
        """

        def need(name: str) -> str:
            value = env.get(name, "")
            if not value:
                raise BootstrapError("BadConfig", f"{name} is not set", EXIT_BAD_CONFIG)
            return value

        def as_int(name: str, value: str | None) -> int | None:
            if value in (None, ""):
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

        rank = as_int("RLINF_NODE_RANK", need("RLINF_NODE_RANK"))
        num_nodes = as_int("RLARK_NUM_NODES", need("RLARK_NUM_NODES"))
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
        )


# --- pure builders --------------------------------------------------------------------------------


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
            rank = int(raw)
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


class GcsNodes:
    """The node table of a Ray cluster, read over one GCS connection: Ray's own GcsClient
    (``ray._raylet.GcsClient``, what ``ray status`` and Ray's driver use to find nodes; Ray 2.60).

    Not a Ray driver (``ray.init``): nothing to shut down, about 1 ms per read, and a GCS that
    goes away (a stopped Run) raises an exception here instead of aborting this process.
    """

    def __init__(self, address: str, timeout: float = 5.0):
        from ray._raylet import GcsClient

        self.timeout = timeout
        self.client = GcsClient(address=address)

    def nodes(self) -> list[dict]:
        """Every node the GCS knows, shaped like ``ray.nodes()``: ``NodeID`` (hex), ``Alive``,
        ``NodeManagerAddress``, ``NodeManagerHostname``, ``Labels``."""
        from ray.core.generated.gcs_pb2 import GcsNodeInfo

        alive = GcsNodeInfo.GcsNodeState.ALIVE
        return [
            {
                "NodeID": node_id.hex(),
                "Alive": info.state == alive,
                "NodeManagerAddress": info.node_manager_address,
                "NodeManagerHostname": info.node_manager_hostname,
                "Labels": dict(info.labels),
            }
            for node_id, info in self.client.get_all_node_info(timeout=self.timeout).items()
        ]


# --- lifecycle lines ------------------------------------------------------------------------------

_emit_lock = threading.Lock()
#: RLARK_EVENT_TOKEN: a per-Run secret that every lifecycle line carries, so lines the run script
#: happens to print (an old Worker log it cats, a copied line) are not taken for this Run's.
#: The bootstrap keeps it out of its children's environment.
_token: str | None = None


def emit(event: str, **data) -> None:
    """Write one lifecycle line ``RLARK_EVENT {"ts": <unix seconds>, "event": ..., ...}``
    (with ``"tok"`` when the Run has an event token)."""
    body = {"ts": round(time.time(), 3), "event": event, **data}
    if _token:
        body["tok"] = _token
    line = EVENT_PREFIX + json.dumps(body)
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


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
        },
    }


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
        self.gcs: GcsNodes | None = None

    # signals
    def on_stop_signal(self, signum, _frame) -> None:
        self.stopping.set()
        for proc in list(self.children):
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

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
        proc = self._spawn(["bash", "-c", script])
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

    def start_ray(self) -> subprocess.Popen:
        argv = build_ray_start_command(self.cfg, self._ray())
        emit("phase", phase="StartingRay", command=shlex.join(argv))
        if self.cfg.ray_temp_dir:
            os.makedirs(self.cfg.ray_temp_dir, exist_ok=True)
        self.ray_proc = self._spawn(argv)
        return self.ray_proc

    def _ray_exited(self, what: str) -> BootstrapError:
        code = self.ray_proc.poll() if self.ray_proc else None
        self._check_stopped()
        return BootstrapError(
            "RayStartFailed" if what == "start" else "NodeLost",
            f"`ray start` exited with code {code} {'before the node was up' if what == 'start' else 'while the node should be alive'}",
            EXIT_RAY_START_FAILED if what == "start" else EXIT_NODE_LOST,
            exit_code=code,
        )

    def find_own_node_id(self) -> str | None:
        """This node's Ray node id from its raylet's command line (``--node_id=``), found the
        way Ray's own driver finds a local raylet (ray._private.services.find_node_ids); the
        node IP and node-manager port single it out when several raylets are visible."""
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
            for arg in args:
                if arg.startswith("--node_id="):
                    return arg.split("=", 1)[1]
        return None

    def wait_node_up(self, deadline: float) -> str | None:
        """Wait until this node's raylet runs (it is started only once the GCS answered) and
        return its node id; None when ``ray start`` exited first or the deadline passed."""
        while time.monotonic() < deadline:
            if self.ray_proc.poll() is not None:
                return None
            self._check_stopped()
            node_id = self.find_own_node_id()
            if node_id:
                return node_id
            time.sleep(HEAD_POLL_SECONDS)
        return None

    # head
    def join_barrier(self) -> dict[int, dict]:
        cfg = self.cfg
        start_deadline = time.monotonic() + max(RAY_START_TIMEOUT, cfg.join_timeout)
        while not _port_open(cfg.head_host, cfg.head_port):
            if self.ray_proc.poll() is not None:
                raise self._ray_exited("start")
            self._check_stopped()
            if time.monotonic() > start_deadline:
                raise BootstrapError(
                    "RayStartFailed", "the head's GCS never opened its port", EXIT_RAY_START_FAILED
                )
            time.sleep(0.05)
        try:
            self.gcs = GcsNodes(cfg.head_address)
        except Exception as exc:  # the port is open but the GCS does not answer
            self._check_stopped()
            raise BootstrapError(
                "RayStartFailed", f"the head's GCS does not answer ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})", EXIT_RAY_START_FAILED,
            ) from None
        node_id = self.wait_node_up(start_deadline)
        if node_id is None:
            if self.ray_proc.poll() is not None:
                raise self._ray_exited("start")
            self._check_stopped()
            raise BootstrapError("RayStartFailed", "the head's raylet never started",
                                 EXIT_RAY_START_FAILED)
        emit("phase", phase="RayStarted", ray_node_id=node_id)
        # the join timeout counts from here: the head's own start-up is bounded above
        deadline = time.monotonic() + cfg.join_timeout
        emit("phase", phase="Joining", expected=cfg.num_nodes)
        last: tuple | None = None
        while True:
            if self.ray_proc.poll() is not None:
                raise self._ray_exited("alive")
            self._check_stopped()
            by_rank, missing, problems = check_ranks(self._nodes(), cfg.run_id, cfg.num_nodes)
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
                    f"{cfg.join_timeout:g} s",
                    EXIT_JOIN_TIMEOUT,
                    missing_ranks=missing,
                    joined_ranks=sorted(by_rank),
                )
            time.sleep(BARRIER_POLL_SECONDS)

    def _nodes(self) -> list[dict]:
        try:
            return self.gcs.nodes()
        except Exception as exc:
            self._check_stopped()
            raise BootstrapError(
                "HeadLost", f"lost the connection to this Run's Ray GCS ({type(exc).__name__})",
                EXIT_NODE_LOST,
            ) from None

    def run_head(self) -> int:
        self.start_ray()
        # Ray's Python package takes a second to import: do it while the head's Ray starts
        threading.Thread(target=lambda: __import__("ray._raylet"), daemon=True).start()
        self.join_barrier()
        env = dict(self.env)
        env["RAY_ADDRESS"] = self.cfg.head_address
        run = self._spawn(["bash", "-c", self.cfg.run_script], env=env)
        emit("running", pid=run.pid)
        # The barrier's connection stays open: the head keeps checking that every rank's node is
        # alive (a frozen or partitioned Worker is invisible to its process table; Ray's health
        # checks see it), and fails the Run instead of letting RLinf wait on a dead node.
        next_check = time.monotonic() + NODE_CHECK_SECONDS
        try:
            while True:
                try:
                    code = run.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.stopping.is_set():
                    continue
                failure = None
                if self.ray_proc.poll() is not None:
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
                    run.terminate()
                    try:
                        run.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        run.kill()
                    raise failure
        finally:
            self.gcs = None
        self._check_stopped()
        if code < 0:
            code = 128 - code  # killed by a signal: shell convention
        emit("run_finished", exit_code=code)
        return code

    # other Workers
    def _head_unreachable(self, budget: float) -> BootstrapError:
        return BootstrapError(
            "HeadUnreachable",
            f"could not join the head {self.cfg.head_address} within {budget:g} s",
            EXIT_HEAD_UNREACHABLE,
        )

    def run_worker(self) -> int:
        cfg = self.cfg
        budget = cfg.join_timeout + cfg.prepare_timeout
        deadline = time.monotonic() + budget
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
                proc.terminate()
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
            code = self.run_head() if self.cfg.is_head else self.run_worker()
        except BootstrapError as exc:
            if exc.reason == "Stopped" or self.stopping.is_set():
                emit("stopped")
                code = EXIT_STOPPED
            else:
                emit(
                    "failed",
                    reason=exc.reason,
                    message=exc.message,
                    node_rank=self.cfg.node_rank,
                    worker=self.cfg.worker,
                    **exc.details,
                )
                code = exc.status
        finally:
            self.shutdown(self.cfg.stop_grace)
        emit("exit", code=code)
        return code

    def shutdown(self, grace: float = 10.0) -> None:
        """Terminate every child still running (Ray node, scripts): SIGTERM, then SIGKILL."""
        alive = [p for p in self.children if p.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(signal.SIGTERM)
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


def _run_as_init(main) -> int:
    """When this process is PID 1 of a PID namespace (local runtime as root; some containers),
    run ``main`` in a child and reap every orphan, as an init must; forward SIGTERM/SIGINT to the
    child; when it ends, SIGTERM what is left and exit with its code (the kernel then kills the
    rest of the namespace)."""
    child = os.fork()
    if child == 0:
        os._exit(main())

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 1
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
    try:
        os.kill(-1, signal.SIGTERM)  # everything else in this namespace
    except ProcessLookupError:
        pass
    end = time.monotonic() + 2  # then the kernel kills the rest of the namespace
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    return code


def main() -> int:
    """Entry point: ``python worker.py`` with the ``RLARK_*`` environment."""
    sys.stdout.reconfigure(line_buffering=True)

    def work() -> int:
        global _token
        _token = os.environ.pop("RLARK_EVENT_TOKEN", None) or None
        try:
            cfg = BootstrapConfig.from_env(dict(os.environ))
        except BootstrapError as exc:
            emit("failed", reason=exc.reason, message=exc.message)
            emit("exit", code=exc.status)
            return exc.status
        boot = Bootstrap(cfg, dict(os.environ))
        signal.signal(signal.SIGTERM, boot.on_stop_signal)
        signal.signal(signal.SIGINT, boot.on_stop_signal)
        return boot.run()

    if os.getpid() == 1:
        return _run_as_init(work)
    return work()


if __name__ == "__main__":
    sys.exit(main())
