"""What a Job's Worker Pods may ask for on Kubernetes, and the Findings when they ask too much
(pure: no I/O).

Every Worker Pod gets secure defaults (:mod:`.render`): no Linux capabilities, no privilege
escalation, seccomp ``RuntimeDefault``, a non-root numeric user. A role may ask for more only
where the server's :class:`PodPolicy` allows it:

* ``kubernetes.runAsRoot``: only with ``allow_root`` (``rlark server --k8s-allow-root``);
* ``hostPath`` mounts: only under ``host_path_prefixes`` (``--k8s-host-path-prefix``; none by
  default), and never ``/``, a system directory or a directory that holds one
  (:data:`rlark.paths.SYSTEM_DIRECTORIES`), whatever the prefixes say;
* ``kubernetes.serviceAccountName``: only a name in ``service_accounts``
  (``--k8s-service-account``; none by default: the namespace's ``default`` ServiceAccount);
* an ``objectStorage`` mount's inline CSI volume (``kubernetes.csiDriver``): only a driver in
  ``csi_drivers`` (``--k8s-csi-driver``; none by default). An inline CSI volume hands its
  ``volumeAttributes`` straight to a node plugin that runs with the node's privileges and
  credentials (a secrets-store driver reads a cloud vault with the node's identity, an NFS or
  SMB driver mounts whatever share it is told), so which drivers a Job may talk to is the
  administrator's choice, as Kubernetes' own docs advise for CSI ephemeral volumes
  (https://kubernetes.io/docs/concepts/storage/ephemeral-volumes/#csi-ephemeral-volumes);
* an ``objectStorage`` mount's PVC (``kubernetes.storageClass``, one RLark creates per Run):
  only a class in ``storage_classes`` (``--k8s-storage-class``; none by default). The class
  decides what the volume holds with the credentials its administrator gave it; the cluster's
  default class cannot serve these claims anyway (they are ``ReadWriteMany``/``ReadOnlyMany``
  and name their class). A ``pvc`` mount names a claim that already exists in the namespace:
  whoever made it chose its class;
* ``kubernetes.tolerations``: only those an entry of ``tolerations`` covers
  (``--k8s-toleration``; none by default). A taint keeps Pods off nodes kept for something else
  (control-plane nodes, another team's pool); a toleration is the way past it.

Paths are judged as the node's kernel would read them, with no file system at hand: a path
must be absolute and must not contain ``..`` (a symbolic link on the node could make
``a/link/..`` lead anywhere, so no lexical clean-up can be trusted); ``.`` parts and repeated
slashes are dropped (:func:`normalise_host_path`). What lies *inside* an allowed prefix is the
node administrator's to keep free of symbolic links that lead out of it (docs/security.md).

Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
the defaults pass the ``restricted`` level. ``restricted`` forbids root, ``baseline`` allows
it; both forbid hostPath volumes, which only ``privileged`` admits. A server that allows root
needs its Worker namespaces at ``baseline``, one that allows hostPath at ``privileged``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple

from rlark.findings import Finding
from rlark.names import DNS1123_SUBDOMAIN
from rlark.paths import normalise_host_path, system_path
from rlark.paths import within as _within
from rlark.runtimes.kubernetes.copymounts import copy_reason
from rlark.spec import Job, Role, Toleration

#: a Kubernetes object name (a ServiceAccount's, a StorageClass's) is a DNS-1123 subdomain

DEFAULT_RUN_AS_USER = 1000

#: a CSI driver name: at most 63 characters, alphanumeric at both ends, '-' and '.' inside
#: (Kubernetes API, CSIDriver.metadata.name / csi volume driver validation)
CSI_DRIVER = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")
#: a taint's key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63
#: letters, digits, '-', '_' and '.' (core/v1 Taint.key, a qualified name)
TAINT_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: for messages: how each policy knob is set on a server
KNOBS = {
    "root": "rlark server --k8s-allow-root (RLARK_K8S_ALLOW_ROOT=1)",
    "hostPath": "rlark server --k8s-host-path-prefix DIR (RLARK_K8S_HOST_PATH_PREFIXES)",
    "serviceAccount": "rlark server --k8s-service-account NAME (RLARK_K8S_SERVICE_ACCOUNTS)",
    "csiDriver": "rlark server --k8s-csi-driver NAME (RLARK_K8S_CSI_DRIVERS)",
    "storageClass": "rlark server --k8s-storage-class NAME (RLARK_K8S_STORAGE_CLASSES)",
    "toleration": "rlark server --k8s-toleration KEY[=VALUE][:EFFECT] (RLARK_K8S_TOLERATIONS)",
}


@dataclass(frozen=True)
class TolerationRule:
    """One entry of the server's toleration allow-list: ``KEY``, ``KEY=VALUE``, ``KEY:EFFECT``,
    ``KEY=VALUE:EFFECT`` (kubectl's taint syntax), or ``*`` (any toleration at all).

    A role's toleration is covered when its key is ``key``; with ``value`` set, only an
    ``Equal`` toleration of that value (``Exists`` tolerates every value of the key); with
    ``effect`` set, only a toleration of that effect (one without an effect tolerates them all).
    Kubernetes' rules for what a toleration matches: core/v1 Toleration,
    https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/ (an empty key
    with ``Exists`` matches every taint: only ``*`` covers it).
    """

    key: str
    value: str | None = None
    effect: str | None = None

    @classmethod
    def parse(cls, text: str) -> "TolerationRule":
        """``KEY[=VALUE][:EFFECT]`` or ``*``.

        Raises:
            ValueError: the key is not a taint key, or the effect is not one of
                NoSchedule, PreferNoSchedule, NoExecute.
        """
        raw = text.strip()
        if raw == "*":
            return cls("*")
        rest, _, effect = raw.partition(":")
        key, eq, value = rest.partition("=")
        if len(key) > 316 or not TAINT_KEY.match(key):
            raise ValueError(f"{text!r}: {key!r} is not a taint key (e.g. nvidia.com/gpu)")
        if effect and effect not in TAINT_EFFECTS:
            raise ValueError(f"{text!r}: the effect {effect!r} is not one of "
                             f"{', '.join(TAINT_EFFECTS)}")
        return cls(key, value if eq else None, effect or None)

    def covers(self, tol: "Toleration") -> bool:
        """Whether this entry allows the role's toleration ``tol``."""
        if self.key == "*":
            return True
        if not tol.key or tol.key != self.key:
            return False
        if self.value is not None and (tol.operator == "Exists" or (tol.value or "") != self.value):
            return False
        return self.effect is None or tol.effect == self.effect

    def __str__(self) -> str:
        if self.key == "*":
            return "*"
        return self.key + (f"={self.value}" if self.value is not None else "") + (
            f":{self.effect}" if self.effect else "")


class PolicyDenied(ValueError):
    """What a Run asks for is beyond the server's Pod policy (or names a Kubernetes Secret it
    may not use): raised by the renderer and by the runtime's launch before anything is
    created, so no path renders or starts a forbidden Pod. The message names each field, its
    value and the fix; :attr:`findings` holds them as Findings."""

    reason = "PolicyDenied"

    def __init__(self, findings: "list[Finding]", what: str = "the server's Pod policy"):
        self.findings = findings
        shown = "; ".join(f"{f.code}: {f.message} (fix: {f.hint})" if f.hint else
                          f"{f.code}: {f.message}" for f in findings)
        super().__init__(f"PolicyDenied: {what} refuses this Job, so nothing was created: {shown}")


@dataclass(frozen=True)
class PodPolicy:
    """The server's policy for Worker Pods (:func:`rlark.runtimes.kubernetes.settings.pod_policy` reads it).

    ``allow_root``: a role may set ``kubernetes.runAsRoot``. ``host_path_prefixes``: normalised
    absolute directories hostPath mounts may lie under. ``service_accounts``: names a role may
    give as ``kubernetes.serviceAccountName``. ``run_as_user``: the user id of Workers whose role
    names none. ``csi_drivers``: drivers an objectStorage mount may name as
    ``kubernetes.csiDriver``; ``storage_classes``: classes it may name as
    ``kubernetes.storageClass``; ``tolerations``: what ``kubernetes.tolerations`` may hold
    (:class:`TolerationRule`). The defaults allow none of it (the module docstring says why).
    """

    allow_root: bool = False
    host_path_prefixes: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    run_as_user: int = DEFAULT_RUN_AS_USER
    csi_drivers: tuple[str, ...] = ()
    storage_classes: tuple[str, ...] = ()
    tolerations: tuple[TolerationRule, ...] = ()

    @classmethod
    def checked(cls, allow_root: bool = False, host_path_prefixes: tuple[str, ...] = (),
                service_accounts: tuple[str, ...] = (), run_as_user: int = DEFAULT_RUN_AS_USER,
                csi_drivers: tuple[str, ...] = (), storage_classes: tuple[str, ...] = (),
                tolerations: tuple[str, ...] = ()) -> "PodPolicy":
        """A policy from settings, each checked.

        Raises:
            ValueError: a prefix is relative, has ``..``, or is/holds/lies under a system
                directory; a ServiceAccount or StorageClass name is not a DNS-1123 subdomain;
                a CSI driver name is not one; a toleration entry does not parse
                (:meth:`TolerationRule.parse`); ``run_as_user`` is below 1.
        """
        prefixes = []
        for raw in host_path_prefixes:
            try:
                prefix = normalise_host_path(raw)
            except ValueError as exc:
                raise ValueError(f"RLARK_K8S_HOST_PATH_PREFIXES / --k8s-host-path-prefix: "
                                 f"{raw!r} {exc}") from None
            touched = system_path(prefix)
            if touched is not None:
                raise ValueError(f"RLARK_K8S_HOST_PATH_PREFIXES / --k8s-host-path-prefix: {raw!r} "
                                 f"is or holds the system directory {touched}; hostPath mounts "
                                 "there are never allowed. Use a data directory such as /data")
            prefixes.append(prefix)
        for name in service_accounts:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
                raise ValueError(f"RLARK_K8S_SERVICE_ACCOUNTS / --k8s-service-account: {name!r} is "
                                 "not a ServiceAccount name")
        for name in storage_classes:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
                raise ValueError(f"RLARK_K8S_STORAGE_CLASSES / --k8s-storage-class: {name!r} is "
                                 "not a StorageClass name")
        for name in csi_drivers:
            if len(name) > 63 or not CSI_DRIVER.match(name):
                raise ValueError(f"RLARK_K8S_CSI_DRIVERS / --k8s-csi-driver: {name!r} is not a "
                                 "CSI driver name")
        rules = []
        for text in tolerations:
            try:
                rules.append(TolerationRule.parse(text))
            except ValueError as exc:
                raise ValueError(f"RLARK_K8S_TOLERATIONS / --k8s-toleration: {exc}; write "
                                 "KEY, KEY=VALUE, KEY:EFFECT or KEY=VALUE:EFFECT") from None
        if run_as_user < 1:
            raise ValueError(f"RLARK_K8S_RUN_AS_USER={run_as_user} must be 1 or more (0 is root)")
        return cls(allow_root=allow_root, host_path_prefixes=tuple(prefixes),
                   service_accounts=tuple(service_accounts), run_as_user=run_as_user,
                   csi_drivers=tuple(csi_drivers), storage_classes=tuple(storage_classes),
                   tolerations=tuple(rules))


def check_pod_policy(job: Job, policy: PodPolicy) -> list[Finding]:
    """Error Findings for what ``job``'s roles ask of their Pods beyond ``policy``
    (:func:`check_role_policy` of each role)."""
    out: list[Finding] = []
    for i, role in enumerate(job.spec.roles):
        out.extend(check_role_policy(i, role, policy))
    return out


def enforce(job: Job, policy: PodPolicy) -> None:
    """Refuse ``job`` when it asks for anything ``policy`` does not allow.

    Raises:
        PolicyDenied: with every Finding of :func:`check_pod_policy`.
    """
    found = check_pod_policy(job, policy)
    if found:
        raise PolicyDenied(found)


def check_role_policy(i: int, role: Role, policy: PodPolicy) -> list[Finding]:
    """Error Findings for what role ``i`` (``role``) asks of its Pods beyond ``policy``:
    ``RootNotAllowed`` (``kubernetes.runAsRoot`` without ``allow_root``), ``InvalidRunAsUser``
    (``kubernetes.runAsUser`` below 1), ``HostPathNotAllowed`` (a hostPath source that is not
    absolute, has ``..``, touches a system directory, or lies under no allowed prefix),
    ``ServiceAccountNotAllowed`` (a name not in ``service_accounts``),
    ``CsiDriverNotAllowed`` / ``StorageClassNotAllowed`` (an objectStorage mount's driver or
    class not in ``csi_drivers`` / ``storage_classes``), ``TolerationNotAllowed`` (a toleration
    no entry of ``tolerations`` covers). Each names the field, the value and the server setting
    that would allow it, where one would."""
    out: list[Finding] = []
    base = f"spec.roles[{i}]"
    k8s = role.kubernetes
    if k8s.run_as_root and not policy.allow_root:
        out.append(Finding(
            code="RootNotAllowed", path=f"{base}.kubernetes.runAsRoot",
            message=f"{base}.kubernetes.runAsRoot = true: this server runs Worker Pods as a "
                    "non-root user only",
            hint="remove runAsRoot (Workers run as user "
                 f"{k8s.run_as_user or policy.run_as_user}), or ask the administrator to "
                 f"allow root with `{KNOBS['root']}`"))
    if k8s.run_as_user is not None and k8s.run_as_user < 1:
        out.append(Finding(
            code="InvalidRunAsUser", path=f"{base}.kubernetes.runAsUser",
            message=f"{base}.kubernetes.runAsUser = {k8s.run_as_user}: a user id of 1 or more "
                    "is needed (0 is root)",
            hint="give a non-root user id such as 1000, or use runAsRoot where the server "
                 "allows it"))
    sa = k8s.service_account_name
    if sa is not None and sa not in policy.service_accounts:
        allowed = ", ".join(policy.service_accounts) or "none"
        out.append(Finding(
            code="ServiceAccountNotAllowed", path=f"{base}.kubernetes.serviceAccountName",
            message=f"{base}.kubernetes.serviceAccountName = {sa[:80]!r} is not a "
                    f"ServiceAccount this server lets Workers use (allowed: {allowed})",
            hint="remove it (Workers then use the namespace's default ServiceAccount, without "
                 f"its token), or ask the administrator to allow it with "
                 f"`{KNOBS['serviceAccount']}`"))
    for k, tol in enumerate(k8s.tolerations):
        if not any(rule.covers(tol) for rule in policy.tolerations):
            allowed = ", ".join(str(r) for r in policy.tolerations) or "none"
            shown = _toleration_text(tol)
            out.append(Finding(
                code="TolerationNotAllowed", path=f"{base}.kubernetes.tolerations[{k}]",
                message=f"{base}.kubernetes.tolerations[{k}] = {shown} is not a toleration this "
                        f"server lets Workers have (allowed: {allowed}): a taint keeps Pods off "
                        "nodes kept for something else",
                hint="remove it, or ask the administrator to allow it with "
                     f"`{KNOBS['toleration']}`"))
    for j, mount in enumerate(role.mounts):
        path = f"{base}.mounts[{j}]"
        if mount.type == "hostPath":
            out.extend(_check_host_path(mount.source, f"{path}.source", policy))
        mk = mount.kubernetes
        if mount.type != "objectStorage" or mk is None:
            continue
        if mk.csi_driver and mk.csi_driver not in policy.csi_drivers:
            allowed = ", ".join(policy.csi_drivers) or "none"
            out.append(Finding(
                code="CsiDriverNotAllowed", path=f"{path}.kubernetes.csiDriver",
                message=f"{path}.kubernetes.csiDriver = {mk.csi_driver[:80]!r} is not a CSI "
                        f"driver this server lets Workers mount inline (allowed: {allowed}): "
                        "the driver acts on the node with the node's credentials",
                hint="use a StorageClass the server allows (kubernetes.storageClass), or ask "
                     f"the administrator to allow the driver with `{KNOBS['csiDriver']}`"))
        if mk.storage_class and mk.storage_class not in policy.storage_classes:
            allowed = ", ".join(policy.storage_classes) or "none"
            out.append(Finding(
                code="StorageClassNotAllowed", path=f"{path}.kubernetes.storageClass",
                message=f"{path}.kubernetes.storageClass = {mk.storage_class[:80]!r} is not a "
                        f"StorageClass this server lets Runs make claims of (allowed: {allowed})",
                hint="use a class the server allows, or ask the administrator to allow it with "
                     f"`{KNOBS['storageClass']}`"))
    return out


def _toleration_text(tol: Toleration) -> str:
    """A role's toleration as ``key=value:effect`` / ``key:Exists`` for messages."""
    key = (tol.key or "")[:80] or "(every taint)"
    what = f"{key} (Exists)" if tol.operator == "Exists" else f"{key}={(tol.value or '')[:80]}"
    return what + (f":{tol.effect}" if tol.effect else " (every effect)")


def _check_host_path(source: str, path: str, policy: PodPolicy) -> Iterator[Finding]:
    shown = source[:200]
    try:
        norm = normalise_host_path(source)
    except ValueError as exc:
        yield Finding(code="HostPathNotAllowed", path=path,
                      message=f"{path} = {shown!r} {exc}",
                      hint="give the absolute directory on the node, without '..'")
        return
    touched = system_path(norm)
    if touched is not None:
        what = "is" if norm == touched else ("lies under" if _within(norm, touched) else "holds")
        yield Finding(code="HostPathNotAllowed", path=path,
                      message=f"{path} = {shown!r} {what} the node's system directory {touched}: "
                              "a Worker is never given it",
                      hint="mount a data directory (e.g. under /data), a pvc, or objectStorage")
        return
    if not any(_within(norm, p) for p in policy.host_path_prefixes):
        allowed = ", ".join(policy.host_path_prefixes) or "none"
        yield Finding(code="HostPathNotAllowed", path=path,
                      message=f"{path} = {shown!r} is under no directory this server lets "
                              f"hostPath mounts use (allowed: {allowed})",
                      hint="use a pvc or objectStorage mount, or ask the administrator to allow "
                           f"the directory with `{KNOBS['hostPath']}` (and the namespace's "
                           "Pod Security level to permit hostPath: docs/security.md)")


# --- Kubernetes Secrets a Job may name ----------------------------------------------------------

#: the label an administrator puts on a Kubernetes Secret of a project's namespace to let that
#: project's Jobs name it in ``valueFrom.secretKeyRef`` (value: the project's name)
SECRET_PROJECT_LABEL = "rlark.io/project"


class SecretInfo(NamedTuple):
    """What RLark reads of a Kubernetes Secret to judge a reference to it: its labels and the
    names of its keys (never a value)."""

    labels: dict[str, str]
    keys: frozenset[str]


def secret_allowed(found: SecretInfo | None, projects: Iterable[str]) -> bool:
    """Whether a Job of one of ``projects`` may name the Kubernetes Secret ``found`` (None: no
    such Secret): only one an administrator labelled ``rlark.io/project=<project>``.

    Why a label on the Secret, not a server setting: it is set per Secret and per project by
    whoever may change Secrets in that namespace (an administrator, never a project member
    through RLark), shows in ``kubectl get secret --show-labels``, needs no server restart, and
    a Secret nobody labelled (RLark's own, another application's, a ServiceAccount token, a
    Run's own ``-env``/``-ray`` Secret) stays out of reach. The project's name as the value keeps
    a namespace later given to another project from handing it the first one's Secrets."""
    if found is None:
        return False
    return found.labels.get(SECRET_PROJECT_LABEL) in set(projects)


def secret_not_allowed(path: str, env_name: str, name: str, project: str,
                       namespace: str | None, field: str = "name") -> Finding:
    """The ``SecretNotAllowed`` error for a ``secretKeyRef`` (at ``path``; the name in its
    ``field``) naming ``name``, which is neither an RLark secret of ``project`` nor a
    Kubernetes Secret allowed for it. Its text is the same whether a Secret of that name
    exists or not, and never names a key."""
    where = f"namespace {namespace}" if namespace else "the Run's namespace"
    return Finding(
        code="SecretNotAllowed", path=f"{path}.{field}",
        message=f"{path}.{field} = {name[:253]!r}: {env_name} may take its value only from a secret "
                f"project {project!r} may use: one of its RLark secrets, or a Kubernetes Secret "
                f"of {where} that an administrator labelled {SECRET_PROJECT_LABEL}={project}; "
                "this name is neither",
        hint=f"set it in RLark: `rlark secret set {name[:253]} KEY -p {project}` (the value is "
             "read from stdin), or ask an administrator to allow the Kubernetes Secret: "
             f"`kubectl label secret {name[:253]} -n {namespace or 'NAMESPACE'} "
             f"{SECRET_PROJECT_LABEL}={project}`")


def check_secret_refs(job: Job, managed: Iterable[tuple[str, str]], project: str,
                      namespace: str | None, lookup: "Callable[[str], SecretInfo | None]",
                      projects: Iterable[str] | None = None) -> list[Finding]:
    """``SecretNotAllowed`` errors for the ``valueFrom.secretKeyRef`` references of ``job`` that
    are not RLark-managed (``managed``: ``(secret, key)`` pairs RLark holds values for) and name
    a Kubernetes Secret :func:`secret_allowed` refuses for ``projects`` (default: ``project``
    alone), read through ``lookup`` (name -> :class:`SecretInfo`, None when missing; each name
    once); ``SecretNotFound`` for a key an allowed Secret lacks (no key is listed). Variables
    RLark reserves are left out (never rendered).

    Raises:
        whatever ``lookup`` raises (the API refused or failed the read): nothing is allowed on
        what RLark could not read.
    """
    from rlark.spec import RESERVED_ENV, RESERVED_ENV_PREFIX

    held = set(managed)
    allowed_for = set(projects) if projects is not None else {project}
    seen: dict[str, SecretInfo | None] = {}

    def read(name: str) -> SecretInfo | None:
        if name not in seen:  # each Secret read once
            seen[name] = lookup(name)
        return seen[name]

    out: list[Finding] = []
    for i, role in enumerate(job.spec.roles):
        for j, env in enumerate(role.env):
            ref = env.secret_ref
            if (ref is None or (ref.name, ref.key) in held or env.name in RESERVED_ENV
                    or env.name.startswith(RESERVED_ENV_PREFIX)):
                continue
            path = f"spec.roles[{i}].env[{j}].valueFrom.secretKeyRef"
            found = read(ref.name)
            if not secret_allowed(found, allowed_for):
                out.append(secret_not_allowed(path, env.name, ref.name, project, namespace))
            elif found is not None and ref.key not in found.keys:
                out.append(Finding(
                    code="SecretNotFound", path=f"{path}.key",
                    message=f"{path}.key = {ref.key[:253]!r}: the Kubernetes Secret "
                            f"{ref.name!r} has no such key ({env.name} would have no value)",
                    hint="use a key the Secret has (its administrator knows them), or set the "
                         f"value in RLark: `rlark secret set {ref.name} {ref.key} -p {project}`"))
        for j, mount in enumerate(role.mounts):
            # a copy-mode objectStorage mount's keys reach its Pods' copy (copymounts.py)
            refs = [r for r in mount.secret_refs() if r not in held]
            if not refs or not copy_reason(mount)[0]:
                continue
            path = f"spec.roles[{i}].mounts[{j}].objectStorage"
            secret = refs[0][0]
            found = read(secret)
            if not secret_allowed(found, allowed_for):
                out.append(secret_not_allowed(path, f"mount {mount.name!r}", secret, project,
                                              namespace, field="secret"))
            elif found is not None and any(key not in found.keys for _, key in refs):
                out.append(Finding(
                    code="SecretNotFound", path=f"{path}.secret",
                    message=f"{path}.secret = {secret!r}: the Kubernetes Secret lacks a key an S3 mount "
                            f"needs ({', '.join(k for _, k in refs)}; mount {mount.name!r} "
                            "would have no credentials)",
                    hint="use a Secret with both keys, or set them in RLark: "
                         f"`rlark secret set {secret} accessKeyId ... -p {project}`"))
    return out
