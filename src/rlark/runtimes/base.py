"""The Runtime protocol and the pure builders every runtime shares.

A runtime places Workers somewhere (local process groups, Kubernetes Pods) and reports what it
sees; it never decides a Run's fate (that is the controller's state machine). Every runtime runs
the same bootstrap program with the same ``RLARK_*`` environment, built by
:func:`bootstrap_env`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Protocol

from rlark.preflight import parse_cpu, parse_memory_bytes
from rlark.ranks import PlannedWorker
from rlark.spec import RESERVED_ENV, RESERVED_ENV_PREFIX, Job, Role

MiB = 1024 * 1024
#: object store per Ray node: 30 % of the role's memory, between 128 MiB and 4 GiB; 256 MiB when
#: the role gives no memory (Ray's default would claim ~30 % of the host's /dev/shm per node).
OBJECT_STORE_FRACTION = 0.3
OBJECT_STORE_MIN = 128 * MiB
OBJECT_STORE_MAX = 4096 * MiB
OBJECT_STORE_DEFAULT = 256 * MiB


def stop_grace(termination_grace: float) -> float:
    """The bootstrap's own grace for its children: 2 s less than RLark's, at least 0.5 s."""
    return max(0.5, float(termination_grace) - 2.0)


@dataclass(frozen=True)
class RayResources:
    """What ``ray start`` is told about one Worker's node."""

    num_cpus: int | None
    num_gpus: int
    memory_bytes: int | None
    object_store_bytes: int
    custom: dict[str, float] = field(default_factory=dict)


def ray_resources(role: Role) -> RayResources:
    """Role resources -> Ray node resources.

    ``cpu`` is rounded up to whole CPUs (``ray start --num-cpus`` takes an integer), ``memory``
    becomes ``--memory`` in bytes, ``gpu`` ``--num-gpus``, named ``devices`` ``--resources``.
    Assumes a spec that passed preflight.
    """
    res = role.resources
    cpus = math.ceil(parse_cpu(res.cpu)) if res.cpu is not None else None
    memory = parse_memory_bytes(res.memory) if res.memory is not None else None
    if memory is None:
        store = OBJECT_STORE_DEFAULT
    else:
        store = int(min(OBJECT_STORE_MAX, max(OBJECT_STORE_MIN, memory * OBJECT_STORE_FRACTION)))
    return RayResources(
        num_cpus=cpus,
        num_gpus=res.gpu,
        memory_bytes=memory,
        object_store_bytes=store,
        custom={k: float(v) for k, v in sorted(res.devices.items())},
    )


def bootstrap_env(
    job: Job,
    worker: PlannedWorker,
    *,
    run_uid: str,
    head_address: str,
    event_token: str | None = None,
    node_ip: str | None = None,
    ray_ports: dict[str, int] | None = None,
    ray_temp_dir: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one Worker's bootstrap (the contract in ``bootstrap/worker.py``).

    The role's own ``env`` comes first; RLark's variables (``RLINF_NODE_RANK``, ``RLARK_*``) are
    written last so a spec can never override them (preflight refuses such specs anyway).
    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` defaults to 0: when RLark stops a Worker the whole
    Ray cluster is going away, so draining (30 s by default in Ray 2.60) only delays the stop.
    """
    role = job.role(worker.role)
    assert role is not None, worker.role
    res = ray_resources(role)
    env: dict[str, str] = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.update({
        e.name: e.value for e in role.env
        if e.name not in RESERVED_ENV and not e.name.startswith(RESERVED_ENV_PREFIX)
    })
    env.update(extra or {})
    env.update(
        {
            "RLINF_NODE_RANK": str(worker.node_rank),
            "RLARK_JOB": job.name,
            "RLARK_RUN_ID": run_uid,
            "RLARK_ROLE": worker.role,
            "RLARK_WORKER": worker.name,
            "RLARK_NUM_NODES": str(job.total_workers),
            "RLARK_HEAD_ADDRESS": head_address,
            "RLARK_NUM_GPUS": str(res.num_gpus),
            "RLARK_OBJECT_STORE_BYTES": str(res.object_store_bytes),
            "RLARK_JOIN_TIMEOUT_SECONDS": f"{job.spec.failure_policy.join_timeout_seconds:g}",
            "RLARK_PREPARE_TIMEOUT_SECONDS": f"{job.spec.failure_policy.prepare_timeout_seconds:g}",
            "RLARK_PREPARE_SCRIPT": role.prepare_script,
            # the bootstrap stops its own children within this, so it exits with its own code
            # before RLark's SIGKILL at terminationGracePeriodSeconds
            "RLARK_STOP_GRACE_SECONDS": f"{stop_grace(job.spec.termination_grace_period_seconds):g}",
        }
    )
    if event_token:
        env["RLARK_EVENT_TOKEN"] = event_token
    if worker.is_head:
        env["RLARK_RUN_SCRIPT"] = job.spec.run_script
    if res.num_cpus is not None:
        env["RLARK_NUM_CPUS"] = str(res.num_cpus)
    if res.memory_bytes is not None:
        env["RLARK_MEMORY_BYTES"] = str(res.memory_bytes)
    if res.custom:
        env["RLARK_RESOURCES"] = json.dumps(res.custom, sort_keys=True)
    if job.spec.working_dir:
        env["RLARK_WORKING_DIR"] = job.spec.working_dir
    if node_ip:
        env["RLARK_NODE_IP"] = node_ip
    if ray_ports:
        env["RLARK_RAY_PORTS"] = json.dumps(ray_ports, sort_keys=True)
    if ray_temp_dir:
        env["RLARK_RAY_TEMP_DIR"] = ray_temp_dir
    return env


@dataclass(frozen=True)
class WorkerRef:
    """How a runtime finds a Worker it started: a process (local) or an object name (a Pod)."""

    name: str
    pid: int | None = None
    pid_started: float | None = None  # process start time (seconds since the epoch)
    handle: str | None = None  # runtime-specific id, e.g. the Pod name
    run_uid: str | None = None
    node_ip: str | None = None  # where place() put it (local runtime: its reservations)
    port_base: int | None = None


@dataclass
class WorkerPlace:
    """Where one Worker's Ray node lives: its address, ports and Ray temp dir (None = Ray's
    defaults, as in a Pod with its own network namespace)."""

    node_ip: str | None = None
    port_base: int | None = None
    ray_ports: dict[str, int] = field(default_factory=dict)
    ray_temp_dir: str | None = None


@dataclass
class Placement:
    """A Run's placement: the head's GCS address and each Worker's place, by node rank."""

    head_address: str
    workers: dict[int, WorkerPlace]


@dataclass(frozen=True)
class Taken:
    """Addresses and port blocks live Workers of any Run hold now (from the store)."""

    ips: frozenset[str] = frozenset()
    port_bases: frozenset[int] = frozenset()


@dataclass
class LaunchSpec:
    """One Worker to start: who it is, its bootstrap environment, where its log goes."""

    job: Job
    run_uid: str
    worker: PlannedWorker
    env: dict[str, str]
    log_path: str
    place: WorkerPlace
    python: str | None = None
    #: kubernetes: the namespace of the Run's objects (its project's); None: the server's
    namespace: str | None = None


@dataclass
class Launched:
    """What a runtime returns for a started Worker (stored on the Worker row)."""

    pid: int | None = None
    pid_started: float | None = None
    handle: str | None = None


@dataclass
class Observed:
    """What a runtime sees of a Worker now.

    ``failure`` is a runtime-level reason and message when the runtime itself knows why the
    Worker cannot run (a Pod's ``ImagePull``, ``Unschedulable``, ``OOMKilled``...); the state
    machine fails the Run with it. ``facts`` are merged into the Worker's facts."""

    alive: bool
    exit_code: int | None = None  # None while alive, or when the runtime cannot know
    failure: tuple[str, str] | None = None
    #: what the runtime knows of the Worker for the run record (a Pod's image digest, node...)
    facts: dict | None = None


class Runtime(Protocol):
    """Where Workers run. Implementations: ``local`` (process groups); ``kubernetes`` (Pods).

    Every method returns quickly; nothing here decides a Run's fate."""

    name: str

    def place(self, job: Job, run_uid: str, workers: list[PlannedWorker], taken: Taken,
              namespace: str | None = None) -> Placement:
        """Choose the head address and every Worker's address/ports/temp dir for a new Run
        (``namespace``: where a runtime with namespaces puts it; others ignore it).

        Raises:
            RuntimeError: no room (e.g. no free port block); the Run fails with LaunchFailed.
        """

    def launch(self, spec: LaunchSpec) -> Launched:
        """Start one Worker; return at once (do not wait for Ray). Its stdout/stderr must end up
        in ``spec.log_path`` (the controller reads lifecycle lines from there)."""

    def observe(self, ref: WorkerRef) -> Observed:
        """Is the Worker still alive, and if not, its exit code when known."""

    def signal_stop(self, ref: WorkerRef) -> None:
        """Ask the Worker to stop (SIGTERM to its group / delete its Pod)."""

    def kill(self, ref: WorkerRef) -> None:
        """Stop the Worker now (SIGKILL to its group / force-delete its Pod)."""

    def forget(self, ref: WorkerRef) -> None:
        """The Worker's end is recorded; drop what the runtime keeps about it."""

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        """Every Worker of the Run is gone: remove what the Run alone needed (Services...)."""
