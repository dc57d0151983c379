"""What a Job's Worker Pods may ask for on Kubernetes, and the Findings when they ask too much
(pure: no I/O).

Every Worker Pod gets secure defaults (:mod:`.render`): no Linux capabilities, no privilege
escalation, seccomp ``RuntimeDefault``, a non-root numeric user. A role may ask for more only
where the server's :class:`PodPolicy` allows it:

* ``kubernetes.runAsRoot``: only with ``allow_root`` (``rlark server --k8s-allow-root``);
* ``hostPath`` mounts: only under ``host_path_prefixes`` (``--k8s-host-path-prefix``; none by
  default), and never ``/``, a system directory or a directory that holds one
  (:data:`SYSTEM_PATHS`), whatever the prefixes say;
* ``kubernetes.serviceAccountName``: only a name in ``service_accounts``
  (``--k8s-service-account``; none by default: the namespace's ``default`` ServiceAccount).

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
from typing import Iterator

from rlark.findings import Finding
from rlark.spec import Job

#: directories of a node a hostPath mount may never be, lie under, or hold: the node's own
#: configuration, kernel interfaces, devices, runtime sockets (containerd, docker, the kubelet's),
#: boot files, root's home and the system's programs and libraries
SYSTEM_PATHS = (
    "/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/root", "/usr", "/bin",
    "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/var/lib/kubelet", "/var/lib/containerd",
    "/var/lib/docker", "/var/lib/etcd", "/var/log", "/etc/kubernetes", "/opt/cni",
)

#: a Kubernetes object name (a ServiceAccount's, a StorageClass's) is a DNS-1123 subdomain
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

DEFAULT_RUN_AS_USER = 1000

#: for messages: how each policy knob is set on a server
KNOBS = {
    "root": "rlark server --k8s-allow-root (RLARK_K8S_ALLOW_ROOT=1)",
    "hostPath": "rlark server --k8s-host-path-prefix DIR (RLARK_K8S_HOST_PATH_PREFIXES)",
    "serviceAccount": "rlark server --k8s-service-account NAME (RLARK_K8S_SERVICE_ACCOUNTS)",
}


def normalise_host_path(path: str) -> str:
    """``path`` with repeated slashes and ``.`` parts dropped and no trailing slash
    (``//data/./x/`` -> ``/data/x``).

    Raises:
        ValueError: ``path`` is not absolute, or has a ``..`` part (what it leads to depends on
            symbolic links on the node, which RLark cannot see).
    """
    if not path.startswith("/"):
        raise ValueError("is not an absolute path")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("has a '..' part (where it leads depends on symbolic links on the node)")
    return "/" + "/".join(parts)


def _within(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or lies below it (both normalised)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def system_path(path: str) -> str | None:
    """The system directory (:data:`SYSTEM_PATHS`) a normalised ``path`` is, lies under or holds
    (``/`` holds them all; ``/var`` holds ``/var/run``); None when it touches none."""
    for sys_path in SYSTEM_PATHS:
        if _within(path, sys_path) or _within(sys_path, path):
            return sys_path
    return None


@dataclass(frozen=True)
class PodPolicy:
    """The server's policy for Worker Pods (:func:`rlark.settings.k8s_pod_policy` reads it).

    ``allow_root``: a role may set ``kubernetes.runAsRoot``. ``host_path_prefixes``: normalised
    absolute directories hostPath mounts may lie under. ``service_accounts``: names a role may
    give as ``kubernetes.serviceAccountName``. ``run_as_user``: the user id of Workers whose role
    names none. The defaults allow none of it.
    """

    allow_root: bool = False
    host_path_prefixes: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    run_as_user: int = DEFAULT_RUN_AS_USER
    @classmethod
    def checked(cls, allow_root: bool = False, host_path_prefixes: tuple[str, ...] = (),
                service_accounts: tuple[str, ...] = (), run_as_user: int = DEFAULT_RUN_AS_USER
                ) -> "PodPolicy":
        """A policy from settings, each checked.

        Raises:
            ValueError: a prefix is relative, has ``..``, or is/holds/lies under a system
                directory; a ServiceAccount name is not a DNS-1123 subdomain; ``run_as_user``
                is below 1.
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
        if run_as_user < 1:
            raise ValueError(f"RLARK_K8S_RUN_AS_USER={run_as_user} must be 1 or more (0 is root)")
        return cls(allow_root=allow_root, host_path_prefixes=tuple(prefixes),
                   service_accounts=tuple(service_accounts), run_as_user=run_as_user)


def check_pod_policy(job: Job, policy: PodPolicy) -> list[Finding]:
    """Error Findings for what ``job``'s roles ask of their Pods beyond ``policy``:
    ``RootNotAllowed`` (``kubernetes.runAsRoot`` without ``allow_root``), ``InvalidRunAsUser``
    (``kubernetes.runAsUser`` below 1), ``HostPathNotAllowed`` (a hostPath source that is not
    absolute, has ``..``, touches a system directory, or lies under no allowed prefix),
    ``ServiceAccountNotAllowed`` (a name not in ``service_accounts``). Each names the field, the
    value and the server setting that would allow it, where one would."""
    out: list[Finding] = []
    for i, role in enumerate(job.spec.roles):
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
        for j, mount in enumerate(role.mounts):
            if mount.type == "hostPath":
                out.extend(_check_host_path(mount.source, f"{base}.mounts[{j}].source", policy))
    return out


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
