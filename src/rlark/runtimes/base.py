"""The Runtime protocol and the pure builders every runtime shares.

Long because: it is the one seam between the runtimes and the rest (the Runtime and
RuntimeProfile protocols, the records they exchange, the Worker environment and Ray sizing every
runtime builds alike); splitting it would make two seams.

A runtime places Workers somewhere (local process groups, Kubernetes Pods) and reports what it
sees; it never decides a Run's fate (that is the controller's state machine). Every runtime runs
the same bootstrap program with the same ``RLARK_*`` environment, built by
:func:`bootstrap_env`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, runtime_checkable

from rlark.findings import Finding
from rlark.preflight.quantities import parse_cpu, parse_memory_bytes
from rlark.ranks import PlannedWorker
from rlark.runtimes.local.ports import (
    UNIT,
    block_size,
    default_worker_ports,
    worker_ports_of,
)
from rlark.spec import (RAY_DEFAULT_MAX_WORKER_PORT, RAY_DEFAULT_MIN_WORKER_PORT, RESERVED_ENV,
                        RESERVED_ENV_PREFIX, Job, Role)
from rlark.status import Reason

if TYPE_CHECKING:
    from rlark.rlinf_config.locations import Filesystem
    from rlark.runtimes.capacity import Capacity

MiB = 1024 * 1024
#: object store per Ray node unless the role sets ``resources.objectStoreMemory``: 30 % of the
#: role's memory, between 128 MiB and 4 GiB; 512 MiB when the role gives no memory (Ray's own
#: default, 30 % of the host's memory, would let every node of a host claim that much /dev/shm).
OBJECT_STORE_FRACTION = 0.3
OBJECT_STORE_MIN = 128 * MiB
OBJECT_STORE_MAX = 4096 * MiB
OBJECT_STORE_DEFAULT = 512 * MiB


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
    #: the role's ``ray.workerPorts`` (None: the runtime's default, see :func:`worker_ports`)
    worker_ports: int | None = None


def default_object_store_bytes(memory_bytes: int | None) -> int:
    """The object store of a node whose role sets no ``objectStoreMemory``: 30 % of its memory,
    between 128 MiB and 4 GiB; 512 MiB without memory."""
    if memory_bytes is None:
        return OBJECT_STORE_DEFAULT
    return int(min(OBJECT_STORE_MAX, max(OBJECT_STORE_MIN, memory_bytes * OBJECT_STORE_FRACTION)))


def ray_resources(role: Role) -> RayResources:
    """Role resources -> Ray node resources.

    ``cpu`` is rounded up to whole CPUs (``ray start --num-cpus`` takes an integer), ``memory``
    becomes ``--memory`` in bytes, ``gpu`` ``--num-gpus``, named ``devices`` ``--resources``,
    ``objectStoreMemory`` (or :func:`default_object_store_bytes`) ``--object-store-memory``.
    Assumes a spec that passed preflight.
    """
    res = role.resources
    cpus = math.ceil(parse_cpu(res.cpu)) if res.cpu is not None else None
    memory = parse_memory_bytes(res.memory) if res.memory is not None else None
    if res.object_store_memory is not None:
        store = parse_memory_bytes(res.object_store_memory)
    else:
        store = default_object_store_bytes(memory)
    return RayResources(
        num_cpus=cpus,
        num_gpus=res.gpu,
        memory_bytes=memory,
        object_store_bytes=store,
        custom={k: float(v) for k, v in sorted(res.devices.items())},
        worker_ports=role.ray.worker_ports,
    )


def worker_ports(role: Role, host_cpus: int) -> int:
    """Worker ports one Worker of ``role`` needs on the local runtime: ``ray.workerPorts``, else
    :func:`~rlark.runtimes.local.ports.default_worker_ports` of the CPUs its node offers Ray
    (``resources.cpu`` rounded up, or ``host_cpus``, which Ray detects when cpu is not set)."""
    res = ray_resources(role)
    if res.worker_ports is not None:
        return res.worker_ports
    return default_worker_ports(res.num_cpus if res.num_cpus is not None else host_cpus)


def local_block_size(role: Role, host_cpus: int) -> int:
    """Ports of the block each Worker of ``role`` takes on the local runtime
    (:func:`~rlark.runtimes.local.ports.block_size` of :func:`worker_ports`)."""
    return block_size(worker_ports(role, host_cpus))


def local_worker_ports(role: Role, host_cpus: int) -> int:
    """The worker-port range each Worker of ``role`` gets on the local runtime: exactly the
    role's ``ray.workerPorts``; else the whole rest of its block (the default rounded up)."""
    res = ray_resources(role)
    if res.worker_ports is not None:
        return res.worker_ports
    return worker_ports_of(local_block_size(role, host_cpus))


def ray_node_view(role: Role, runtime: str, host_cpus: int | None = None) -> dict:
    """What each Worker of ``role`` tells ``ray start``, for ``describe``, the console and the
    API: ``cpus``, ``gpus``, ``memoryBytes`` (None: Ray's default), ``objectStoreBytes``,
    ``workerPorts`` (the size of the worker-port range: the role's value; else on the local
    runtime the default rounded up to fill whole 64-port units, elsewhere Ray's own range),
    ``workerPortsSet`` (the role sets it), ``devices``.

    ``host_cpus``: this machine's CPU count (local runtime; default ``os.cpu_count()``)."""
    res = ray_resources(role)
    if runtime == "local":
        cpus = host_cpus if host_cpus is not None else (os.cpu_count() or 1)
        ports = local_worker_ports(role, cpus)
    elif res.worker_ports is not None:
        ports = res.worker_ports
    else:
        ports = RAY_DEFAULT_MAX_WORKER_PORT - RAY_DEFAULT_MIN_WORKER_PORT + 1
    return {
        "cpus": res.num_cpus,
        "gpus": res.num_gpus,
        "memoryBytes": res.memory_bytes,
        "objectStoreBytes": res.object_store_bytes,
        "workerPorts": ports,
        "workerPortsSet": res.worker_ports is not None,
        "devices": res.custom,
    }


def _size_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def ray_node_summary(view: dict) -> str:
    """One line for a :func:`ray_node_view`: ``8 CPUs, 4 GiB memory, 1.2 GiB object store,
    176 worker ports`` (what ``describe`` and the console show per role)."""
    parts = []
    if view.get("cpus") is not None:
        parts.append(f"{view['cpus']} CPU{'s' if view['cpus'] != 1 else ''}")
    if view.get("gpus"):
        parts.append(f"{view['gpus']} GPU{'s' if view['gpus'] != 1 else ''}")
    if view.get("memoryBytes") is not None:
        parts.append(f"{_size_text(view['memoryBytes'])} memory")
    parts.append(f"{_size_text(view['objectStoreBytes'])} object store")
    parts.append(f"{view['workerPorts']} worker ports")
    return ", ".join(parts)


def stored_block_size(spec: dict, role: str, host_cpus: int) -> int:
    """:func:`local_block_size` of ``role`` in a stored Run spec (for the port ranges live
    Workers hold); one unit when the spec no longer parses (stored by another version)."""
    try:
        r = Job.model_validate(spec).role(role)
        return local_block_size(r, host_cpus) if r is not None else UNIT
    except ValueError:  # pydantic's ValidationError, or a value that no longer parses
        return UNIT


def taken_port_ranges(live: Iterable[tuple[int | None, dict, str]],
                      host_cpus: int | None = None) -> frozenset[tuple[int, int]]:
    """The port ranges ``(start, end)`` (end exclusive) that live Workers hold, from
    ``(port_base, run spec, role)`` rows of the store (rows without a base are skipped)."""
    cpus = host_cpus if host_cpus is not None else (os.cpu_count() or 1)
    sizes: dict[tuple[str, str], int] = {}
    out = set()
    for base, spec, role in live:
        if base is None:
            continue
        key = (json.dumps(spec, sort_keys=True), role)  # a Run's Workers share one spec
        if key not in sizes:
            sizes[key] = stored_block_size(spec, role, cpus)
        out.add((base, base + sizes[key]))
    return frozenset(out)


def bootstrap_env(
    job: Job,
    worker: PlannedWorker,
    *,
    run_uid: str,
    head_address: str,
    node_ip: str | None = None,
    ray_ports: dict[str, int] | None = None,
    ray_temp_dir: str | None = None,
    extra: dict[str, str] | None = None,
    resume_override: str | None = None,
) -> dict[str, str]:
    """The environment of one Worker's bootstrap (the contract in ``bootstrap/worker.py``).

    The head's run script gets ``RLARK_RLINF_OVERRIDES``: the Hydra overrides RLark gives
    RLinf for this Run, for the script to append to its command (RLark never rewrites the
    user's config or command): ``runner.resume_dir=<checkpoint>`` when the Run resumes
    (``resume_override``: :func:`rlark.record.outputs.resume_override`), else empty; and
    ``RLARK_RESUME_DIR``, the checkpoint alone (empty: none).

    The role's own ``env`` comes first; RLark's variables (``RLINF_NODE_RANK``, ``RLARK_*``) are
    written last so a spec can never override them (preflight refuses such specs anyway).
    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` defaults to 0: when RLark stops a Worker the whole
    Ray cluster is going away, so draining (30 s by default in Ray 2.60) only delays the stop.
    """
    role = job.role(worker.role)
    assert role is not None, worker.role
    res = ray_resources(role)
    env: dict[str, str] = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    # values from secrets are the runtime's to add (secret_env; a Pod refers to its Secret)
    env.update({
        e.name: e.value or "" for e in role.env
        if e.secret_ref is None and e.name not in RESERVED_ENV
        and not e.name.startswith(RESERVED_ENV_PREFIX)
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
    if worker.is_head:
        env["RLARK_RUN_SCRIPT"] = job.spec.run_script
        env["RLARK_RLINF_OVERRIDES"] = resume_override or ""
        env["RLARK_RESUME_DIR"] = resume_override.partition("=")[2] if resume_override else ""
        ref = job.spec.rlinf
        if ref is not None and ref.config_name:  # the head snapshots these files for the record
            env["RLARK_RLINF_CONFIG_DIR"] = ref.config_dir or "."
            env["RLARK_RLINF_CONFIG_NAME"] = ref.config_name
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
    if res.worker_ports is not None and "min-worker-port" not in (ray_ports or {}):
        # a runtime that pins no ports (a Pod has its own network): the role's range starts where
        # Ray's own does
        ray_ports = {**(ray_ports or {}),
                     "min-worker-port": RAY_DEFAULT_MIN_WORKER_PORT,
                     "max-worker-port": RAY_DEFAULT_MIN_WORKER_PORT + res.worker_ports - 1}
    if ray_ports:
        env["RLARK_RAY_PORTS"] = json.dumps(ray_ports, sort_keys=True)
    if ray_temp_dir:
        env["RLARK_RAY_TEMP_DIR"] = ray_temp_dir
    return env


class LaunchRefused(RuntimeError):
    """The server's policy refuses to start this Worker; nothing was started. The message says
    why and what to do; the Run fails with ``PolicyDenied`` (no automatic retry: the same spec
    would be refused again)."""

    reason = "PolicyDenied"


class SecretMissing(RuntimeError):
    """A variable's ``valueFrom.secretKeyRef`` names a secret or key RLark has no value for.
    The message names the role, the variable, the secret and the key, never a value."""

    reason = "SecretMissing"


def secret_env(role: Role, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """The variables of ``role`` whose values come from secrets (``valueFrom.secretKeyRef``), with
    their values from ``secrets`` (``(secret name, key)`` -> value), in spec order; names RLark
    reserves are left out (preflight refuses them).

    Raises:
        SecretMissing: a reference ``secrets`` has no value for.
    """
    out: dict[str, str] = {}
    for e in role.env:
        ref = e.secret_ref
        if ref is None or e.name in RESERVED_ENV or e.name.startswith(RESERVED_ENV_PREFIX):
            continue
        if (ref.name, ref.key) not in secrets:
            raise SecretMissing(
                f"role {role.name!r}: {e.name} takes its value from key {ref.key!r} of secret "
                f"{ref.name!r}, which the project does not have (`rlark secret list`)")
        out[e.name] = secrets[(ref.name, ref.key)]
    return out


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
    #: local runtime: the uid its Run's Workers run as (None: the server's own user)
    uid: int | None = None


@dataclass
class WorkerPlace:
    """Where one Worker's Ray node lives: its address, ports and Ray temp dir (None = Ray's
    defaults, as in a Pod with its own network namespace)."""

    node_ip: str | None = None
    port_base: int | None = None
    ray_ports: dict[str, int] = field(default_factory=dict)
    ray_temp_dir: str | None = None
    #: local runtime: the uid (and gid) the Worker runs as; None: the server's own user
    uid: int | None = None


@dataclass
class Placement:
    """A Run's placement: the head's GCS address and each Worker's place, by node rank;
    ``worker_uid``: the uid the Run's Workers run as (local runtime; None: the server's user)."""

    head_address: str
    workers: dict[int, WorkerPlace]
    worker_uid: int | None = None


@dataclass(frozen=True)
class Taken:
    """Addresses and port ranges live Workers of any Run hold now (from the store; ranges are
    ``(start, end)``, end exclusive: :func:`taken_port_ranges`)."""

    ips: frozenset[str] = frozenset()
    port_ranges: frozenset[tuple[int, int]] = frozenset()
    #: uids the Workers of live Runs run as (local runtime)
    uids: frozenset[int] = frozenset()


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
    #: the Run's project (local: whose ``pvc`` volumes the Workers get); None: unknown
    project: str | None = None
    #: the values of the RLark-managed secrets the Job refers to, ``(secret name, key)`` ->
    #: value (see :func:`secret_env`); never in a repr, a log line or an error message
    secrets: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    #: the Run's Ray GCS token (``RAY_AUTH_TOKEN``, Ray >= 2.52 token authentication); every
    #: Ray node and driver of the Run gets it, nothing else does; never in a repr or a message
    ray_token: str | None = field(default=None, repr=False)
    #: the queue the Run's Workers wait in for admission as one group (:class:`HasQueues`:
    #: what ``queue_for`` said); None: none, they start at once
    queue: str | None = None


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
    failure: tuple[Reason, str] | None = None
    #: what the runtime knows of the Worker for the run record (a Pod's image digest, node...)
    facts: dict | None = None


@dataclass(frozen=True)
class AdoptSpec:
    """A Worker that an earlier server process launched, to be watched again after a restart
    (:meth:`Runtime.adopt`): its handle, its Run's spec, whether it is the head, where its log
    goes, its Run's namespace, when its Run launched (seconds since the epoch) and its role."""

    ref: WorkerRef
    job: Job
    is_head: bool
    log_path: str | None
    namespace: str | None = None
    launched_at: float | None = None
    #: the Worker's role (None: unknown)
    role: str | None = None


class Runtime(Protocol):
    """Where Workers run. Implementations: ``local`` (process groups); ``kubernetes`` (Pods).

    Every method returns quickly; nothing here decides a Run's fate."""

    name: str
    #: the runtime has secrets of its own (Kubernetes Secrets): a Job's reference to a secret
    #: RLark does not manage is the runtime's to resolve; where False it has no value
    own_secrets: bool
    #: how many :meth:`launch` calls the controller may make at once for one Run's Workers
    #: after its first (:mod:`rlark.controller.fanout`); 1: one after another
    launch_concurrency: int

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

    def find(self, run_uid: str, worker: str, namespace: str | None = None) -> Launched | None:
        """The Worker ``worker`` of Run ``run_uid`` if it exists although its handle never reached
        the store (the server died between launching it and committing): a local process group
        whose environment names it, a Pod with its Run's labels. None: it was never started."""

    def adopt(self, spec: AdoptSpec) -> None:
        """Watch again a Worker that an earlier server process launched (after a restart): take
        back what the runtime holds for it (address and port reservations, a Pod's watch entry
        and log follower resuming where the log file ends). Never raises for a Worker that is
        gone: :meth:`observe` then reports it dead."""


@runtime_checkable
class ReportsChanges(Protocol):
    """A runtime that says which Workers did something since it was last asked (their log
    grew, or it saw them change), so that the controller's watch between passes costs what
    changes, not what exists (issue 23 item 3): Kubernetes, where RLark's own followers write
    the Pods' logs and a watch brings each Pod's changes. Other runtimes are polled: a stat of
    each live Worker's log and an :meth:`Runtime.observe`, ten times a second."""

    def take_changes(self) -> set[str]:
        """The handles (:attr:`WorkerRef.handle`) of the Workers that changed since the last
        call, each said once. What changes with time alone (a deadline) is not in it: the
        controller's idle resync passes over every Run for that."""
        ...


@runtime_checkable
class HasCapacity(Protocol):
    """A runtime whose Pending Runs the controller admits by free capacity
    (:mod:`rlark.controller.admission`, in the amounts of :mod:`rlark.runtimes.capacity`): the
    local runtime. Others (Kubernetes) leave waiting for room to their own scheduler."""

    def capacity(self) -> Capacity:
        """What the machine carries: CPU cores, memory bytes, GPUs and named devices."""
        ...


@dataclass(frozen=True)
class QueueState:
    """What a runtime's queue says of a Run whose Workers wait in it (:class:`HasQueues`).

    ``admitted``: the whole Run may start now; ``message``: while not admitted, the ``Queued``
    message (:func:`rlark.status.queued_message`: the queue, the place when known, what it
    waits for), once admitted what admitted it; ``cluster_queue``: the queue's pool, when it
    has one (Kueue's ClusterQueue); ``admitted_at``: when (Unix seconds); ``inadmissible``:
    the queue can never admit it as it is set up; ``failure``: RLark cannot follow the queue
    (e.g. RBAC refuses reading it): the Run fails with that ``(reason, message)``;
    ``position``: while not admitted, its place in line (1 = next) when the queue tells it."""

    admitted: bool
    message: str
    cluster_queue: str | None = None
    admitted_at: float | None = None
    inadmissible: bool = False
    failure: tuple[Reason, str] | None = None
    position: int | None = None


@runtime_checkable
class HasQueues(Protocol):
    """A runtime whose Runs may wait in a queue of the cluster's own for admission as one group
    (Kubernetes with Kueue): their Workers are launched at once and held back until the queue
    admits them all. The controller keeps such a Run ``Pending`` (reason ``Queued``) until
    then, and counts its join timeout from the admission."""

    def queue_for(self, project_queue: str | None, namespace: str | None = None) -> str | None:
        """The queue a new Run of a project whose setting is ``project_queue`` (None: the
        server's default) waits in; None: none, its Workers start at once."""
        ...

    def queue_state(self, job: str, run_uid: str, queue: str,
                    namespace: str | None = None) -> QueueState:
        """What ``queue`` says of the Run now (no API call per question)."""
        ...


class RuntimeProfile(Protocol):
    """What the services ask of the server's runtime before and after a Run, running nothing:
    its Findings for a Job, where a Run's objects go, what backs a Worker's path, what a Run's
    record says of it, the machines it offers. One per runtime (:func:`rlark.runtimes.profile`);
    the services never branch on the runtime's name, they ask its profile. The
    :class:`Runtime` itself (the controller's) runs the Workers."""

    # what the runtime is (read-only: each profile says it as a class attribute)

    @property
    def name(self) -> str:
        """The runtime's name (``rlark server --runtime``, a Run's ``runtime``)."""
        ...

    @property
    def queues(self) -> bool:
        """Runs may wait in a named queue of the cluster's own (Kubernetes with Kueue: a
        project's ``queue``, the server's ``--k8s-queue``); False: the runtime's queue is
        RLark's own admission queue and has no name to set."""
        ...

    @property
    def default_queue(self) -> str | None:
        """The queue of the projects that name none (None: none)."""
        ...

    def queue_of(self, project_queue: str | None) -> str | None:
        """The queue the Runs of a project whose own setting is ``project_queue`` wait in
        (None: none of the cluster's; ``none`` names none)."""
        ...

    def check_queue(self, name: str) -> str:
        """``name`` if a project may name it as its queue.

        Raises:
            ValueError: it may not (the message says why).
        """
        ...

    @property
    def here_only(self) -> bool:
        """Workers run on this machine and read its files, with no image: a Job's absolute
        ``workingDir`` is on this machine (a root of its RLinf config), and a config missing
        here is missing for the Run."""
        ...

    @property
    def own_secrets(self) -> bool:
        """See :attr:`Runtime.own_secrets`."""
        ...

    @property
    def namespaced(self) -> bool:
        """A Run's objects go to its project's namespace (projects map to namespaces)."""
        ...

    @property
    def leader_election(self) -> bool:
        """Replicas of the server elect one leader by default (``rlark server --leader-elect``)."""
        ...

    @property
    def filesystem(self) -> Filesystem:
        """What backs a Worker's path under no mount, and where it sees a hostPath mount."""
        ...

    @property
    def record_notes(self) -> tuple[str, ...]:
        """Said in every run record of this runtime (``runtimeNotes``)."""
        ...

    @property
    def pulls_images(self) -> bool:
        """The runtime pulls each role's image (else the record's images check says they were
        recorded, not pulled)."""
        ...

    @property
    def isolation(self) -> dict[str, Any] | None:
        """What keeps each Worker's processes together, as ``rlark nodes`` and
        ``GET /api/v1/server`` show it (:meth:`rlark.runtimes.local.isolation.Isolation.view`);
        None: the runtime's own (a Pod)."""
        ...

    def preflight(self, job: Job, *, errors: bool,
                  neighbours: Callable[[], list[tuple[str, str, dict[str, Any]]]]) -> list[Finding]:
        """The runtime's Findings for a submitted ``job`` (after the spec's own and its
        secrets'): ``errors`` says whether those already hold an error; ``neighbours`` lists
        the other stored Jobs whose objects could share names with it (``(project, name,
        spec)``; asked only by a runtime with names to collide)."""
        ...

    def launch_findings(self, job: Job, secret_findings: Callable[[], list[Finding]]) -> list[Finding]:
        """What would refuse a new Run of the stored ``job`` today (a policy made stricter since
        it was stored); ``secret_findings``: the secret references' Findings, asked when they
        count again at launch."""
        ...

    def queue_findings(self, job: Job, queue: str | None) -> list[Finding]:
        """What would refuse a Run of ``job`` waiting in ``queue`` (:meth:`queue_of` of its
        project's setting; None: none), e.g. a ``spec.priority`` the queue has no class for;
        asked at submit and at each start, and the runtime checks it again at launch."""
        ...

    def own_secret_findings(self, job: Job, managed: set[tuple[str, str]], project: str,
                            namespace: str | None) -> list[Finding]:
        """Findings for ``job``'s references that name no RLark-managed secret (``managed``:
        the ``(secret, key)`` pairs RLark holds), where the runtime has secrets of its own
        (:attr:`own_secrets`); never opens one."""
        ...

    def request_of(self, spec: dict[str, Any]) -> dict[str, float]:
        """What all Workers of a stored Run spec ask of the machine they share (``cpu``,
        ``memory``, ``gpu``), for :meth:`nodes`; nothing for a spec that no longer parses."""
        ...

    def nodes(self, requests: Callable[[], list[dict[str, float]]]
              ) -> tuple[list[dict[str, Any]], str, str | None]:
        """``(items, free basis, error)`` of the machines Workers run on, as
        :meth:`rlark.services.jobs.JobService.nodes` lists them; ``requests``: what the active
        Runs of this runtime ask for (:meth:`request_of` of each), asked where they count."""
        ...

    def output_probes(self, rec: dict[str, Any], sandboxed: bool) -> dict[str, dict[str, Any]]:
        """After a Run: what is left of each output location of the record, where the server
        can look (``{path: {"exists", "readable", "entries", "at", "why"?}}``); ``{}`` where
        it cannot see the Workers' files."""
        ...

    def worker_dir(self, rec: dict[str, Any], path: str, rank: int,
                   sandboxed: bool) -> tuple[str | None, str]:
        """Where the server may read the directory ``path`` as Worker ``rank`` of the Run of
        record ``rec`` saw it: ``(real path here, symbolic links resolved and checked to stay in
        the Worker's place, what that place is)``, or ``(None, why not)`` where the server
        cannot see the Worker's files. ``sandboxed``: as :meth:`output_probes`. What is read
        there is the workload's: untrusted."""
        ...

    def volumes(self, project: str) -> list[dict[str, Any]]:
        """``[{"name", "bytes", "entries", "modifiedAt"}]`` of the volumes ``pvc`` mounts of
        ``project`` name; raises :class:`VolumesElsewhere` where the runtime keeps none."""
        ...

    def delete_volume(self, project: str, name: str) -> dict[str, Any] | None:
        """Delete volume ``name`` of ``project``: ``{"name", "bytes", "entries"}`` it held,
        None when there is none; raises :class:`VolumesElsewhere` where the runtime keeps none,
        ValueError for a bad name."""
        ...


class VolumesElsewhere(RuntimeError):
    """The runtime keeps no volumes of its own for ``pvc`` mounts (on Kubernetes they are the
    namespace's PersistentVolumeClaims); the message says where they are."""


@dataclass
class Opened:
    """A runtime opened for ``rlark server`` (:func:`rlark.runtimes.open_runtime`): the runtime
    of the (first) controller, its profile for the services, and what the server's wiring does
    with it."""

    runtime: Runtime
    profile: RuntimeProfile
    #: the server's own namespace, where Runs go to their projects' namespaces (no project may
    #: map to it: it holds RLark's own Secrets); None: the runtime has none
    namespace: str | None = None
    #: a fresh runtime for each term of a leader (:mod:`rlark.controller.leader`), and the API
    #: client that holds the leader's Lease; None: replicas cannot elect a leader
    fresh: Callable[[], Runtime] | None = None
    lease_api: Any = None
    #: stop what a runtime this opening made started (its watches)
    shutdown: Callable[[Runtime], None] = lambda runtime: None
    #: the store is open: the runtime's last steps; takes ``() -> why this server serves more
    #: than one user, or None``
    started: Callable[[Callable[[], str | None]], None] = lambda many_users: None
