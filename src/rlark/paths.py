"""Paths of a machine that no Job may touch: the system's own directories (pure, but for
:func:`system_dir`, which resolves links).

One list for every runtime: a Kubernetes ``hostPath`` mount may not be, lie under, or hold one
(runtimes/kubernetes/podpolicy.py), and a local Worker's ``mountPath`` may not lie in one
(runtimes/local/sandbox.py). A Job's ``workingDir`` that is a directory of the system as a whole
(:func:`system_dir`) is never a root the server reads RLinf configs from.
"""

from __future__ import annotations

import os

#: directories of a node a hostPath mount may never be, lie under, or hold: the node's own
#: configuration, kernel interfaces, devices, runtime sockets (containerd, docker, the kubelet's),
#: boot files, root's home and the system's programs and libraries
SYSTEM_PATHS = (
    "/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/root", "/usr", "/bin",
    "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/var/lib/kubelet", "/var/lib/containerd",
    "/var/lib/docker", "/var/lib/etcd", "/var/log", "/etc/kubernetes", "/opt/cni",
)


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


def within(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or lies below it (both normalised)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def system_path(path: str) -> str | None:
    """The system directory (:data:`SYSTEM_PATHS`) a normalised ``path`` is, lies under or holds
    (``/`` holds them all; ``/var`` holds ``/var/run``); None when it touches none."""
    for sys_path in SYSTEM_PATHS:
        if within(path, sys_path) or within(sys_path, path):
            return sys_path
    return None


#: directories of the system as a whole: a Job's workingDir that is one of them (or lies under
#: those of :data:`SYSTEM_TREES`) never lets the composer read configs there
SYSTEM_DIRS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/mnt",
                         "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",
                         "/var"})
SYSTEM_TREES = ("/boot", "/dev", "/etc", "/proc", "/run", "/sys")


def system_dir(path: str) -> bool:
    """Whether ``path`` (absolute) is, once symlinks and ``..`` are resolved, ``/``, one of
    :data:`SYSTEM_DIRS`, or lies under one of :data:`SYSTEM_TREES`."""
    real = os.path.realpath(path)
    return real in SYSTEM_DIRS or any(real.startswith(t + "/") for t in SYSTEM_TREES)
