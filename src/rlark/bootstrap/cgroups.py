"""Cgroups as a Worker's processes see them: which hierarchies are mounted where
(:func:`parse_mountinfo`), which cgroup a process is in (:func:`parse_proc_cgroup`), that
cgroup's directory (:func:`cgroup_dir`); and the memory cgroup's OOM-kill count and limit
(:func:`parse_oom_kills`, :func:`parse_memory_limit`, read by :class:`MemoryCgroup`), which the
keeper reads before a script starts and after it ends, so a script the kernel's OOM killer
killed is said to be (a container's first process, the keeper, survives such a kill: the
container does not end ``OOMKilled``).

Pure parsers of the kernel's file texts; only :func:`find_memory_cgroup` and
:class:`MemoryCgroup` open files. Standard library only (the bootstrap's rule); the local
runtime's Worker cgroups (``rlark.runtimes.local.isolation``) use the same parsers.

Kernel facts (Documentation/admin-guide/cgroup-v1/memory.rst, cgroup-v2.rst; cgroups(7), proc(5)):

* cgroup v1: ``memory.oom_control`` holds ``oom_kill_disable``, ``under_oom`` and, since Linux
  4.13, ``oom_kill N``: the processes of this cgroup the OOM killer killed.
  ``memory.limit_in_bytes`` is the limit; "no limit" reads as the largest page-aligned counter
  (9223372036854771712 with 4 KiB pages).
* cgroup v2: ``memory.events`` holds ``oom_kill N`` (this cgroup and its descendants);
  ``memory.max`` is the limit or ``max``.
* Inside a container ``/sys/fs/cgroup`` shows the container's own cgroup: the mount's root
  (mountinfo field 4) is the cgroup path ``/proc/self/cgroup`` names, or both are ``/`` with a
  cgroup namespace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: a memory limit at or above this many bytes is no limit (cgroup v1 reads "none" as the largest
#: page counter, 2**63 less a page; nothing real comes near 2**62 bytes)
NO_LIMIT_BYTES = 1 << 62


@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy: ``version`` 1 or 2, where it is mounted, the cgroup path its
    mount shows (``root``: ``/`` unless a subtree is bind-mounted), and v1 controllers."""

    version: int
    mount_point: str
    root: str = "/"
    controllers: tuple[str, ...] = ()


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup hierarchies in ``/proc/self/mountinfo`` text (proc(5): fields 4 and 5 are the
    mount's root and mount point; after ``-`` come the file system type and super options)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        fstype = tail[0]
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            out.append(CgroupMount(2, point, root))
        elif fstype == "cgroup" and len(tail) >= 3:
            names = tuple(o for o in tail[2].split(",") if o not in ("rw", "ro") and "=" not in o)
            out.append(CgroupMount(1, point, root, names))
    return out


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    return path.encode().decode("unicode_escape") if "\\" in path else path


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` text -> {hierarchy: path}: ``"2"`` for the v2 line (``0::/x``),
    each v1 controller (and ``name=...``) for the v1 lines (cgroups(7))."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ident, names, path = parts
        if ident == "0" and names == "":
            out["2"] = path
        else:
            for name in names.split(","):
                if name:
                    out[name] = path
    return out


def cgroup_dir(mount: CgroupMount, path: str) -> str | None:
    """The directory of cgroup ``path`` (as /proc/<pid>/cgroup names it) in ``mount``; None when
    that cgroup lies outside what the mount shows."""
    root = mount.root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root):].lstrip("/")
    return os.path.join(mount.mount_point, rel) if rel else mount.mount_point


# --- the memory cgroup ------------------------------------------------------------------------


def memory_cgroup_dirs(mounts: list[CgroupMount], own: dict[str, str]) -> list[tuple[int, str]]:
    """Where this process's memory cgroup may be, best first, as ``(version, directory)``: the
    v1 ``memory`` hierarchy (a hybrid setup keeps memory there), then the v2 one. ``own``:
    :func:`parse_proc_cgroup` of this process. Pure; the caller checks which directory holds
    the memory files (a v2 hierarchy without the memory controller has none)."""
    out = []
    for version, key in ((1, "memory"), (2, "2")):
        path = own.get(key)
        if path is None:
            continue
        for m in mounts:
            if m.version == version and (version == 2 or "memory" in m.controllers):
                where = cgroup_dir(m, path)
                if where is not None:
                    out.append((version, where))
    return out


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill N`` count of a cgroup v1 ``memory.oom_control`` or a v2 ``memory.events``
    text; None when it has no such line (v1 before Linux 4.13). Pure."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def parse_memory_limit(text: str) -> int | None:
    """A cgroup's memory limit in bytes from ``memory.limit_in_bytes`` (v1) or ``memory.max``
    (v2) text; None for no limit (``max``, or v1's largest counter: :data:`NO_LIMIT_BYTES`) or
    text that is not a number. Pure."""
    value = text.strip()
    if not value.isdigit():
        return None
    limit = int(value)
    return limit if limit < NO_LIMIT_BYTES else None


#: the files of each cgroup version: OOM-kill count, limit
MEMORY_FILES = {1: ("memory.oom_control", "memory.limit_in_bytes"),
                2: ("memory.events", "memory.max")}


class MemoryCgroup:
    """This process's memory cgroup, opened once (the keeper may then move into a mount
    namespace without ``/sys``): :meth:`oom_kills` reads the count again each time; ``limit``
    is the limit in bytes when it has one, read when opened; ``path`` where it was found, in
    the cgroup ``version`` (1 or 2) whose files :data:`MEMORY_FILES` names."""

    def __init__(self, fd: int, version: int, path: str, limit: int | None):
        self.fd, self.version, self.path, self.limit = fd, version, path, limit

    def oom_kills(self) -> int | None:
        """The cgroup's OOM-kill count now; None when it cannot be read (a kernel before 4.13)."""
        try:
            return parse_oom_kills(os.pread(self.fd, 4096, 0).decode("ascii", "replace"))
        except OSError:
            return None

    def close(self) -> None:
        os.close(self.fd)


def find_memory_cgroup(proc: str = "/proc/self") -> MemoryCgroup | None:
    """This process's memory cgroup (:func:`memory_cgroup_dirs` of ``proc``'s ``cgroup`` and
    ``mountinfo``), its count file open (not inherited by children); None when there is none
    with a readable OOM-kill count (no memory controller, a hierarchy not mounted here)."""
    try:
        with open(f"{proc}/cgroup") as f:
            own = parse_proc_cgroup(f.read())
        with open(f"{proc}/mountinfo") as f:
            mounts = parse_mountinfo(f.read())
    except OSError:
        return None
    for version, where in memory_cgroup_dirs(mounts, own):
        count_file, limit_file = MEMORY_FILES[version]
        try:
            fd = os.open(os.path.join(where, count_file), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        cg = MemoryCgroup(fd, version, where, None)
        if cg.oom_kills() is None:
            cg.close()
            continue
        try:
            with open(os.path.join(where, limit_file)) as f:
                cg.limit = parse_memory_limit(f.read())
        except OSError:
            pass
        return cg
    return None
