"""The Job spec (``apiVersion: rlark.io/v1``, ``kind: Job``): pydantic models, load/dump, schema.

The models check *structure* only (types, required and unknown fields); the rules about values
(names, image tags, units, head role...) live in :mod:`rlark.preflight.job` so that every problem is
reported as a Finding with a stable code, not as a pydantic message.

Field names are camelCase in YAML/JSON (Kubernetes style) and snake_case in Python.

Long because: the Job schema's pydantic models are the published schema (``rlark schema``), and its
YAML reading (duplicate keys refused, unknown fields named with a suggestion) and change comparison
read those same models.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError
from pydantic.alias_generators import to_camel

from rlark.findings import Finding, Severity, format_path
from rlark.names import DNS1123_LABEL  # noqa: F401  (Kubernetes DNS-1123 label; kept importable here)

API_VERSION = "rlark.io/v1"
KIND = "Job"

#: Kubernetes Service names must also start with a letter (DNS-1035 label).
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 63

#: Variables RLark sets on every Worker itself; a role may not set them.
RESERVED_ENV = ("RLINF_NODE_RANK", "RAY_ADDRESS")
RESERVED_ENV_PREFIX = "RLARK_"


class SpecSyntaxError(ValueError):
    """The document is not YAML/JSON, or not a mapping. The message is one line."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        use_enum_values=True,
    )


class Metadata(_Model):
    name: str = Field(description="Job name: DNS-1123 label starting with a letter.")
    labels: dict[str, str] = Field(default_factory=dict)


class SecretKeyRef(_Model):
    """One key of a Secret (core/v1 SecretKeySelector's ``name`` and ``key``): an RLark-managed
    secret of the Job's project (``rlark secret set``), or on the Kubernetes runtime a Kubernetes
    Secret of the Run's namespace that RLark does not manage."""

    name: str = Field(description="The secret's name (`rlark secret list` shows the project's).")
    key: str = Field(description="The key inside the secret.")


class EnvVarSource(_Model):
    """Where an environment variable's value comes from (core/v1 EnvVarSource, secrets only)."""

    secret_key_ref: SecretKeyRef = Field(description="A key of a secret; its value is never shown.")


class EnvVar(_Model):
    """``{name, value}`` or ``{name, valueFrom: {secretKeyRef: {name, key}}}`` (exactly one of
    ``value`` and ``valueFrom``; neither: the empty string)."""

    name: str
    value: str | None = Field(default=None, description="The value, in clear (shown to every "
                              "reader of the Job: use valueFrom for credentials).")
    value_from: EnvVarSource | None = Field(
        default=None, description="Take the value from a secret; it is never stored in the Job, "
                                  "shown, or written into a Pod spec.")

    @property
    def secret_ref(self) -> SecretKeyRef | None:
        """The secret key this variable's value comes from, or None for a plain value."""
        return self.value_from.secret_key_ref if self.value_from is not None else None


def secret_refs(job: "Job") -> list[tuple[str, str]]:
    """Every ``(secret name, key)`` the Job's roles take values from (``env`` and the credentials
    of ``objectStorage`` mounts, :meth:`Mount.secret_refs`), in spec order, once each."""
    out: list[tuple[str, str]] = []
    for role in job.spec.roles:
        for env in role.env:
            ref = env.secret_ref
            if ref is not None and (ref.name, ref.key) not in out:
                out.append((ref.name, ref.key))
        for mount in role.mounts:
            out.extend(pair for pair in mount.secret_refs() if pair not in out)
    return out


def document_secret_refs(doc: Any) -> list[tuple[str, str]]:
    """:func:`secret_refs` of a stored Job mapping (camelCase), whatever else it holds: stored
    specs of other RLark versions and invalid ones are read as far as they have the shape."""
    out: list[tuple[str, str]] = []
    spec = doc.get("spec") if isinstance(doc, dict) else None
    roles = spec.get("roles") if isinstance(spec, dict) else None
    for role in roles if isinstance(roles, list) else ():
        env = role.get("env") if isinstance(role, dict) else None
        for item in env if isinstance(env, list) else ():
            src = item.get("valueFrom") if isinstance(item, dict) else None
            ref = src.get("secretKeyRef") if isinstance(src, dict) else None
            if isinstance(ref, dict) and isinstance(ref.get("name"), str) \
                    and isinstance(ref.get("key"), str) and (ref["name"], ref["key"]) not in out:
                out.append((ref["name"], ref["key"]))
        mounts = role.get("mounts") if isinstance(role, dict) else None
        for mount in mounts if isinstance(mounts, list) else ():
            store = mount.get("objectStorage") if isinstance(mount, dict) else None
            name = store.get("secret") if isinstance(store, dict) else None
            if isinstance(name, str) and name:
                out.extend(p for p in ((name, k) for k in OBJECT_STORAGE_KEYS) if p not in out)
    return out


class MountType(str, Enum):
    host_path = "hostPath"
    pvc = "pvc"
    object_storage = "objectStorage"


class MountKubernetes(_Model):
    """How the Kubernetes runtime provides an ``objectStorage`` mount (one of the two)."""

    storage_class: str | None = Field(
        default=None,
        description="objectStorage: a PersistentVolumeClaim of this StorageClass (e.g. an S3 CSI "
        "driver's class) is created for the Run and mounted; the class decides what it holds.",
    )
    csi_driver: str | None = Field(
        default=None,
        description="objectStorage: an inline CSI volume of this driver (e.g. "
        "gcsfuse.csi.storage.gke.io) with volumeAttributes.",
    )
    volume_attributes: dict[str, str] = Field(
        default_factory=dict,
        description="CSI volumeAttributes; '{bucket}' and '{prefix}' are replaced from source.",
    )
    size: str = Field(default="1Gi", description="Requested size of the PVC (storageClass only).")


class ObjectStorageMode(str, Enum):
    auto = "auto"
    copy = "copy"
    fuse = "fuse"


#: the keys an objectStorage mount's ``secret`` must have: the S3 access key pair
OBJECT_STORAGE_KEYS = ("accessKeyId", "secretAccessKey")
#: an S3 bucket name (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html:
#: 3-63 characters, lower-case letters, digits, '.' and '-', starting and ending with a letter
#: or digit)
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def s3_location(source: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket[/prefix]`` (pure); the prefix without leading or
    trailing ``/`` ("" for the whole bucket).

    Raises:
        ValueError: not an ``s3://`` URL, a bad bucket name, or ``..``/empty parts in the prefix
            (the message says which).
    """
    if not source.startswith("s3://"):
        raise ValueError("is not an s3:// URL")
    bucket, _, prefix = source[len("s3://"):].partition("/")
    if not S3_BUCKET.match(bucket):
        raise ValueError(f"bucket {bucket[:80]!r} is not an S3 bucket name (3-63 lower-case "
                         "letters, digits, '.' and '-')")
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"prefix {prefix[:200]!r} has an empty, '.' or '..' part")
    return bucket, prefix


class MountObjectStorage(_Model):
    """How an ``objectStorage`` mount reaches its bucket through the S3 API (every runtime)."""

    mode: ObjectStorageMode | None = Field(
        default=None,
        description="fuse: the bucket's prefix is a FUSE file system at mountPath for the "
        "Worker's whole life (the local runtime: s3fs, mounted before the prepare script and "
        "unmounted when the Worker ends; refused where the server has no FUSE or no s3fs); "
        "copy: the prefix is copied into each Worker at mountPath before its prepare script, "
        "and what the Worker wrote there is copied back after the run script (and on stop) "
        "unless readOnly; auto (the default): fuse where the server can mount FUSE, else copy "
        "(the run record says which). On Kubernetes, fuse and auto are the CSI volume that "
        "`kubernetes` names.",
    )
    endpoint: str | None = Field(
        default=None,
        description="The S3 endpoint URL (http:// or https://), e.g. https://s3.example.com; "
        "default: AWS S3.")
    region: str | None = Field(default=None, description="The S3 region, e.g. us-east-1.")
    secret: str | None = Field(
        default=None,
        description="A secret of the Job's project (`rlark secret set`) with the keys "
        "accessKeyId and secretAccessKey; its values reach only the copy, never the Workers' "
        "scripts. None: anonymous requests (a public bucket).")


class Mount(_Model):
    name: str
    type: MountType = Field(description="hostPath | pvc | objectStorage")
    source: str = Field(
        description="hostPath: a directory on the machine; pvc: a PersistentVolumeClaim name; "
        "objectStorage: a URL such as s3://bucket/prefix."
    )
    mount_path: str = Field(description="Absolute path inside the Worker.")
    read_only: StrictBool = False
    kubernetes: MountKubernetes | None = Field(
        default=None, description="Kubernetes runtime only: how an objectStorage mount is provided."
    )
    object_storage: MountObjectStorage | None = Field(
        default=None, description="objectStorage only: mode, S3 endpoint and credentials.")

    def secret_refs(self) -> list[tuple[str, str]]:
        """The ``(secret, key)`` pairs this mount's credentials come from (none for anonymous
        access or another kind)."""
        o = self.object_storage
        if self.type != MountType.object_storage.value or o is None or not o.secret:
            return []
        return [(o.secret, key) for key in OBJECT_STORAGE_KEYS]


class Output(_Model):
    """A directory a Run writes that is to outlive it (checkpoints, logs, an exported model):
    after the Run RLark lists what was written there and reads it back through the mount that
    holds it (docs/data.md, "Outputs")."""

    name: str = Field(description="The output's name (a DNS-1123 label), e.g. checkpoints; "
                      "`rlark outputs get JOB NAME/PATH` names a file by it.")
    path: str = Field(description="Absolute path inside the Workers, below a mount's mountPath "
                      "(pvc, hostPath or objectStorage) so that it outlives them, e.g. "
                      "/ckpt/logs (RLinf's runner.logger.log_path).")
    role: str | None = Field(default=None, description="The role whose Workers write it (whose "
                             "mounts hold it). Default: the head role.")


class Resources(_Model):
    cpu: float | str | None = Field(default=None, description="CPU cores: 2, 0.5 or '500m'.")
    memory: StrictInt | str | None = Field(
        default=None, description="Memory with a unit: '8Gi', '512Mi' (or bytes as an integer)."
    )
    gpu: StrictInt = Field(default=0, description="Whole GPUs (nvidia.com/gpu).")
    devices: dict[str, StrictInt] = Field(
        default_factory=dict,
        description="Other named device resources, e.g. {'rdma/hca': 1}; become Ray custom resources.",
    )
    object_store_memory: StrictInt | str | None = Field(
        default=None,
        description="Ray object store of each Worker's node (`ray start --object-store-memory`), "
        "with a unit like memory: '2Gi'. At least 75Mi (Ray's minimum). Default: 30% of memory, "
        "between 128Mi and 4Gi; 512Mi when the role gives no memory.",
    )


#: Ray's own worker-port range (``ray start --min-worker-port``/``--max-worker-port`` defaults,
#: 2.47-2.60): what a node gets where nothing pins ports (a Pod has its own network), and where
#: a role's ``ray.workerPorts`` range starts there
RAY_DEFAULT_MIN_WORKER_PORT = 10002
RAY_DEFAULT_MAX_WORKER_PORT = 19999
#: the default worker-port range where RLark sizes it (the local runtime): 16 ports per CPU the
#: node offers Ray (a task worker per CPU, and room for actors, which ``num_cpus=0`` does not
#: bound), at most 4096 (at least what one block leaves: :mod:`rlark.runtimes.local.ports`)
WORKER_PORTS_PER_CPU = 16
WORKER_PORTS_MAX_DEFAULT = 4096
#: fewer worker ports than this per CPU is "tight" (a preflight warning): a node runs up to one
#: task worker per CPU at once, and every actor and driver needs a port on top
WORKER_PORTS_TIGHT_PER_CPU = 4


class RaySettings(_Model):
    """How each Worker's Ray node is started, beyond its resources."""

    worker_ports: StrictInt | None = Field(
        default=None,
        description="Ports Ray may give this node's worker processes (one each: every task "
        "worker, actor and driver; a worker that finds none never starts, \"No available "
        "ports\"). A value set here is the range's exact size. Default on the local runtime: 16 "
        "per CPU, at least 48, at most 4096, rounded up to fill whole blocks of 64 ports; on "
        "Kubernetes Ray's own range (10002-19999).",
    )


class LocalSettings(_Model):
    python: str | None = Field(
        default=None,
        description="Python interpreter (or virtualenv directory) the local runtime runs this "
        "role's Workers with. Default: the interpreter of the RLark server. It must have ray.",
    )


class Toleration(_Model):
    """A Kubernetes toleration (core/v1 Toleration), for tainted nodes such as GPU pools."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: StrictInt | None = None


class KubernetesSettings(_Model):
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Secrets (in the Run's namespace) used to pull the image."
    )
    service_account_name: str | None = Field(
        default=None, description="ServiceAccount of the Worker Pods (default: the namespace's). "
        "Only a name the server allows (`rlark server --k8s-service-account NAME`)."
    )
    tolerations: list[Toleration] = Field(default_factory=list)
    run_as_user: StrictInt | None = Field(
        default=None, description="Numeric user id (1 or more) the Worker containers run as "
        "(default: the server's, 1000). Workers never run as root unless runAsRoot is set.",
    )
    run_as_root: StrictBool = Field(
        default=False, description="Run the Worker containers as root (user 0, still without "
        "Linux capabilities). Refused unless the server allows it (`rlark server "
        "--k8s-allow-root`) and the namespace's Pod Security level is baseline or lower.",
    )


class Role(_Model):
    name: str
    workers: StrictInt = 1
    image: str = Field(description="Image reference with an explicit tag or digest.")
    resources: Resources = Field(default_factory=Resources)
    prepare_script: str = Field(
        default="",
        description="Shell script each Worker of the role runs before `ray start`, with "
        "`bash -e -o pipefail -c`: the first failing command (also inside a pipeline) ends it "
        "with that command's exit code and fails the Run (PrepareFailed).",
    )
    env: list[EnvVar] = Field(default_factory=list)
    mounts: list[Mount] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    ray: RaySettings = Field(default_factory=RaySettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


class RLinfRef(_Model):
    """Where the RLinf Hydra config lives. RLark records it and never rewrites it."""

    config_dir: str | None = None
    config_name: str | None = None
    overrides: list[str] = Field(default_factory=list)


class FailurePolicy(_Model):
    join_timeout_seconds: float = Field(
        default=300,
        description="Seconds from the Run's launch by which every Worker's Ray node must have "
        "joined the cluster, prepare scripts included; else the Run fails with JoinTimeout "
        "naming the missing ranks, and the run script never starts.",
    )
    prepare_timeout_seconds: float = Field(
        default=1800, description="Seconds a Worker's prepare script may run."
    )
    max_restarts: StrictInt = Field(
        default=0, description="Automatic new Runs after a failed Run (0 = none)."
    )
    unresponsive_timeout_seconds: float = Field(
        default=300,
        description="Seconds a launched Worker may show no sign of life (its keeper says "
        "nothing, or its processes are stopped) before the Run fails with WorkerUnresponsive "
        "naming its rank (0 = never). The Run's Responsive condition turns False, with a "
        "Warning Event, after 30 s already.",
    )
    queue_timeout_seconds: float | None = Field(
        default=None,
        description="Seconds a Run may wait in its queue (Pending, reason Queued: this "
        "machine's admission queue, or a Kueue LocalQueue on Kubernetes) before it fails with "
        "QueueTimeout (default: no bound). Counted from the Run's creation to its admission.",
    )
    on_preemption: Literal["Requeue", "Fail"] = Field(
        default="Requeue",
        description="What follows a Run that its queue preempted (Kubernetes with Kueue: "
        "Kueue deleted its Pods to admit another workload; the Run fails with Preempted): "
        "Requeue queues a new Run of the Job, Fail leaves the Job Failed.",
    )
    max_requeues: StrictInt = Field(
        default=3,
        description="With onPreemption: Requeue, how many preempted Runs in a row are queued "
        "again; the next preemption leaves the Job Failed (Preempted). Not counted in "
        "maxRestarts.",
    )
    resume: StrictBool = Field(
        default=False,
        description="An automatic new Run (maxRestarts) resumes from the last checkpoint the "
        "failed Run wrote in its outputs: the run script gets runner.resume_dir=<it> in "
        "$RLARK_RLINF_OVERRIDES (docs/data.md, \"Resume\"). No checkpoint yet: it starts afresh.",
    )


class JobSpec(_Model):
    head_role: str
    priority: StrictInt = Field(
        default=0,
        description="The Run's place among queued Runs: higher goes first (ties: oldest "
        "first). On this machine's queue it orders admission; on Kubernetes with Kueue the "
        "Pods name the WorkloadPriorityClass of this value (`rlark server "
        "--k8s-priority-class NAME=VALUE`), so a Run may preempt Runs of lower priority "
        "where the ClusterQueue allows it.",
    )
    run_script: str = Field(
        default="",
        description="Shell script the head runs once every Ray node joined, with "
        "`bash -e -o pipefail -c`: the first failing command (also inside a pipeline) ends it "
        "and its exit code is the Run's (RunFailed).",
    )
    working_dir: str | None = None
    rlinf: RLinfRef | None = None
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    termination_grace_period_seconds: float = Field(
        default=10, description="Seconds between SIGTERM and SIGKILL when stopping Workers."
    )
    outputs: list[Output] = Field(
        default_factory=list,
        description="What the Run writes that must outlive it: listed and read back through "
        "its mount after the Run (`rlark outputs JOB`), and where `rlark restart --resume` "
        "finds the last checkpoint.")
    roles: list[Role]


class Job(_Model):
    api_version: Literal["rlark.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Job"]
    metadata: Metadata
    spec: JobSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    def role(self, name: str) -> Role | None:
        return next((r for r in self.spec.roles if r.name == name), None)

    @property
    def total_workers(self) -> int:
        return sum(max(r.workers, 0) for r in self.spec.roles)


# --- derived names -----------------------------------------------------------------------------


def worker_name(job: str, role: str, index: int) -> str:
    """Name of a Worker (and of its Pod): ``<job>-<role>-<index>``."""
    return f"{job}-{role}-{index}"


def head_service_name(job: str) -> str:
    """Name of the headless Service that points at the head Worker."""
    return f"{job}-head"


# --- load / dump --------------------------------------------------------------------------------


#: limits on a Job document, so a small request can never cost much (YAML aliases can expand a
#: few hundred bytes into billions of values)
MAX_DEPTH = 200
MAX_VALUES = 100_000
MAX_WORKERS = 4096


def tree_problems(data: Any, max_values: int = MAX_VALUES,
                   max_depth: int = MAX_DEPTH) -> tuple[str | None, list[tuple[str, str]]]:
    """Walk a parsed document iteratively. Returns ``(fatal, bad_strings)``: a one-line reason
    when it is too deep or too large (counting values as if YAML aliases were expanded, stopping
    at the limit), and the paths of strings holding a NUL or a lone surrogate (neither can be
    stored in PostgreSQL or encoded as UTF-8) with what is wrong."""
    stack: list[tuple[Any, tuple, int]] = [(data, (), 0)]
    count = 0
    bad: list[tuple[str, str]] = []
    while stack:
        node, loc, depth = stack.pop()
        count += 1
        if count > max_values:
            return f"the document has more than {max_values:,} values (YAML aliases expanded)", bad
        if depth > max_depth:
            return f"the document is nested deeper than {max_depth} levels", bad
        if isinstance(node, dict):
            for k, v in node.items():
                stack.append((v, loc + (str(k),), depth + 1))
                if isinstance(k, str):
                    stack.append((k, loc + (str(k),), depth + 1))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                stack.append((v, loc + (i,), depth + 1))
        elif isinstance(node, str):
            if "\x00" in node:
                bad.append((format_path(loc), "contains a NUL character"))
            else:
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    bad.append((format_path(loc), "contains a lone UTF-16 surrogate, not valid Unicode"))
    return None, bad


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (YAML 1.2 forbids them; PyYAML would keep
    the last one silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the constructor reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse(text: str) -> Any:
    """JSON when the text is a JSON object (JSON's escapes, such as surrogate pairs for emoji,
    are decoded as JSON defines them), else YAML with duplicate keys refused."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text, object_pairs_hook=_unique_pairs)
        except _DuplicateKey as exc:
            raise SpecSyntaxError(f"not valid JSON: duplicate key {exc.args[0]!r}") from None
        except ValueError:
            pass  # YAML flow style, or broken JSON: let the YAML parser say where
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def load_document(text: str | bytes) -> dict[str, Any]:
    """Parse YAML or JSON text into a mapping.

    Raises:
        SpecSyntaxError: one-line message when the text is not YAML, or its top level is not a
        mapping.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecSyntaxError(f"the document is not UTF-8 text ({exc.reason})") from None
    try:
        data = _parse(text)
    except RecursionError:
        raise SpecSyntaxError(f"the document is nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecSyntaxError(f"not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecSyntaxError(
            f"a Job must be a YAML mapping with apiVersion, kind, metadata and spec; got {kind}"
        )
    fatal, _ = tree_problems(data)
    if fatal:
        raise SpecSyntaxError(fatal)
    return data


def fields_at(loc: list | tuple) -> list[str] | None:
    """The field names (as written in YAML, camelCase) the Job schema allows in the mapping
    that holds ``loc[-1]`` (``("spec", "roles", 0, "worker")`` -> the fields of a role); None
    where the keys are free (labels, env values, device names) or ``loc`` leaves the schema."""
    import types
    import typing

    model: Any = Job
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # the list's element type was taken when the list field was entered
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        info = next((f for name, f in model.model_fields.items()
                     if (f.alias or name) == part or name == part), None)
        if info is None:
            return None
        ann = info.annotation
        while True:  # unwrap Optional[...] and list[...] down to a model (or give up)
            origin = typing.get_origin(ann)
            if origin in (typing.Union, types.UnionType):
                inner = [a for a in typing.get_args(ann) if a is not type(None)]
                if len(inner) != 1:
                    return None
                ann = inner[0]
            elif origin is list:
                ann = typing.get_args(ann)[0]
            else:
                break
        model = ann
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    return [f.alias or name for name, f in model.model_fields.items()]


def suggest_field(loc: list | tuple) -> str | None:
    """The known field an unknown key ``loc[-1]`` most likely meant (``worker`` ->
    ``workers``, ``working_dir`` -> ``workingDir``), by :func:`difflib.get_close_matches`
    (ratio >= 0.75) over :func:`fields_at`; None when nothing is close."""
    import difflib

    if not loc or not isinstance(loc[-1], str):
        return None
    known = fields_at(loc)
    if not known:
        return None
    key = loc[-1]
    folded = {k.lower(): k for k in known}
    for candidate in (key.lower(), to_camel(key).lower(), key.replace("-", "_").lower(),
                      to_camel(key.replace("-", "_")).lower()):
        if candidate in folded:
            return folded[candidate]
    near = difflib.get_close_matches(key.lower(), list(folded), n=1, cutoff=0.75)
    return folded[near[0]] if near else None


_UNION_FIELDS = {"cpu", "memory", "objectStoreMemory"}
_UNION_TAGS = {"float", "str", "int", "bool"}


def _pydantic_finding(err: Mapping[str, Any]) -> Finding:
    loc = list(err.get("loc", ()))
    # For the union-typed fields pydantic appends the member type tried ("float", "str");
    # drop it, and only there (a map key may be called "str" too).
    if len(loc) >= 2 and loc[-2] in _UNION_FIELDS and loc[-1] in _UNION_TAGS:
        loc.pop()
    path = format_path(loc)
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "extra_forbidden":
        field = str(loc[-1]) if loc else path
        near = suggest_field(loc)
        return Finding(
            code="UnknownField",
            path=path,
            message=f"{path}: unknown field {field!r}"
            + (f"; did you mean {near!r}?" if near else ""),
            hint=f"rename it to {near!r}" if near else
            "remove it or check its spelling; `rlark schema` lists every field",
        )
    if kind == "missing":
        return Finding(
            code="MissingField",
            path=path,
            message=f"{path} is required",
            hint="add it; `rlark schema` shows its type",
        )
    shown = json.dumps(value, default=str)  # bounded: tree_problems capped the document
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return Finding(
        code="InvalidValue",
        path=path,
        message=f"{path} = {shown}: {err.get('msg', 'invalid value')}",
        hint="give a value of the type `rlark schema` shows for this field",
    )


def parse_job(data: dict[str, Any]) -> tuple[Job | None, list[Finding]]:
    """Build a :class:`Job` from a mapping.

    Returns ``(job, [])`` on success, or ``(None, findings)`` where each Finding names the field
    path of a structural problem (unknown field, missing field, wrong type). Never raises for bad
    input.
    """
    fatal, bad = tree_problems(data)
    if fatal:
        return None, [Finding(code="InvalidDocument", path="$", message=fatal,
                              hint="send a smaller, flatter Job; see examples/quickstart/job.yaml")]
    if bad:
        return None, [
            Finding(code="InvalidText", path=path, message=f"{path} {what}",
                    hint="remove the character; scripts and names must be plain UTF-8 text")
            for path, what in bad
        ]
    try:
        return Job.model_validate(data), []
    except ValidationError as exc:
        return None, [_pydantic_finding(e) for e in exc.errors()]


def load_job(text: str | bytes) -> tuple[Job | None, list[Finding]]:
    """Parse YAML/JSON text into a Job; syntax problems become one ``InvalidDocument`` Finding."""
    try:
        data = load_document(text)
    except SpecSyntaxError as exc:
        return None, [
            Finding(
                code="InvalidDocument",
                severity=Severity.error,
                path="$",
                message=str(exc),
                hint="write the Job as YAML or JSON; see examples/quickstart/job.yaml",
            )
        ]
    return parse_job(data)


def job_to_dict(job: Job) -> dict[str, Any]:
    """The Job as a plain mapping with camelCase keys (JSON-ready)."""
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def whole_numbers(data: Any) -> Any:
    """``data`` with every float that is a whole number as an int (``300.0`` -> ``300``): the
    schema keeps seconds as floats, people read ``300``."""
    if isinstance(data, dict):
        return {k: whole_numbers(v) for k, v in data.items()}
    if isinstance(data, list):
        return [whole_numbers(v) for v in data]
    if isinstance(data, float) and data.is_integer() and abs(data) < 2**53:
        return int(data)
    return data


def job_changes(job: Job) -> dict[str, Any]:
    """The Job as a mapping with only what differs from the schema's defaults (``workers: 1``,
    ``gpu: 0``, empty lists, the default failure policy are left out), whole numbers as ints:
    what a person wrote, for previews (the console's YAML preview and Spec tab). Loading it
    gives the same Job."""
    return whole_numbers(job.model_dump(mode="json", by_alias=True, exclude_defaults=True,
                                        exclude_none=True))


def spec_changes(doc: dict[str, Any]) -> dict[str, Any]:
    """:func:`job_changes` of a stored Job mapping; the mapping itself (whole numbers as ints)
    when it is no longer a valid Job (stored by another RLark version)."""
    try:
        return job_changes(Job.model_validate(doc))
    except ValidationError:
        return whole_numbers(doc)


class _BlockDumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as ``|`` blocks (readable run scripts)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # PyYAML itself falls back to a quoted style where a block cannot hold the text exactly
    style = "|" if "\n" in value and not value.startswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def dump_yaml(data: Any) -> str:
    """YAML for people: block style, key order kept, multi-line strings as ``|`` blocks."""
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True)


def dump_job(job: Job, fmt: Literal["yaml", "json"] = "yaml") -> str:
    """Serialise a Job as YAML (:func:`dump_yaml`) or indented JSON."""
    data = job_to_dict(job)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return dump_yaml(data)


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12, as pydantic emits it) of the Job document."""
    schema = Job.model_json_schema(by_alias=True)
    schema["$id"] = f"https://{API_VERSION}/job.schema.json"
    schema["title"] = "RLark Job"
    return schema


def resolve_relative_paths(job: Job, base_dir: str) -> Job:
    """Return a copy of ``job`` whose relative ``spec.workingDir`` and hostPath mount sources are
    made absolute against ``base_dir`` (the directory of the Job file), as docker compose does for
    paths in a compose file. Absolute paths and other mount kinds are kept as they are.
    """
    import os

    def absolute(path: str) -> str:
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))

    data = job.model_copy(deep=True)
    if data.spec.working_dir is not None:
        data.spec.working_dir = absolute(data.spec.working_dir)
    for role in data.spec.roles:
        for mount in role.mounts:
            if mount.type == MountType.host_path.value and mount.source.strip():
                mount.source = absolute(mount.source)
    return data


def resolve_document_paths(data: Any, base_dir: str) -> Any:
    """:func:`resolve_relative_paths` on a parsed Job document that need not be a valid Job
    (unknown fields, wrong values): a copy whose relative ``spec.workingDir`` and hostPath mount
    sources are absolute against ``base_dir``. Whatever does not have the expected shape is left
    as it is, for the checks to report; so a Job with one typo is not also told that its
    ``workingDir: .`` is relative (it was given in a file, which is what it is relative to)."""
    import copy
    import os

    def absolute(path: Any) -> Any:
        if not isinstance(path, str) or not path.strip() or os.path.isabs(path) or "\x00" in path:
            return path
        return os.path.normpath(os.path.join(base_dir, path))

    if not isinstance(data, dict):
        return data
    out = copy.deepcopy(data)
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    if "workingDir" in spec:
        spec["workingDir"] = absolute(spec["workingDir"])
    roles = spec.get("roles")
    for role in roles if isinstance(roles, list) else ():
        mounts = role.get("mounts") if isinstance(role, dict) else None
        for mount in mounts if isinstance(mounts, list) else ():
            if isinstance(mount, dict) and mount.get("type") == MountType.host_path.value \
                    and "source" in mount:
                mount["source"] = absolute(mount["source"])
    return out
