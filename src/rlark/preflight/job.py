"""A Job's own checks: Findings about a Job spec, before anything is stored or started, the same
on every runtime (each runtime adds its own: ``runtimes/*/preflight.py``).

:func:`check_job` applies the value rules to a structurally valid :class:`~rlark.spec.Job`;
:func:`validate_document` runs parsing and the rules together, and is what the CLI
(``rlark validate``), the REST API and the console all call.

Every message names the field path and the bad value; every hint says how to fix it.

Long because: one rule per field of the spec, in the spec's order; each is short, and keeping them
together is what makes them the one list of the Job's own checks.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Iterator

from pydantic import ValidationError

from rlark.findings import Finding, error, warning
from rlark.preflight.quantities import (
    parse_cpu,
    parse_image_reference,
    parse_memory_bytes,
)
from rlark.names import DNS1123_SUBDOMAIN
from rlark.words import plural
from rlark.spec import (
    RAY_DEFAULT_MIN_WORKER_PORT,
    WORKER_PORTS_MAX_DEFAULT,
    WORKER_PORTS_PER_CPU,
    WORKER_PORTS_TIGHT_PER_CPU,
    DNS1035_LABEL,
    DNS1123_LABEL,
    MAX_NAME_LENGTH,
    MAX_WORKERS,
    RESERVED_ENV,
    RESERVED_ENV_PREFIX,
    Job,
    Mount,
    SpecSyntaxError,
    head_service_name,
    s3_location,
    load_document,
    load_job,
    parse_job,
    worker_name,
)

# Kubernetes label keys: optional DNS-subdomain prefix + '/' + name (63 chars), values 63 chars.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_DEVICES = 1_000_000
#: spec.priority's range: Kueue's Workload priority is an int32; like Kubernetes' PriorityClass,
#: values beyond a billion are left to the system
PRIORITY_MIN, PRIORITY_MAX = -1_000_000_000, 1_000_000_000
#: named device resources become Ray custom resources (``ray start --resources``) and Kubernetes
#: extended resources: a DNS-like name with an optional prefix
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")



_err, _warn = error, warning


def _check_label_map(labels: dict[str, str], path: str, what: str) -> Iterator[Finding]:
    for key, value in labels.items():
        prefix, slash, name = key.rpartition("/")
        bad_key = (
            not name
            or len(name) > 63
            or not _LABEL_NAME.match(name)
            or (slash and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)))
        )
        if bad_key:
            yield _err(
                "InvalidLabel",
                f"{path}.{key}",
                f"{path}.{key}: {what} key {key!r} is not a valid Kubernetes label key",
                "use [prefix/]name with name of at most 63 letters, digits, '-', '_' or '.'",
            )
        if len(str(value)) > 63 or not _LABEL_NAME.match(str(value)):
            yield _err(
                "InvalidLabel",
                f"{path}.{key}",
                f"{path}.{key} = {value!r} is not a valid Kubernetes label value",
                "use at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric",
            )


def _check_names(job: Job) -> Iterator[Finding]:
    name = job.metadata.name
    if not DNS1035_LABEL.match(name):
        yield _err(
            "InvalidName",
            "metadata.name",
            f"metadata.name = {name!r} is not a DNS-1123 label starting with a letter",
            "use lower-case letters, digits and '-', starting with a letter, e.g. 'ppo-maniskill'",
        )
    if len(head_service_name(name)) > MAX_NAME_LENGTH:
        yield _err(
            "NameTooLong",
            "metadata.name",
            f"metadata.name = {name!r} makes the head Service name "
            f"{head_service_name(name)!r} longer than {MAX_NAME_LENGTH} characters",
            f"shorten the Job name to at most {MAX_NAME_LENGTH - len('-head')} characters",
        )
    seen: dict[str, int] = {}
    for i, role in enumerate(job.spec.roles):
        path = f"spec.roles[{i}].name"
        if not DNS1123_LABEL.match(role.name):
            yield _err(
                "InvalidName",
                path,
                f"{path} = {role.name!r} is not a DNS-1123 label",
                "use lower-case letters, digits and '-', e.g. 'rollout'",
            )
        if role.name in seen:
            yield _err(
                "DuplicateRoleName",
                path,
                f"{path} = {role.name!r} repeats spec.roles[{seen[role.name]}].name",
                "give every role its own name",
            )
        seen.setdefault(role.name, i)
        longest = worker_name(name, role.name, max(role.workers, 1) - 1)
        if len(longest) > MAX_NAME_LENGTH:
            yield _err(
                "NameTooLong",
                path,
                f"{path} = {role.name!r}: the Worker name {longest!r} is {len(longest)} "
                f"characters, more than {MAX_NAME_LENGTH}",
                "shorten the Job or role name so '<job>-<role>-<index>' fits in 63 characters",
            )


def _check_head(job: Job) -> Iterator[Finding]:
    head = job.spec.head_role
    names = [r.name for r in job.spec.roles]
    if not head:
        yield _err(
            "HeadRoleMissing",
            "spec.headRole",
            "spec.headRole is empty",
            f"name the role whose first Worker runs the run script, one of {names}",
        )
    elif head not in names:
        yield _err(
            "HeadRoleUnknown",
            "spec.headRole",
            f"spec.headRole = {head!r} is not the name of any role",
            f"use one of {names}",
        )
    if not job.spec.roles:
        yield _err(
            "NoRoles",
            "spec.roles",
            "spec.roles is empty",
            "add at least one role (the head role)",
        )


def _check_role(i: int, job: Job) -> Iterator[Finding]:
    role = job.spec.roles[i]
    base = f"spec.roles[{i}]"
    if role.workers > MAX_WORKERS:
        yield _err(
            "TooManyWorkers",
            f"{base}.workers",
            f"{base}.workers = {role.workers} is more than RLark runs in one Job ({MAX_WORKERS})",
            f"use at most {MAX_WORKERS} Workers per Job",
        )
    if role.workers < 1:
        yield _err(
            "WorkersBelowOne",
            f"{base}.workers",
            f"{base}.workers = {role.workers}: a role needs at least 1 Worker",
            "set workers to 1 or more, or remove the role",
        )
    yield from _check_image(role.image, f"{base}.image")
    res = role.resources
    if res.cpu is not None:
        try:
            cores = parse_cpu(res.cpu)
        except ValueError as exc:
            yield _err(
                "InvalidCpu",
                f"{base}.resources.cpu",
                f"{base}.resources.cpu = {res.cpu!r} {exc}",
                "write cores as a number (2, 0.5) or millicores ('500m')",
            )
        else:
            whole = math.ceil(cores)
            if whole != cores:
                # `ray start --num-cpus` takes a whole number (Ray counts whole CPUs per node)
                yield _warn(
                    "CpuRoundedUp",
                    f"{base}.resources.cpu",
                    f"{base}.resources.cpu = {res.cpu!r}: each Worker's Ray node counts "
                    f"{plural(whole, 'CPU')} (Ray counts whole CPUs on a node), and the local "
                    f"runtime's admission counts {plural(whole, 'CPU')} per Worker too; on "
                    f"Kubernetes the Pod requests {cores:g} of a core",
                    f"write a whole number of CPUs ({whole}) to say what each Worker gets",
                )
    if res.memory is not None:
        try:
            parse_memory_bytes(res.memory)
        except ValueError as exc:
            yield _err(
                "InvalidMemory",
                f"{base}.resources.memory",
                f"{base}.resources.memory = {res.memory!r} {exc}",
                "write memory with a unit, e.g. '8Gi' or '512Mi' (Ki, Mi, Gi, Ti, k, M, G, T)",
            )
    if res.gpu < 0:
        yield _err(
            "InvalidGpu",
            f"{base}.resources.gpu",
            f"{base}.resources.gpu = {res.gpu} is negative",
            "set a whole number of GPUs, 0 or more",
        )
    for dev, count in res.devices.items():
        path = f"{base}.resources.devices.{dev}"
        if dev in {"CPU", "GPU", "memory", "object_store_memory", "cpu", "gpu", "nvidia.com/gpu"}:
            yield _err(
                "InvalidDevice",
                path,
                f"{path}: {dev!r} is not a named device",
                "use resources.cpu / resources.gpu / resources.memory for these",
            )
        elif not _DEVICE_NAME.match(dev):
            yield _err(
                "InvalidDevice",
                path,
                f"{path}: {dev!r} is not a usable resource name",
                "use letters, digits and '.', '_', '-', '/' (e.g. 'rdma/hca'), no spaces, ',' or '='",
            )
        elif not 1 <= count <= MAX_DEVICES:
            yield _err(
                "InvalidDevice",
                path,
                f"{path} = {count}: a device count must be between 1 and {MAX_DEVICES}",
                "set the number of such devices one Worker uses",
            )
    yield from _check_ray_node(role, base)
    yield from _check_env(role, base)
    yield from _check_mounts(role, base)
    yield from _check_label_map(role.node_selector, f"{base}.nodeSelector", "node selector")
    if role.local.python is not None and not os.path.isabs(role.local.python):
        yield _err(
            "RelativePath",
            f"{base}.local.python",
            f"{base}.local.python = {role.local.python!r} is not an absolute path",
            "give the absolute path of a python executable or virtualenv directory",
        )


#: Ray refuses a smaller object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES)
OBJECT_STORE_MIN_BYTES = 75 * 1024 * 1024
#: ``ray.workerPorts`` upper bound: Ray's range starts at 10002 where RLark pins no ports
#: (Kubernetes), and a port is at most 65535
MAX_WORKER_PORTS = 65535 - RAY_DEFAULT_MIN_WORKER_PORT + 1


def role_cpus(role) -> int | None:
    """The role's CPUs as ``ray start --num-cpus`` gets them (rounded up); None when unset or
    not a CPU quantity (reported elsewhere)."""
    if role.resources.cpu is None:
        return None
    try:
        return math.ceil(parse_cpu(role.resources.cpu))
    except ValueError:
        return None


def tight_ports(ports: int, cpus: int, path: str, lead: str, note: str = "") -> Finding | None:
    """The ``WorkerPortsTight`` warning when ``ports`` worker ports are fewer than
    :data:`~rlark.spec.WORKER_PORTS_TIGHT_PER_CPU` per CPU; ``lead`` names the
    value, ``note`` says where the CPU count comes from."""
    if ports >= WORKER_PORTS_TIGHT_PER_CPU * cpus:
        return None
    return _warn(
        "WorkerPortsTight", path,
        f"{lead}: {ports} worker ports for {cpus} CPUs{note}; Ray gives every worker process "
        f"one (up to {cpus} task workers at once, plus every actor and driver: actors with "
        "num_cpus=0 are not bounded by CPUs), and one that finds none never starts (\"No "
        "available ports\"): its tasks and actors wait forever",
        f"set ray.workerPorts to at least {WORKER_PORTS_TIGHT_PER_CPU * cpus}"
        + (f", or remove it for the default ({WORKER_PORTS_PER_CPU} per CPU)"
           if WORKER_PORTS_PER_CPU * cpus <= WORKER_PORTS_MAX_DEFAULT else ""),
    )


def _check_ray_node(role, base: str) -> Iterator[Finding]:
    """``resources.objectStoreMemory`` and ``ray.workerPorts``: how each Worker's Ray node is
    started beyond its resources."""
    res = role.resources
    if res.object_store_memory is not None:
        path = f"{base}.resources.objectStoreMemory"
        try:
            store = parse_memory_bytes(res.object_store_memory)
        except ValueError as exc:
            yield _err(
                "InvalidObjectStoreMemory", path,
                f"{path} = {res.object_store_memory!r} {exc}",
                "write it like memory, with a unit: '2Gi', '512Mi'",
            )
        else:
            if store < OBJECT_STORE_MIN_BYTES:
                yield _err(
                    "ObjectStoreTooSmall", path,
                    f"{path} = {res.object_store_memory!r} is less than Ray's minimum object "
                    "store, 75Mi (`ray start` would refuse it)",
                    "give 75Mi or more, or remove it for the default (30% of memory)",
                )
            try:
                memory = parse_memory_bytes(res.memory) if res.memory is not None else None
            except ValueError:
                memory = None
            if memory is not None and store >= memory:
                yield _warn(
                    "ObjectStoreExceedsMemory", path,
                    f"{path} = {res.object_store_memory!r} is not less than "
                    f"{base}.resources.memory = {res.memory!r}; the object store lives in "
                    "shared memory that counts against the Worker's memory (a Pod's limit), "
                    "leaving its processes nothing",
                    "keep the object store well below memory (the default is 30% of it)",
                )
    ports = role.ray.worker_ports
    if ports is not None:
        path = f"{base}.ray.workerPorts"
        if not 1 <= ports <= MAX_WORKER_PORTS:
            yield _err(
                "InvalidWorkerPorts", path,
                f"{path} = {ports} must be between 1 and {MAX_WORKER_PORTS}",
                "give the number of ports Ray may hand to this node's worker processes, or "
                "remove it for the default (16 per CPU)",
            )
            return
        cpus = role_cpus(role)
        if cpus is not None:
            tight = tight_ports(ports, cpus, path, f"{path} = {ports}")
            if tight:
                yield tight


def _check_image(image: str, path: str) -> Iterator[Finding]:
    ref = parse_image_reference(image)
    if ref is None:
        yield _err(
            "InvalidImage",
            path,
            f"{path} = {image!r} is not an image reference",
            "write registry/repository:tag, e.g. 'docker.io/rlinf/rlinf:0.3.0'",
        )
        return
    if ref["tag"] is None and ref["digest"] is None:
        yield _err(
            "ImageNoVersion",
            path,
            f"{path} = {image!r} has no tag or digest, so every run may get a different image",
            f"pin a version, e.g. '{image}:<version>' or '{image}@sha256:<digest>'",
        )
    elif ref["tag"] == "latest" and ref["digest"] is None:
        yield _err(
            "ImageLatestTag",
            path,
            f"{path} = {image!r} uses the mutable tag 'latest'",
            "use an explicit version tag or a digest (@sha256:...)",
        )


def _check_env(role, base: str) -> Iterator[Finding]:
    seen: set[str] = set()
    for j, env in enumerate(role.env):
        path = f"{base}.env[{j}].name"
        if env.name in RESERVED_ENV or env.name.startswith(RESERVED_ENV_PREFIX):
            yield _err(
                "ReservedEnv",
                path,
                f"{path} = {env.name!r} is set by RLark on every Worker",
                "remove it: RLark sets RLINF_NODE_RANK, RAY_ADDRESS and RLARK_* itself "
                "(node ranks follow spec.headRole and role order)",
            )
        elif not _ENV_NAME.match(env.name):
            yield _err(
                "InvalidEnvName",
                path,
                f"{path} = {env.name!r} is not a valid environment variable name",
                "use letters, digits and '_', not starting with a digit",
            )
        if env.name in seen:
            yield _warn(
                "DuplicateEnv",
                path,
                f"{path} = {env.name!r} is set more than once; the last value wins",
                "keep one entry per variable",
            )
        seen.add(env.name)
        yield from _check_env_value(env, f"{base}.env[{j}]")


#: the secret names Kubernetes takes (DNS-1123 subdomain); RLark's own are DNS-1123 labels
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: keys of a Secret's data (Kubernetes: IsConfigMapKey)
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: words of a variable name (split at '_') that say its value is a credential
_CREDENTIAL_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                               "CREDENTIALS", "APIKEY"})
#: ... and word pairs (``WANDB_API_KEY``, ``AWS_ACCESS_KEY_ID``)
_CREDENTIAL_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY")})


def looks_like_credential(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential: a word (split at
    '_') such as TOKEN, SECRET, PASSWORD, or API_KEY / ACCESS_KEY / PRIVATE_KEY
    (``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``; not ``TOKENIZERS_PARALLELISM``)."""
    words = name.upper().split("_")
    return bool(_CREDENTIAL_WORDS.intersection(words)) or any(
        pair in _CREDENTIAL_PAIRS for pair in zip(words, words[1:]))


def _check_env_value(env, path: str) -> Iterator[Finding]:
    """``value`` xor ``valueFrom.secretKeyRef`` with usable names; a credential-like variable
    with a plain value gets a warning. No message ever holds the value."""
    ref = env.secret_ref
    if ref is None:
        if env.value and looks_like_credential(env.name):
            yield _warn(
                "PlainSecretEnv", f"{path}.value",
                f"{path}.value: {env.name!r} looks like a credential and its value is written in "
                "clear in the Job, so everyone who can read the Job (its spec, record and "
                "console page) reads it",
                "keep it in a secret: `rlark secret set NAME KEY` (reads the value from stdin), "
                f"then `valueFrom: {{secretKeyRef: {{name: NAME, key: KEY}}}}` instead of value",
            )
        return
    if env.value is not None:
        yield _err(
            "EnvValueAndValueFrom", path,
            f"{path} ({env.name!r}) has both value and valueFrom",
            "keep one: value for a plain value, valueFrom.secretKeyRef for a secret",
        )
    rp = f"{path}.valueFrom.secretKeyRef"
    if len(ref.name) > 253 or not _SECRET_NAME.match(ref.name):
        yield _err(
            "InvalidSecretRef", f"{rp}.name",
            f"{rp}.name = {ref.name[:80]!r} is not a secret name",
            "use lower-case letters, digits and '-' (RLark's secrets; Kubernetes Secrets may "
            "also have '.'), as `rlark secret list` shows them",
        )
    if len(ref.key) > 253 or not SECRET_KEY.match(ref.key):
        yield _err(
            "InvalidSecretRef", f"{rp}.key",
            f"{rp}.key = {ref.key[:80]!r} is not a secret key",
            "use letters, digits, '-', '_' and '.', as `rlark secret list` shows the keys",
        )


def _check_mounts(role, base: str) -> Iterator[Finding]:
    paths: dict[str, int] = {}
    names: dict[str, int] = {}
    for j, mount in enumerate(role.mounts):
        mp = f"{base}.mounts[{j}]"
        if not mount.mount_path.startswith("/"):
            yield _err(
                "RelativeMountPath",
                f"{mp}.mountPath",
                f"{mp}.mountPath = {mount.mount_path!r} is not an absolute path",
                "write an absolute path inside the Worker, e.g. '/data'",
            )
        norm = os.path.normpath(mount.mount_path)
        if norm in paths:
            yield _err(
                "DuplicateMountPath",
                f"{mp}.mountPath",
                f"{mp}.mountPath = {mount.mount_path!r} is also the mountPath of "
                f"{base}.mounts[{paths[norm]}]",
                "mount each source at its own path",
            )
        paths.setdefault(norm, j)
        if mount.name in names:
            yield _err(
                "DuplicateMountName",
                f"{mp}.name",
                f"{mp}.name = {mount.name!r} repeats {base}.mounts[{names[mount.name]}].name",
                "give every mount of a role its own name",
            )
        names.setdefault(mount.name, j)
        if not mount.source.strip():
            yield _err(
                "EmptyMountSource",
                f"{mp}.source",
                f"{mp}.source is empty",
                "name the host directory, PVC or object-storage URL to mount",
            )
        elif mount.type == "hostPath" and not mount.source.startswith("/"):
            yield _err(
                "RelativeMountSource",
                f"{mp}.source",
                f"{mp}.source = {mount.source!r}: a hostPath source must be absolute",
                "write the absolute host directory (a Job sent without its file has nothing to "
                "resolve a relative one against; `rlark submit FILE` resolves it against FILE's "
                "directory)",
            )
        elif mount.type == "pvc" and (len(mount.source) > 253
                                      or not DNS1123_SUBDOMAIN.match(mount.source)):
            yield _err(
                "InvalidMountSource",
                f"{mp}.source",
                f"{mp}.source = {mount.source[:200]!r} is not a volume name",
                "name the PersistentVolumeClaim (on the local runtime: the project's volume) with "
                "lower-case letters, digits, '-' and '.', starting and ending with a letter or "
                "digit, e.g. 'checkpoints'",
            )
        elif mount.type == "objectStorage" and "://" not in mount.source:
            yield _err(
                "InvalidMountSource",
                f"{mp}.source",
                f"{mp}.source = {mount.source!r} is not an object-storage URL",
                "write a URL such as 's3://bucket/prefix'",
            )
        yield from _check_object_storage(mount, mp)


def _check_object_storage(mount: Mount, mp: str) -> Iterator[Finding]:
    """A mount's ``objectStorage`` settings: on objectStorage mounts only, with an ``s3://``
    source, an http(s) endpoint and a secret name that can exist."""
    o = mount.object_storage
    if o is None:
        return
    if mount.type != "objectStorage":
        yield _err("InvalidMount", f"{mp}.objectStorage",
                   f"{mp}.objectStorage applies to objectStorage mounts only; this is a "
                   f"{mount.type} mount", "remove objectStorage, or set type: objectStorage")
        return
    if mount.source.strip() and "://" in mount.source:
        try:
            s3_location(mount.source)
        except ValueError as exc:
            yield _err("InvalidMountSource", f"{mp}.source",
                       f"{mp}.source = {mount.source[:200]!r} {exc}",
                       "write s3://BUCKET/PREFIX (objectStorage speaks the S3 API)")
    if o.endpoint is not None and not re.match(r"^https?://[^/\s]+(/\S*)?$", o.endpoint):
        yield _err("InvalidEndpoint", f"{mp}.objectStorage.endpoint",
                   f"{mp}.objectStorage.endpoint = {o.endpoint[:200]!r} is not an http(s) URL",
                   "write the S3 endpoint as a URL, e.g. https://s3.example.com or "
                   "http://10.0.0.5:8333")
    if o.secret is not None and (len(o.secret) > 63 or not DNS1123_LABEL.match(o.secret)):
        yield _err("InvalidSecretName", f"{mp}.objectStorage.secret",
                   f"{mp}.objectStorage.secret = {o.secret[:200]!r} is not a secret name",
                   "name a secret of the project (`rlark secret list`), e.g. 's3-credentials'")


def _check_shared(job: Job) -> Iterator[Finding]:
    spec = job.spec
    if not spec.run_script.strip():
        yield _err(
            "EmptyRunScript",
            "spec.runScript",
            "spec.runScript is empty: the head would have nothing to run",
            "write the command that starts training, e.g. 'python train.py --config-name ppo'",
        )
    if spec.working_dir is not None and not os.path.isabs(spec.working_dir):
        yield _err(
            "RelativePath",
            "spec.workingDir",
            f"spec.workingDir = {spec.working_dir!r} is not an absolute path",
            "write an absolute path (a Job sent without its file has nothing to resolve a "
            "relative one against; `rlark submit FILE` resolves it against FILE's directory)",
        )
    fp = spec.failure_policy
    for field, value in (
        ("joinTimeoutSeconds", fp.join_timeout_seconds),
        ("prepareTimeoutSeconds", fp.prepare_timeout_seconds),
    ):
        if not (0 < value < math.inf):
            yield _err(
                "InvalidTimeout",
                f"spec.failurePolicy.{field}",
                f"spec.failurePolicy.{field} = {value} must be a finite number of seconds above 0",
                "give a number of seconds greater than 0",
            )
    if fp.queue_timeout_seconds is not None and not (0 < fp.queue_timeout_seconds < math.inf):
        yield _err(
            "InvalidTimeout",
            "spec.failurePolicy.queueTimeoutSeconds",
            f"spec.failurePolicy.queueTimeoutSeconds = {fp.queue_timeout_seconds} must be a "
            "finite number of seconds above 0",
            "give a number of seconds greater than 0",
        )
    if fp.max_restarts < 0:
        yield _err(
            "InvalidMaxRestarts",
            "spec.failurePolicy.maxRestarts",
            f"spec.failurePolicy.maxRestarts = {fp.max_restarts} is negative",
            "use 0 (no automatic restart) or more",
        )
    if fp.max_requeues < 0:
        yield _err(
            "InvalidMaxRequeues",
            "spec.failurePolicy.maxRequeues",
            f"spec.failurePolicy.maxRequeues = {fp.max_requeues} is negative",
            "use 0 (a preempted Run is not queued again) or more",
        )
    if not (PRIORITY_MIN <= spec.priority <= PRIORITY_MAX):
        yield _err(
            "InvalidPriority",
            "spec.priority",
            f"spec.priority = {spec.priority} is outside {PRIORITY_MIN}..{PRIORITY_MAX}",
            "give a whole number in that range (Kueue's priorities are 32-bit integers)",
        )
    if not (0 <= spec.termination_grace_period_seconds < math.inf):
        yield _err(
            "InvalidTimeout",
            "spec.terminationGracePeriodSeconds",
            f"spec.terminationGracePeriodSeconds = {spec.termination_grace_period_seconds} "
            "is not a finite number of seconds, 0 or more",
            "give 0 or more seconds",
        )
    yield from _check_label_map(job.metadata.labels, "metadata.labels", "label")
    # the config RLark checks and records must be the one the script runs (whether or not the
    # config can be read here: a typo in either is caught before anything starts)
    from rlark.rlinf_config.script import config_name_findings

    yield from config_name_findings(job)


#: what a run script must mention to pass a resume on to RLinf: the variables RLark gives the
#: head's run script for it (:func:`rlark.runtimes.base.bootstrap_env`)
RESUME_VARIABLES = re.compile(r"\$\{?(RLARK_RLINF_OVERRIDES|RLARK_RESUME_DIR)\b")


def passes_resume(run_script: str) -> bool:
    """Whether ``run_script`` uses ``$RLARK_RLINF_OVERRIDES`` or ``$RLARK_RESUME_DIR``, through
    which a resumed Run's checkpoint reaches RLinf (RLark never rewrites the user's command)."""
    return bool(RESUME_VARIABLES.search(run_script))


def _check_outputs(job: Job) -> Iterator[Finding]:
    """``spec.outputs``: names, absolute paths, their role, and the mount that holds each
    (none: a warning, the outputs check fails after the Run; a read-only one: an error); and
    ``failurePolicy.resume``, which needs a run script that passes the resume on."""
    from rlark.rlinf_config.locations import mount_holding

    roles = {r.name: r for r in job.spec.roles}
    names: dict[str, int] = {}
    for i, out in enumerate(job.spec.outputs):
        p = f"spec.outputs[{i}]"
        if len(out.name) > MAX_NAME_LENGTH or not DNS1123_LABEL.match(out.name):
            yield _err("InvalidOutputName", f"{p}.name",
                       f"{p}.name = {out.name[:80]!r} is not an output name",
                       "use lower-case letters, digits and '-', starting with a letter, e.g. "
                       "'checkpoints'")
        elif out.name in names:
            yield _err("DuplicateOutputName", f"{p}.name",
                       f"{p}.name = {out.name!r} repeats spec.outputs[{names[out.name]}].name",
                       "give every output its own name")
        names.setdefault(out.name, i)
        parts = out.path.split("/")[1:]
        if not out.path.startswith("/") or out.path.rstrip("/") == "" or "\x00" in out.path \
                or any(part in (".", "..") for part in parts):
            yield _err("InvalidOutputPath", f"{p}.path",
                       f"{p}.path = {out.path[:200]!r} is not an absolute path below /",
                       "write the absolute directory inside the Workers, e.g. '/ckpt/logs'")
            continue
        if out.role is not None and out.role not in roles:
            yield _err("UnknownOutputRole", f"{p}.role",
                       f"{p}.role = {out.role!r} is not the name of any role",
                       f"use one of {sorted(roles)}, or leave it out (the head role)")
            continue
        role = roles.get(out.role or job.spec.head_role)
        if role is None:
            continue
        mount = mount_holding(out.path, [m.model_dump(by_alias=True) for m in role.mounts])
        if mount is None:
            yield _warn("OutputNotOnMount", f"{p}.path",
                        f"{p}.path = {out.path!r} lies on no mount of role {role.name}: what the "
                        "Run writes there is gone with its Workers, and its outputs check fails",
                        f"add a pvc, hostPath or objectStorage mount to role {role.name} whose "
                        "mountPath holds it, or move the output below one")
        elif mount.get("readOnly"):
            yield _err("OutputOnReadOnlyMount", f"{p}.path",
                       f"{p}.path = {out.path!r} lies on mount {mount.get('name')} of role "
                       f"{role.name}, which is read-only: the Run cannot write there",
                       f"drop readOnly from mount {mount.get('name')}, or move the output below "
                       "a writable mount")
    fp = job.spec.failure_policy
    if fp.resume and not passes_resume(job.spec.run_script):
        yield _err("ResumeNotPassed", "spec.failurePolicy.resume",
                   "spec.failurePolicy.resume = true, but the run script uses neither "
                   "$RLARK_RLINF_OVERRIDES nor $RLARK_RESUME_DIR: a retry would start afresh",
                   "append $RLARK_RLINF_OVERRIDES to the RLinf command of spec.runScript (RLark "
                   "puts runner.resume_dir=<checkpoint> there), or set resume: false")


def check_job(job: Job) -> list[Finding]:
    """All value rules for a parsed Job. Returns Findings in spec order; empty means valid."""
    findings = [*_check_names(job), *_check_head(job), *_check_shared(job)]
    for i in range(len(job.spec.roles)):
        findings.extend(_check_role(i, job))
    findings.extend(_check_outputs(job))
    total = sum(max(r.workers, 0) for r in job.spec.roles)
    if total > MAX_WORKERS and all(r.workers <= MAX_WORKERS for r in job.spec.roles):
        findings.append(_err(
            "TooManyWorkers", "spec.roles",
            f"spec.roles: {total} Workers in all is more than RLark runs in one Job ({MAX_WORKERS})",
            f"use at most {MAX_WORKERS} Workers per Job",
        ))
    return findings


def _without_unknown_fields(data: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``data`` without the fields the schema does not know (pydantic's
    ``extra_forbidden`` errors, located by alias); None when anything else is wrong."""
    import copy

    try:
        Job.model_validate(data)
        return data
    except ValidationError as exc:
        errors = exc.errors()
    if any(e["type"] != "extra_forbidden" for e in errors):
        return None
    out = copy.deepcopy(data)
    for e in errors:
        *parents, key = e["loc"]
        node: Any = out
        for part in parents:
            node = node[part]
        node.pop(key, None)
    return out


def check_document(data: Any) -> tuple[Job | None, list[Finding]]:
    """:func:`rlark.spec.parse_job`, then :func:`check_job`. Returns ``(job, findings)``; ``job``
    is None when the document is not a Job. When its only problems are unknown fields, the value
    rules still run on the rest, so one pass reports every error (the Job is still refused)."""
    job, findings = parse_job(data)
    if job is not None:
        return job, check_job(job)
    if findings and all(f.code == "UnknownField" for f in findings):
        rest = _without_unknown_fields(data)
        known, _ = parse_job(rest) if rest is not None else (None, [])
        if known is not None:
            return None, findings + check_job(known)
    return None, findings


def validate_document(text: str | bytes) -> tuple[Job | None, list[Finding]]:
    """Parse and check a Job document (YAML or JSON): :func:`check_document` of its contents.

    Returns ``(job, findings)``; ``job`` is None when the document could not be parsed. Callers
    refuse the Job when :func:`rlark.findings.has_errors` is true.
    """
    try:
        data = load_document(text)
    except SpecSyntaxError:
        return load_job(text)  # its one InvalidDocument Finding, with line and column
    return check_document(data)
