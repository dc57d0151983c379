"""The bootstrap's settings: what a Worker is told through its environment
(:class:`BootstrapConfig`), the failures it can end with (:class:`BootstrapError`, exit codes)
and the timings of its waits. Pure: nothing here starts a process or opens a file.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field

# Waits (seconds)
BARRIER_POLL_SECONDS = 0.1  # contract: at most 0.5 s; 0.1 s keeps join detection prompt
NODE_CHECK_SECONDS = 2.0  # while the run script runs, the head checks every rank's node this often
RAY_START_TIMEOUT = 180.0  # the head's own Ray must be up (GCS, raylet, driver) within this
HEAD_POLL_SECONDS = 0.1
JOIN_SLACK_SECONDS = 5.0  # see RayNode.join_deadline
#: after the head's GCS stops answering during the join barrier: how long to wait for the head's
#: own `ray start` to exit, which makes it a failed start (RayStartFailed) rather than HeadLost
RAY_EXIT_WAIT_SECONDS = 5.0
#: how many times a Worker other than the head runs `ray start` when it ends before its node is
#: up while the head answers: Ray gives a new raylet a fixed 30 s to register with the GCS
#: (ray/_private/node.py ``raylet_start_wait_time_s``, Ray 2.47-2.60, no setting), which a
#: machine busy with other Workers' start-ups can miss; the join deadline still bounds them all
RAY_START_ATTEMPTS = 2
#: seconds all record-fact probes of one Worker may take together (RLARK_FACTS_BUDGET_SECONDS
#: changes it; one probe's own limit is facts_code.FACT_PROBE_SECONDS)
FACT_BUDGET_SECONDS = 20.0

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
