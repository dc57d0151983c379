"""Paths of a machine that no Job may touch: the system's own directories (pure, but for
:func:`system_dir`, which resolves links).

One table (:data:`SYSTEM_DIRECTORIES`) for every use, each directory with its own rule for each:

* a mount: a Kubernetes ``hostPath`` may not be, lie under, or hold it
  (runtimes/kubernetes/podpolicy.py), and a local Worker's ``mountPath`` may not lie in it
  (runtimes/local/sandbox.py): :func:`system_path`;
* a config root: a Job's ``workingDir`` that is the directory (``itself``) or lies anywhere in it
  (``tree``) is never a root the server reads RLinf configs from (record/finish.py):
  :func:`system_dir`. ``/root`` refuses every mount but only itself as a config root, since a
  user's checkout under ``/root/proj`` is an ordinary place for a Job's code on a single machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SystemDirectory:
    """A directory of the system, and what it forbids.

    ``mount``: no hostPath mount may be, lie under or hold it (nor a local ``mountPath`` lie in
    it). ``config_root``: as a Job's ``workingDir`` the server never reads configs from it when
    the directory is it (``"itself"``), or it or anything below it (``"tree"``); ``None``: the
    directory says nothing about config roots."""

    path: str
    mount: bool
    config_root: Literal["itself", "tree"] | None


def _d(path: str, mount: bool, config_root: Literal["itself", "tree"] | None) -> SystemDirectory:
    return SystemDirectory(path, mount, config_root)


#: the system's directories: the node's own configuration, kernel interfaces, devices, runtime
#: sockets (containerd, docker, the kubelet's), boot files, root's home, the system's programs and
#: libraries, and the top-level directories that hold everything else (``/``, ``/home``, ``/var``...:
#: never a config root themselves, a mount there is refused by what they hold or left alone)
SYSTEM_DIRECTORIES: tuple[SystemDirectory, ...] = (
    _d("/", False, "itself"),
    _d("/etc", True, "tree"), _d("/proc", True, "tree"), _d("/sys", True, "tree"),
    _d("/dev", True, "tree"), _d("/run", True, "tree"), _d("/boot", True, "tree"),
    _d("/var/run", True, None), _d("/root", True, "itself"), _d("/usr", True, "itself"),
    _d("/bin", True, "itself"), _d("/sbin", True, "itself"), _d("/lib", True, "itself"),
    _d("/lib32", True, None), _d("/lib64", True, "itself"), _d("/libx32", True, None),
    _d("/var/lib/kubelet", True, None), _d("/var/lib/containerd", True, None),
    _d("/var/lib/docker", True, None), _d("/var/lib/etcd", True, None), _d("/var/log", True, None),
    _d("/opt/cni", True, None),
    _d("/home", False, "itself"), _d("/mnt", False, "itself"), _d("/opt", False, "itself"),
    _d("/srv", False, "itself"), _d("/tmp", False, "itself"), _d("/var", False, "itself"),
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
    """The directory refusing mounts (:data:`SYSTEM_DIRECTORIES`, ``mount``) that a normalised
    ``path`` is, lies under or holds (``/`` holds them all; ``/var`` holds ``/var/run``); None
    when it touches none."""
    for d in SYSTEM_DIRECTORIES:
        if d.mount and (within(path, d.path) or within(d.path, path)):
            return d.path
    return None


def system_dir(path: str) -> bool:
    """Whether ``path`` (absolute), once symlinks and ``..`` are resolved, is a directory of
    :data:`SYSTEM_DIRECTORIES` refusing config roots, or lies in one whose rule is ``tree``."""
    real = os.path.realpath(path)
    return any(real == d.path or (d.config_root == "tree" and within(real, d.path))
               for d in SYSTEM_DIRECTORIES if d.config_root)
