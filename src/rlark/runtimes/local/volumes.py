"""A ``pvc`` mount on the local runtime: a named volume of the Job's project, a directory
``$RLARK_HOME/volumes/<project>/<name>`` that outlives the Runs.

On Kubernetes a ``pvc`` mount names a PersistentVolumeClaim of the project's namespace; here it
names a directory of RLark's own, made on first use, bound at the mount's ``mountPath`` in each
Worker's own mount namespace (:func:`rlark.runtimes.local.sandbox.plan`). Volumes of one project
are never reachable from another's Workers: each lies below ``$RLARK_HOME``, which every Worker's
view covers, and only the volumes a Job names are bound back.

Each Run's Workers have a uid of their own (:mod:`rlark.runtimes.local.identity`), so what an
earlier Run wrote into a volume belongs to that Run's uid. Before a Run's Workers start, the
volume is given to the Run's uid (:func:`claim`), as Kubernetes changes a volume's ownership to
a Pod's ``fsGroup`` when it mounts it (``fsGroupChangePolicy``,
kubernetes.io/docs/tasks/configure-pod-container/security-context): only what a Worker uid of
this server owns is changed, never a file of anyone else's that a Worker linked in.

Pure but for :func:`claim`, :func:`usage` and :func:`remove`, which walk a volume without
following a symbolic link.
"""

from __future__ import annotations

import os
import shutil
import stat as stat_module
from typing import Callable

from rlark.names import DNS1123_SUBDOMAIN

#: a volume's name: a Kubernetes PersistentVolumeClaim's (a DNS-1123 subdomain, at most 253
#: characters: lower-case letters, digits, '-' and '.', starting and ending with a letter or
#: digit), so the same Job names a volume on either runtime
VOLUME_NAME = DNS1123_SUBDOMAIN
MAX_NAME = 253


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a volume (:data:`VOLUME_NAME`), or None."""
    if len(name) > MAX_NAME or not VOLUME_NAME.match(name):
        return (f"{name[:80]!r} is not a volume name: use at most {MAX_NAME} lower-case letters, "
                "digits, '-' and '.', starting and ending with a letter or digit (a "
                "PersistentVolumeClaim's name)")
    return None


def volumes_root(rlark_home: str) -> str:
    """``$RLARK_HOME/volumes``: every project's volumes (root's, mode 0700)."""
    return os.path.join(rlark_home, "volumes")


def volume_dir(rlark_home: str, project: str, name: str) -> str:
    """The directory of volume ``name`` of ``project`` (pure).

    Raises:
        ValueError: ``name`` is not a volume name, or ``project`` not one path component.
    """
    why = name_problem(name)
    if why:
        raise ValueError(why)
    if not project or "/" in project or project in (".", "..") or "\x00" in project:
        raise ValueError(f"project {project!r} cannot name a directory")
    return os.path.join(volumes_root(rlark_home), project, name)


def claim(path: str, uid: int, worker_uid: Callable[[int], bool]) -> int:
    """Give what lies in the volume at ``path`` (itself included) to ``uid`` (owner and group),
    where it belongs to another Worker uid (``worker_uid``: whether a uid is one of this
    server's Workers'): a directory, or a file or link with a single name (a second name is a
    hard link, which may be one of a file outside the volume). Walks by descriptor and follows
    no link (``os.fwalk``), so a link a Worker planted cannot lead the walk elsewhere. Returns
    how many entries changed owner.

    Raises:
        OSError: the volume cannot be walked.
    """
    changed = 0

    def take(name: str, dir_fd: int) -> None:
        nonlocal changed
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return  # removed meanwhile by a Worker still running
        if st.st_uid == uid or not worker_uid(st.st_uid):
            return
        if not stat_module.S_ISDIR(st.st_mode) and st.st_nlink != 1:
            return
        os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
        changed += 1

    parent, base = os.path.split(path)
    top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        take(base, top)
    finally:
        os.close(top)
    for _root, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            take(name, dir_fd)
    return changed


def usage(path: str) -> tuple[int, int]:
    """``(bytes, files)`` of the volume at ``path``: the apparent size of its regular files and
    how many entries it holds (directories, links and files below it), walked by descriptor
    without following a link."""
    size = entries = 0
    for _root, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        entries += len(dirs) + len(files)
        for name in files:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat_module.S_ISREG(st.st_mode):
                size += st.st_size
    return size, entries


def listing(rlark_home: str, project: str) -> list[dict]:
    """The volumes of ``project``, by name: ``[{"name", "bytes", "entries", "modifiedAt"
    (seconds since the epoch of the volume directory's last change)}]``; ``[]`` when it has
    none. A name that is no volume's (left there by hand) is left out."""
    root = os.path.join(volumes_root(rlark_home), project)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if name_problem(name) or not stat_module.S_ISDIR(st.st_mode):
            continue
        size, entries = usage(path)
        out.append({"name": name, "bytes": size, "entries": entries, "modifiedAt": st.st_mtime})
    return out


def remove(rlark_home: str, project: str, name: str) -> tuple[int, int] | None:
    """Delete volume ``name`` of ``project`` and all it holds; ``(bytes, entries)`` it held, or
    None when there is no such volume. ``shutil.rmtree`` removes by descriptor on Linux and
    never follows a link out of the tree.

    Raises:
        ValueError: a bad name (:func:`volume_dir`). OSError: it cannot be removed.
    """
    path = volume_dir(rlark_home, project, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat_module.S_ISDIR(st.st_mode):
        return None
    held = usage(path)
    shutil.rmtree(path)
    return held
