"""Rendering a Run as Kubernetes objects (pure: no I/O except building the bootstrap archive once).

Long because: one pure builder per object kind a Run is made of (ConfigMap, Secrets, Service,
NetworkPolicy, claims, Pods) with the names and labels they share; each builder is short, and
:func:`render_run` puts them together in one place a reviewer reads against the API reference.

One Run is: a ConfigMap carrying the bootstrap archive (``rlark.bootstrap.archive``; the Run's
*owner*: every other object
points at it with an ownerReference when its uid is known, so deleting it removes the Run), a
Secret with the Run's Ray token when it has one, a headless Service ``<job>-head`` selecting the
Run's rank-0 Pod, a NetworkPolicy letting only the Run's own Pods reach them, a
PersistentVolumeClaim per ``objectStorage`` mount that names a StorageClass, and one Pod per
Worker named ``<job>-<role>-<index>`` (with an init container that copies the role's
copy-mode ``objectStorage`` mounts in: :mod:`.copymounts`).

Nothing forbidden is ever rendered: every Pod and claim is checked against the server's Pod
policy (:mod:`.podpolicy`) here, whoever asks for it, and a Job beyond it raises
:class:`.podpolicy.PolicyDenied`.

Every Pod runs with the Pod Security Standards' ``restricted`` settings
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): no Linux capabilities
(``drop: [ALL]``), ``allowPrivilegeEscalation: false``, seccomp ``RuntimeDefault``,
``runAsNonRoot: true`` with a numeric ``runAsUser`` (the kubelet can verify a number, not an
image's user name), no ServiceAccount token. Only a role asking for root on a server whose
policy allows it (:mod:`.podpolicy`) runs as user 0, still without capabilities.

Kubernetes facts relied on (core/v1, https://kubernetes.io/docs/reference/kubernetes-api/):

* ``restartPolicy: Never``: a Worker that exits is not restarted by the kubelet; RLark decides.
* ``terminationMessagePolicy: FallbackToLogsOnError``: a container that fails without writing
  ``/dev/termination-log`` gets the tail of its log as ``state.terminated.message``.
* A headless Service (``clusterIP: None``) with ``publishNotReadyAddresses: true`` gives the
  head Pod a DNS name (``<svc>.<ns>.svc``) as soon as it has an IP, before it is Ready.
* ``emptyDir`` with ``medium: Memory`` at ``/dev/shm``: Ray's object store lives in /dev/shm,
  and a container's default /dev/shm is 64 MiB.
* Extended resources (``nvidia.com/gpu``, ``rdma/hca``...) must have equal requests and limits.
* ``hostPath.type: Directory`` makes a missing host directory a ``FailedMount`` instead of an
  empty directory being created.

Ray facts: the head's GCS listens on 6379 (``ray start --head`` default port), the dashboard on
8265, the Ray client server on 10001 (Ray 2.60 defaults); a Pod has its own network namespace,
so Ray's default ports and the Pod IP are right and no port pinning is needed. Token
authentication (Ray 2.52 and later; https://docs.ray.io/en/latest/ray-security/token-auth.html
and .../ray-core/internals/token-authentication.html): with ``RAY_AUTH_MODE=token`` in the
environment of every node and driver of a cluster, Ray's GCS, dashboard and other control-plane
services take only requests that carry the token, read from ``RAY_AUTH_TOKEN`` first (KubeRay
sets that variable from a Secret with ``valueFrom.secretKeyRef`` too). An older Ray ignores both.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Iterable
from urllib.parse import urlparse

import yaml

from rlark.bootstrap.archive import bootstrap_archive
from rlark.preflight.quantities import parse_cpu
from rlark.ranks import PlannedWorker, plan_workers
from rlark.runtimes.base import bootstrap_env
from rlark.runtimes.kubernetes import copymounts, kueue
from rlark.runtimes.kubernetes.podpolicy import (DEFAULT_RUN_AS_USER, PodPolicy, PolicyDenied,
                                                 check_role_policy, enforce, normalise_host_path)
from rlark.spec import Job, Mount, Role, head_service_name

#: where the Run's ConfigMap is mounted in every Worker, and the key (file name) of the bootstrap
#: archive in it (binaryData: a ConfigMap's ``data`` holds UTF-8 text only)
BOOTSTRAP_DIR = "/rlark"
BOOTSTRAP_KEY = "rlark-bootstrap.pyz"
#: the most a ConfigMap may hold (https://kubernetes.io/docs/concepts/configuration/configmap/:
#: "The data stored in a ConfigMap cannot exceed 1 MiB")
CONFIG_MAP_MAX_BYTES = 1024 * 1024
CONTAINER = "worker"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "rlark"
LABEL_JOB = "rlark.io/job"
LABEL_RUN = "rlark.io/run"
LABEL_ROLE = "rlark.io/role"
LABEL_RANK = "rlark.io/node-rank"
ANNOTATION_SOURCE = "rlark.io/source"

RAY_GCS_PORT = 6379
RAY_DASHBOARD_PORT = 8265
RAY_CLIENT_PORT = 10001

GPU_RESOURCE = "nvidia.com/gpu"
#: Ray's token authentication: the mode variable, the token variable, and the key of the Run's
#: Ray Secret that holds the token
RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_TOKEN_KEY = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "token"
#: a run id becomes a label value and part of object names
RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class RenderOptions:
    """Where and how a Run is rendered.

    ``owner``: the Run's owner object as ``{"apiVersion", "kind", "name", "uid"}``; every object
    but the owner gets an ownerReference to it. It is known only once the owner exists in the
    cluster (the server creates the ConfigMap first); ``rlark render`` has none, so its objects are
    removed by label (``kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -l rlark.io/run=ID``).
    ``ray_dashboard``: start Ray's dashboard on the head (needs ``ray[default]`` in the image).
    ``run_as_user``: the user id of Workers whose role names none (``kubernetes.runAsUser``).
    ``allow_root``: a role's ``kubernetes.runAsRoot`` is allowed.
    ``policy``: the server's Pod policy (:class:`.podpolicy.PodPolicy`) every Pod and claim is
    checked against; when given, its ``run_as_user`` and ``allow_root`` are the ones used. None:
    the strictest policy with ``run_as_user`` and ``allow_root`` (no hostPath, ServiceAccount,
    CSI driver, StorageClass or toleration).
    ``ray_auth``: the Run has a Ray Secret (:func:`render_ray_secret`); every Worker container
    gets ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from it.
    ``queue``: the Kueue LocalQueue the Run's Pods wait in for admission as one group
    (:func:`.kueue.pod_metadata`); None: no queue, the Pods go to the scheduler at once.
    ``priority_class``: with ``queue``, the WorkloadPriorityClass the Pods name.
    """

    namespace: str = "default"
    owner: dict[str, str] | None = None
    ray_dashboard: bool = False
    run_as_user: int = DEFAULT_RUN_AS_USER
    allow_root: bool = False
    policy: PodPolicy | None = None
    ray_auth: bool = False
    queue: str | None = None
    priority_class: str | None = None

    def pod_policy(self) -> PodPolicy:
        """The policy rendered objects are checked against (see ``policy``)."""
        if self.policy is not None:
            return self.policy
        return PodPolicy(allow_root=self.allow_root, run_as_user=self.run_as_user)


@lru_cache(maxsize=1)
def bootstrap_archive_base64() -> str:
    """The bootstrap archive (:func:`rlark.bootstrap.archive.bootstrap_archive`) as the base64
    text of a ConfigMap's ``binaryData`` (encoded once per process)."""
    return base64.b64encode(bootstrap_archive().data).decode("ascii")


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it can be a label value and part of names.

    Raises:
        ValueError: not 1-40 lower-case letters, digits or '-', alphanumeric at both ends.
    """
    if not RUN_ID.match(run_id or ""):
        raise ValueError(
            f"run id {run_id!r} must be 1-40 lower-case letters, digits or '-', starting and "
            "ending with a letter or digit"
        )
    return run_id


def owner_name(job: Job, run_id: str) -> str:
    """Name of the Run's ConfigMap (the owner of every other object of the Run)."""
    return f"{job.name}-run-{run_id}"


def head_address(job: Job, namespace: str) -> str:
    """``host:port`` of the head's Ray GCS: the headless Service's DNS name and port 6379.

    ``<svc>.<ns>.svc`` resolves in any cluster domain (the Pod's resolv.conf search list ends
    with the cluster domain)."""
    return f"{head_service_name(job.name)}.{namespace}.svc:{RAY_GCS_PORT}"


def run_labels(job: Job, run_id: str) -> dict[str, str]:
    """Labels every object of the Run carries."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: job.name, LABEL_RUN: run_id}


def cpu_quantity(value: float | int | str) -> str:
    """A CPU amount as a Kubernetes quantity: ``2`` -> ``"2"``, ``0.5`` -> ``"500m"``, strings
    unchanged. Sub-millicore parts are rounded up (Kubernetes' smallest CPU unit is 1m)."""
    if isinstance(value, str):
        return value
    cores = parse_cpu(value)
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{math.ceil(cores * 1000)}m"


def memory_quantity(value: int | str) -> str:
    """A memory amount as a Kubernetes quantity: strings unchanged, integers are bytes."""
    return value if isinstance(value, str) else str(int(value))


def _slug(text: str, limit: int = 40) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return out[:limit].strip("-") or "x"


def _volume_name(index: int, mount: Mount) -> str:
    return f"m{index}-{_slug(mount.name, 50)}"


def claim_name(job: Job, role: Role, mount: Mount, run_id: str) -> str:
    """Name of the PVC rendered for an ``objectStorage`` mount with a StorageClass."""
    return f"{job.name}-{role.name}-{_slug(mount.name)}-{run_id}"


def split_object_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``."""
    parsed = urlparse(url)
    return parsed.netloc, parsed.path.lstrip("/")


def _meta(name: str, namespace: str, labels: dict[str, str], owner: dict | None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["name"],
            "uid": owner["uid"],
        }]
    return meta


def render_config_map(job: Job, run_id: str, opts: RenderOptions) -> dict[str, Any]:
    """The Run's ConfigMap with the bootstrap archive under ``binaryData`` key
    :data:`BOOTSTRAP_KEY` (mounted read-only at :data:`BOOTSTRAP_DIR`; the keeper and the
    workload both run from it) and its sha256 in the ``rlark.io/bootstrap-sha256`` annotation.
    It is the Run's owner, so it has no ownerReference itself."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner_name(job, run_id), opts.namespace, run_labels(job, run_id), None,
                          {"rlark.io/bootstrap-sha256": bootstrap_archive().sha256}),
        "binaryData": {BOOTSTRAP_KEY: bootstrap_archive_base64()},
    }


def secret_name(job: Job, run_id: str) -> str:
    """Name of the Run's Secret holding the values of the RLark-managed secrets its env refers
    to (:func:`render_secret`)."""
    return f"{owner_name(job, run_id)}-env"


def secret_data_key(name: str, key: str) -> str:
    """The key in the Run's Secret of key ``key`` of RLark secret ``name``: ``<name>.<key>``
    (an RLark secret's name is a DNS-1123 label, without '.', so this is one to one)."""
    return f"{name}.{key}"


def render_secret(job: Job, run_id: str, opts: RenderOptions,
                  values: dict[tuple[str, str], str]) -> dict[str, Any] | None:
    """The Run's Secret: the values of the RLark-managed secrets the Job refers to
    (``(secret, key)`` -> value), each under :func:`secret_data_key`, owned by the Run's
    ConfigMap and labelled like the Run's other objects, so it goes with the Run. None when the
    Job refers to none. The Pods refer to it with ``valueFrom.secretKeyRef``
    (:func:`env_from_secrets`); no value is ever written into a Pod."""
    if not values:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(secret_name(job, run_id), opts.namespace, run_labels(job, run_id),
                          opts.owner),
        "data": {secret_data_key(n, k): base64.b64encode(v.encode("utf-8")).decode("ascii")
                 for (n, k), v in sorted(values.items())},
    }


def env_from_secrets(job: Job, role: Role, run_id: str,
                     managed: Iterable[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """The container ``env`` entries of ``role``'s variables whose values come from secrets
    (``valueFrom.secretKeyRef``), in spec order: a reference in ``managed`` (an RLark-managed
    secret's key) points at the Run's Secret (:func:`render_secret`); any other names a
    Kubernetes Secret of the namespace as written. Names RLark reserves are left out
    (preflight refuses them)."""
    from rlark.spec import RESERVED_ENV, RESERVED_ENV_PREFIX

    managed = set(managed)
    out = []
    for e in role.env:
        ref = e.secret_ref
        if ref is None or e.name in RESERVED_ENV or e.name.startswith(RESERVED_ENV_PREFIX):
            continue
        if (ref.name, ref.key) in managed:
            selector = {"name": secret_name(job, run_id), "key": secret_data_key(ref.name, ref.key)}
        else:
            selector = {"name": ref.name, "key": ref.key}
        out.append({"name": e.name, "valueFrom": {"secretKeyRef": selector}})
    return out


def ray_secret_name(job: Job, run_id: str) -> str:
    """Name of the Run's Secret holding its Ray token (:func:`render_ray_secret`)."""
    return f"{owner_name(job, run_id)}-ray"


def render_ray_secret(job: Job, run_id: str, opts: RenderOptions, token: str) -> dict[str, Any]:
    """The Run's Ray Secret: ``token`` (the Run's Ray GCS token, random per Run) under key
    ``token``, owned by the Run's ConfigMap and labelled like the Run's other objects, so the
    garbage collector and the Run's end remove it. Every Worker container takes it with
    ``valueFrom.secretKeyRef`` (:func:`ray_auth_env`); the value is never written into a Pod.

    Raises:
        ValueError: ``token`` is empty.
    """
    import base64

    if not token:
        raise ValueError("a Run's Ray token cannot be empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(ray_secret_name(job, run_id), opts.namespace, run_labels(job, run_id),
                          opts.owner),
        "data": {RAY_TOKEN_KEY: base64.b64encode(token.encode("utf-8")).decode("ascii")},
    }


def ray_auth_env(job: Job, run_id: str) -> list[dict[str, Any]]:
    """The container ``env`` entries that turn on Ray's token authentication for a Worker of a
    Run with a Ray Secret: ``RAY_AUTH_MODE=token``, and ``RAY_AUTH_TOKEN`` from the Secret's key
    ``token`` (``valueFrom.secretKeyRef``: the token is in no Pod spec)."""
    return [{"name": RAY_AUTH_MODE, "value": "token"},
            {"name": RAY_AUTH_TOKEN, "valueFrom": {"secretKeyRef": {
                "name": ray_secret_name(job, run_id), "key": RAY_TOKEN_KEY}}}]


def _with_ray_auth(env: list[dict[str, Any]], job: Job, run_id: str) -> list[dict[str, Any]]:
    """``env`` without any entry of its own for Ray's auth variables (a role's env may name
    them), then :func:`ray_auth_env`: the Run's token is the only one a Worker can have."""
    kept = [e for e in env if e["name"] not in (RAY_AUTH_MODE, RAY_AUTH_TOKEN)]
    return kept + ray_auth_env(job, run_id)


def render_service(job: Job, run_id: str, opts: RenderOptions) -> dict[str, Any]:
    """The headless Service ``<job>-head`` selecting this Run's rank-0 Pod: a DNS name for the
    head, and its GCS port (what the Workers connect to). Ray's dashboard and client ports are
    not published (``kubectl port-forward pod/<job>-<role>-0 8265`` reaches the dashboard), and
    the Run's NetworkPolicy (:func:`render_network_policy`) lets no Pod but the Run's own reach
    any port of the head."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(head_service_name(job.name), opts.namespace, run_labels(job, run_id),
                          opts.owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN: run_id, LABEL_RANK: "0"},
            "ports": [
                {"name": "gcs", "port": RAY_GCS_PORT, "targetPort": RAY_GCS_PORT, "protocol": "TCP"},
            ],
        },
    }


def network_policy_name(job: Job, run_id: str) -> str:
    """Name of the Run's NetworkPolicy (the same as its ConfigMap's: another kind)."""
    return owner_name(job, run_id)


def render_network_policy(job: Job, run_id: str, opts: RenderOptions) -> dict[str, Any]:
    """The Run's NetworkPolicy: the Run's Pods (label ``rlark.io/run``) take connections from
    the Run's own Pods only, on any port (Ray's GCS, dashboard and client ports, and the node
    manager, object manager and worker ports Ray picks from wide ranges); other Pods of the
    cluster, and Runs of other Jobs, reach none. Outgoing traffic is not restricted (images,
    DNS, data). Owned by the Run's ConfigMap, so garbage collection removes it with the Run.

    NetworkPolicy (networking.k8s.io/v1): a Pod selected by a policy with ``policyTypes:
    [Ingress]`` takes only what one of its ingress rules allows; a rule with ``from`` and no
    ``ports`` allows every port from those peers. Enforced by the cluster's network plugin
    (Calico, Cilium...); one without NetworkPolicy support ignores it."""
    selector = {"matchLabels": {LABEL_RUN: run_id}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(network_policy_name(job, run_id), opts.namespace, run_labels(job, run_id),
                          opts.owner),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": selector}]}],
        },
    }


def render_claims(job: Job, run_id: str, opts: RenderOptions) -> list[dict[str, Any]]:
    """One PVC per ``objectStorage`` mount whose ``kubernetes.storageClass`` is set (access mode
    ReadOnlyMany for read-only mounts, else ReadWriteMany: all Workers of the role share it).

    Raises:
        PolicyDenied: the Job asks for what ``opts``' policy does not allow (a StorageClass
            not on its list...).
    """
    enforce(job, opts.pod_policy())
    out = []
    for role in job.spec.roles:
        for mount in role.mounts:
            k8s = mount.kubernetes
            if mount.type != "objectStorage" or k8s is None or not k8s.storage_class:
                continue
            out.append({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": _meta(claim_name(job, role, mount, run_id), opts.namespace,
                                  {**run_labels(job, run_id), LABEL_ROLE: role.name}, opts.owner,
                                  {ANNOTATION_SOURCE: mount.source}),
                "spec": {
                    "accessModes": ["ReadOnlyMany" if mount.read_only else "ReadWriteMany"],
                    "storageClassName": k8s.storage_class,
                    "resources": {"requests": {"storage": k8s.size}},
                },
            })
    return out


def _mount_volume(job: Job, role: Role, index: int, mount: Mount, run_id: str) -> dict[str, Any]:
    name = _volume_name(index, mount)
    if mount.type == "hostPath":
        try:
            path = normalise_host_path(mount.source)
        except ValueError as exc:
            raise ValueError(f"role {role.name!r} mount {mount.name!r}: hostPath "
                             f"{mount.source!r} {exc}") from None
        return {"name": name, "hostPath": {"path": path, "type": "Directory"}}
    if mount.type == "pvc":
        return {"name": name, "persistentVolumeClaim": {"claimName": mount.source,
                                                        "readOnly": mount.read_only}}
    if copymounts.copy_reason(mount)[0]:
        return copymounts.volume(mount, name)
    k8s = mount.kubernetes
    if k8s is not None and k8s.storage_class:
        return {"name": name, "persistentVolumeClaim": {
            "claimName": claim_name(job, role, mount, run_id), "readOnly": mount.read_only}}
    if k8s is not None and k8s.csi_driver:
        bucket, prefix = split_object_url(mount.source)
        attrs = {k: v.replace("{bucket}", bucket).replace("{prefix}", prefix)
                 for k, v in k8s.volume_attributes.items()}
        csi: dict[str, Any] = {"driver": k8s.csi_driver, "readOnly": mount.read_only}
        if attrs:
            csi["volumeAttributes"] = attrs
        return {"name": name, "csi": csi}
    raise ValueError(
        f"role {role.name!r} mount {mount.name!r}: an objectStorage mount needs "
        "kubernetes.storageClass or kubernetes.csiDriver on the Kubernetes runtime"
    )


@dataclass(frozen=True)
class _RoleParts:
    """What every Pod of one role shares (computed once per role)."""

    resources: dict[str, Any]
    volume_mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    pod_extra: dict[str, Any]


def _role_parts(job: Job, role: Role, run_id: str, cm_name: str,
                policy: PodPolicy | None = None) -> _RoleParts:
    """What every Pod of ``role`` shares, once ``role`` is within ``policy`` (None: the
    strictest).

    Raises:
        PolicyDenied: ``role`` asks for what ``policy`` does not allow.
    """
    found = check_role_policy(job.spec.roles.index(role), role, policy or PodPolicy())
    if found:
        raise PolicyDenied(found)
    res = role.resources
    requests: dict[str, str] = {}
    if res.cpu is not None:
        requests["cpu"] = cpu_quantity(res.cpu)
    if res.memory is not None:
        requests["memory"] = memory_quantity(res.memory)
    if res.gpu:
        requests[GPU_RESOURCE] = str(res.gpu)
    for dev, count in sorted(res.devices.items()):
        requests[dev] = str(count)
    resources = {"requests": requests, "limits": dict(requests)} if requests else {}
    shm: dict[str, Any] = {"medium": "Memory"}
    if res.memory is not None:
        shm["sizeLimit"] = memory_quantity(res.memory)
    volumes = [
        {"name": "rlark-bootstrap", "configMap": {"name": cm_name, "defaultMode": 0o444}},
        {"name": "dshm", "emptyDir": shm},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "rlark-bootstrap", "mountPath": BOOTSTRAP_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    for i, mount in enumerate(role.mounts):
        volumes.append(_mount_volume(job, role, i, mount, run_id))
        mounts.append({"name": _volume_name(i, mount), "mountPath": mount.mount_path,
                       "readOnly": mount.read_only})
    if copymounts.copy_entries(role):
        # what the copy in wrote, for the keeper's copy out: read-only to the Worker
        volumes.append(copymounts.state_volume())
        mounts.append({"name": copymounts.STATE_VOLUME, "mountPath": copymounts.STATE_DIR,
                       "readOnly": True})
    extra: dict[str, Any] = {}
    if role.node_selector:
        extra["nodeSelector"] = dict(role.node_selector)
    k8s = role.kubernetes
    if k8s.tolerations:
        extra["tolerations"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                                for t in k8s.tolerations]
    if k8s.image_pull_secrets:
        extra["imagePullSecrets"] = [{"name": s} for s in k8s.image_pull_secrets]
    if k8s.service_account_name:
        extra["serviceAccountName"] = k8s.service_account_name
    return _RoleParts(resources, mounts, volumes, extra)


def render_pod(job: Job, worker: PlannedWorker, env: dict[str, str], run_id: str,
               opts: RenderOptions, parts: _RoleParts | None = None,
               managed: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """The Pod of one Worker, named ``<job>-<role>-<index>``.

    Args:
        env: the Worker's bootstrap environment (:func:`rlark.runtimes.base.bootstrap_env`),
            rendered as explicit ``env`` entries in its order; then the role's variables from
            secrets as ``valueFrom.secretKeyRef`` (:func:`env_from_secrets`, ``managed``: the
            references the Run's Secret holds); ``PYTHONUNBUFFERED=1`` is added.
        parts: the role's shared parts (internal; computed, and checked against ``opts``'
            policy, when not given).
    Raises:
        PolicyDenied: the role asks for what ``opts``' policy does not allow.
        ValueError: an objectStorage mount has neither storageClass nor csiDriver.
    """
    role = job.role(worker.role)
    assert role is not None, worker.role
    if parts is None:
        parts = _role_parts(job, role, run_id, owner_name(job, run_id), opts.pod_policy())
    labels = {**run_labels(job, run_id), LABEL_ROLE: worker.role, LABEL_RANK: str(worker.node_rank)}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": role.image,
        "imagePullPolicy": "IfNotPresent",
        # the keeper is PID 1 (bootstrap/keeper.py): it writes the lifecycle lines and starts the
        # workload from the same archive; -I -S: nothing from the image's site-packages or
        # PYTHON* variables
        "command": ["python", "-I", "-S", f"{BOOTSTRAP_DIR}/{BOOTSTRAP_KEY}", "keeper"],
        "env": [{"name": k, "value": v} for k, v in env.items()]
        + env_from_secrets(job, role, run_id, managed)
        + copymounts.keeper_env(job, role, run_id, managed)
        + [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "volumeMounts": [dict(m) for m in parts.volume_mounts],
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if opts.ray_auth:
        container["env"] = _with_ray_auth(container["env"], job, run_id)
    if parts.resources:
        container["resources"] = {k: dict(v) for k, v in parts.resources.items()}
    if worker.is_head:
        container["ports"] = [{"name": "gcs", "containerPort": RAY_GCS_PORT, "protocol": "TCP"}]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": int(math.ceil(job.spec.termination_grace_period_seconds)),
        "securityContext": pod_security_context(role, opts),
        "containers": [container],
        "volumes": [_copy_volume(v) for v in parts.volumes],
    }
    init = copymounts.init_container(job, role, run_id, container,
                                     {i: _volume_name(i, m) for i, m in enumerate(role.mounts)},
                                     managed)
    if init is not None:
        spec["initContainers"] = [init]
    for key, value in parts.pod_extra.items():
        spec[key] = [dict(v) for v in value] if isinstance(value, list) else (
            dict(value) if isinstance(value, dict) else value)
    annotations = None
    if opts.queue:
        # one Kueue pod group per Run, all of its Workers: admitted all together or not at all
        queued, annotations = kueue.pod_metadata(opts.queue, kueue.group_name(job.name, run_id),
                                                 job.total_workers, opts.priority_class)
        labels.update(queued)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(worker.name, opts.namespace, labels, opts.owner, annotations),
        "spec": spec,
    }


def pod_security_context(role: Role, opts: RenderOptions) -> dict[str, Any]:
    """The Pod's ``securityContext``: seccomp ``RuntimeDefault``, and ``runAsNonRoot: true`` with
    the role's ``kubernetes.runAsUser`` (else the policy's ``run_as_user``); user 0 and
    ``runAsNonRoot: false`` only for a role with ``kubernetes.runAsRoot`` when the policy
    allows root (:meth:`RenderOptions.pod_policy`)."""
    k8s = role.kubernetes
    policy = opts.pod_policy()
    if k8s.run_as_root and policy.allow_root:
        user, non_root = 0, False
    else:
        user, non_root = k8s.run_as_user or policy.run_as_user, True
    return {"runAsNonRoot": non_root, "runAsUser": user,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _copy_volume(volume: dict[str, Any]) -> dict[str, Any]:
    # one level deeper than a shallow copy: no two Pods share a mutable dict (and YAML output
    # needs no anchors)
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in volume.items()}


def worker_env(job: Job, worker: PlannedWorker, run_id: str, opts: RenderOptions) -> dict[str, str]:
    """The bootstrap environment of a Worker on Kubernetes: :func:`bootstrap_env` with the head
    Service's address, no node IP, ports or temp dir (Ray's defaults are right in a Pod)."""
    extra = {"RLARK_RAY_DASHBOARD": "1"} if (opts.ray_dashboard and worker.is_head) else None
    return bootstrap_env(job, worker, run_uid=run_id, head_address=head_address(job, opts.namespace),
                         extra=extra)


def render_run(job: Job, run_id: str, opts: RenderOptions | None = None,
               ray_token: str | None = None) -> list[dict[str, Any]]:
    """Every object of one Run, in creation order: ConfigMap (owner), the Ray Secret (with
    ``ray_token``), Service, NetworkPolicy, PVCs, Pods (rank order). Self-sufficient:
    ``kubectl apply -f`` of them runs the Job without the server.

    Args:
        job: a Job that passed preflight.
        run_id: the Run's id (label ``rlark.io/run``), see :func:`check_run_id`.
        ray_token: the Run's Ray token: its Secret is rendered and every Pod takes it
            (:func:`render_ray_secret`); None: Ray without authentication.
    Returns:
        JSON-ready dicts (camelCase, as the API server takes them). 3 + PVCs + N objects, and
        the Ray Secret with ``ray_token``.
    Raises:
        PolicyDenied: the Job asks for what ``opts``' policy does not allow (nothing rendered).
        ValueError: a bad run id, or an objectStorage mount Kubernetes cannot provide.
    """
    opts = opts or RenderOptions()
    check_run_id(run_id)
    enforce(job, opts.pod_policy())
    if ray_token is not None:
        opts = replace(opts, ray_auth=True)
    cm = render_config_map(job, run_id, opts)
    objs: list[dict[str, Any]] = [cm]
    if ray_token is not None:
        objs.append(render_ray_secret(job, run_id, opts, ray_token))
    objs += [render_service(job, run_id, opts), render_network_policy(job, run_id, opts),
             *render_claims(job, run_id, opts)]
    parts = {r.name: _role_parts(job, r, run_id, cm["metadata"]["name"], opts.pod_policy())
             for r in job.spec.roles}
    for w in plan_workers(job):
        env = worker_env(job, w, run_id, opts)
        objs.append(render_pod(job, w, env, run_id, opts, parts[w.role]))
    return objs


# the base is chosen at import time (libyaml may be missing), which a type checker cannot follow
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's dumper when present (about 10x faster); never emits anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str):
    if "\n" in data:  # scripts as readable block scalars
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


def dump_stream(objs: Iterable[dict[str, Any]], header: str = "") -> str:
    """A YAML stream (``---`` between documents) for ``kubectl apply -f -``; ``header`` lines are
    written first as ``#`` comments."""
    text = yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         explicit_start=True, width=100, allow_unicode=True)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    return text
