"""What a local Worker may see of this machine, when it runs under an identity of its own.

A Worker whose Run has its own uid (:mod:`rlark.runtimes.local.identity`) sees the file system
as any other user of this machine does ("others" in the permission bits), in a mount namespace
of its own that its keeper builds (``bootstrap/keeper.py``, :func:`apply_sandbox`) from the plan
made here:

* ``$RLARK_HOME`` (database, credentials, secret key, every Run's logs) is covered by an empty
  tmpfs, whatever its mode, and so is every directory others may not enter that lies above a
  path RLark gives the Worker (``/root`` when the server's checkout is there): nothing below it is
  reachable but what the plan binds back.
* bound back, at their own paths: the Worker's home (its ``HOME``), the Run's Ray temp directory
  (every Worker of the Run, so nodes of a Ray older than 2.55 find the head's session there),
  the Python the role runs (read-only), and the Job's ``workingDir`` as a copy-on-write overlay
  (the Worker reads the files, its writes land in its own directory: a working directory of its
  own at the same path, so relative paths in the user's config hold);
* the role's ``hostPath`` mounts (the source, never a system directory) and ``pvc`` mounts (the
  project's volume, :mod:`rlark.runtimes.local.volumes`) at their ``mountPath``, read-only where
  the mount says so: the same meaning as a Pod's volumes on Kubernetes;
* ``/tmp`` and ``/var/tmp`` are the Worker's own directory, ``/dev/shm`` its own tmpfs (sized for
  Ray's object store), and System V IPC its own namespace, so nothing one Run leaves in a shared
  place reaches another.

A path RLark binds for the Worker that others could not reach anyway (below a directory of mode
0700) is given only when it lies under a root the server's administrator allowed
(``rlark server --worker-read-path``; the server's own Python installation always is), and never
inside ``$RLARK_HOME``: a member cannot widen what Workers read by naming a path.

Everything here is pure; the stat function is passed in (``os.stat`` in the runtime, a table in
the tests).
"""

from __future__ import annotations

import os
import stat as stat_module
from dataclasses import dataclass
from typing import Callable, Iterable

StatFn = Callable[[str], os.stat_result]

#: where the keeper stages bind mounts before it covers the hidden directories (must lie outside
#: every one of them; /run is a tmpfs the server owns on every Linux)
STAGE_DIR = "/run/rlark-stage"
#: /dev/shm above Ray's object store (bytes): Ray falls back to /tmp, slower, when /dev/shm is
#: smaller than the store
SHM_HEADROOM = 256 * 1024 * 1024


@dataclass(frozen=True)
class WorkerDirs:
    """A Worker's own directories on this machine (host paths): ``root``
    (``$RLARK_HOME/workers/<run uid>/<rank>``) with ``home``, ``tmp`` and the overlay's
    ``upper`` and ``work`` below it, and the Run's Ray temp directory ``ray_run``
    (``<ray tmp root>/<run uid>``; the Worker's own is ``<ray_run>/<rank>``)."""

    root: str
    home: str
    tmp: str
    upper: str
    work: str
    ray_run: str
    ray_temp: str


def worker_dirs(rlark_home: str, ray_tmp_root: str, run_uid: str, rank: int) -> WorkerDirs:
    """The directories of Worker ``rank`` of Run ``run_uid`` (pure)."""
    root = os.path.join(rlark_home, "workers", run_uid, str(rank))
    ray_run = os.path.join(ray_tmp_root, run_uid)
    return WorkerDirs(root=root, home=os.path.join(root, "home"), tmp=os.path.join(root, "tmp"),
                      upper=os.path.join(root, "upper"), work=os.path.join(root, "work"),
                      ray_run=ray_run, ray_temp=os.path.join(ray_run, str(rank)))


def _inside(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    """``/``, ``/a``, ``/a/b`` for ``/a/b/c`` (not the path itself)."""
    parts = [p for p in os.path.normpath(path).split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def blocking_dir(path: str, stat: StatFn) -> str | None:
    """The first directory above ``path`` that others may not enter (no ``o+x``), None when
    every one may be entered (a missing one counts as blocking: nothing can be reached through
    it)."""
    for d in _ancestors(path):
        try:
            st = stat(d)
        except OSError:
            return d
        if not stat_module.S_ISDIR(st.st_mode) or not st.st_mode & stat_module.S_IXOTH:
            return d
    return None


def readable_by_others(path: str, stat: StatFn) -> bool:
    """Others may reach ``path`` and read it (a directory: list and enter it)."""
    if blocking_dir(path, stat) is not None:
        return False
    try:
        st = stat(path)
    except OSError:
        return False
    need = stat_module.S_IROTH | (stat_module.S_IXOTH if stat_module.S_ISDIR(st.st_mode) else 0)
    return st.st_mode & need == need


def _mode_text(path: str, stat: StatFn) -> str:
    try:
        st = stat(path)
    except OSError as exc:
        return f"{path} ({exc.strerror or 'missing'})"
    return f"{path} (mode {stat_module.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})"


def access_problem(path: str, what: str, *, rlark_home: str, allowed: Iterable[str],
                   stat: StatFn, realpath: Callable[[str], str] = os.path.realpath,
                   own: Iterable[str] = ()) -> str | None:
    """Why a local Worker may not be given ``path`` (``what`` names it, e.g. "spec.workingDir"),
    or None when it may. Judged on where ``path`` really leads (``realpath``: links resolved;
    the keeper then binds exactly that, following no link): never inside or above
    ``$RLARK_HOME`` or another of RLark's own directories (``own``: the lock directory, the
    stage, the Ray temp root); else when others can read it, or it lies under one of the
    ``allowed`` roots. Pure; the message names the path, what blocks it and the fixes, and never
    where a link leads nor whether something exists below a directory others may not enter."""
    real = os.path.normpath(realpath(path))
    for mine in (rlark_home, *own):
        if _inside(real, mine) or _inside(mine, real):
            return (f"{what} {path!r} leads {'into' if _inside(real, mine) else 'above'} one of "
                    "the RLark server's own directories (its state: database, credentials, "
                    "every Run's logs and locks): Workers never see those")
    if readable_by_others(real, stat):
        return None
    if any(_inside(real, os.path.normpath(realpath(root))) for root in allowed):
        return None
    block = blocking_dir(real, stat) or real
    return (f"{what} {path!r} is not readable by the Workers' user (they run under a uid of "
            f"their own and read what other users of this machine may): it lies below "
            f"{_mode_text(block, stat)}. Move it under a directory others may read, make it "
            "readable (chmod o+rx), or have the server's administrator allow it: rlark server "
            "--worker-read-path DIR (RLARK_WORKER_READ_PATHS)")


def mount_target_problem(target: str, what: str, *, rlark_home: str,
                         own: Iterable[str] = ()) -> str | None:
    """Why ``target`` (a ``mountPath``) cannot be a mount point in a local Worker's view, or
    None: it must be absolute without ``..``, and neither be, lie under nor hold a system
    directory (:data:`rlark.paths.SYSTEM_DIRECTORIES`) or one of RLark's own (``$RLARK_HOME``,
    ``own``). A missing mount point is made, as an empty directory of root's, where the target
    asks (pure)."""
    from rlark.paths import normalise_host_path, system_path

    try:
        norm = normalise_host_path(target)
    except ValueError as exc:
        return f"{what} {target!r} {exc}"
    touched = system_path(norm)
    if norm == "/" or touched is not None:
        return (f"{what} {target!r} {'is' if norm == touched else 'touches'} the system's own "
                f"directory {touched or '/'}: a mount there would change what the machine's "
                "programs see; mount at a path of your own, e.g. /data/NAME")
    for mine in (rlark_home, STAGE_DIR, *own):
        if _inside(norm, mine) or _inside(mine, norm):
            return f"{what} {target!r} touches one of the RLark server's own directories"
    return None


def host_source_problem(source: str, what: str,
                        realpath: Callable[[str], str] = os.path.realpath) -> str | None:
    """Why a ``hostPath`` mount's ``source`` may never be bound for a Worker, whatever may read
    it: it is ``/``, or is, lies under or holds a system directory
    (:func:`rlark.paths.system_path`), judged where it really leads (``realpath``), as the
    Kubernetes runtime's Pod policy judges a hostPath (the same words). None when it is none of
    those; :func:`access_problem` says whether Workers may be given it. Pure."""
    from rlark.paths import system_path

    real = os.path.normpath(realpath(source))
    touched = "/" if real == "/" else system_path(real)
    if touched is None:
        return None
    how = "is" if real == touched else "lies under" if _inside(real, touched) else "contains"
    return f"{what} = {source!r} {how} the node's system directory {touched}: a Worker is never given it"


class SandboxPlanError(ValueError):
    """The plan cannot be made (the message says why)."""


def plan(dirs: WorkerDirs, *, rlark_home: str, read_only: Iterable[str] = (),
         working_dir: str | None = None, shm_bytes: int, stat: StatFn,
         host_mounts: Iterable[tuple[str, str, bool]] = (),
         stage: str = STAGE_DIR) -> dict:
    """The mount plan of one Worker, for the keeper (``bootstrap/keeper.py``, ``apply_sandbox``):
    ``{"stage", "binds": [{source, target, readonly}], "overlays": [{lower, upper, work,
    target}], "hide": [dir], "tmpfs": [{target, size, mode}]}`` (pure).

    ``read_only``: paths bound read-only at their own path where others could not reach them
    (the role's Python installation; checked with :func:`access_problem` before);
    ``working_dir``: the Job's ``workingDir``, given as an overlay on ``dirs.upper``;
    ``shm_bytes``: the size of the Worker's ``/dev/shm``; ``host_mounts``: the role's
    ``hostPath`` and ``pvc`` mounts as ``(source, mountPath, readOnly)`` (a pvc's source: its
    volume's directory, :mod:`rlark.runtimes.local.volumes`), bound at ``mountPath``, read-only
    where asked (the keeper remounts the bind ``MS_RDONLY``); a hostPath source is checked with
    :func:`access_problem` and :func:`host_source_problem` before, and the Worker writes there
    only where its uid may.

    Raises:
        SandboxPlanError: a directory to hide is ``/``, or the stage lies in a hidden one.
    """
    binds = [
        {"source": dirs.home, "target": dirs.home, "readonly": False},
        {"source": dirs.ray_run, "target": dirs.ray_run, "readonly": False},
        {"source": dirs.tmp, "target": "/tmp", "readonly": False},
    ]
    try:
        if stat_module.S_ISDIR(stat("/var/tmp").st_mode):
            binds.append({"source": dirs.tmp, "target": "/var/tmp", "readonly": False})
    except OSError:
        pass
    for path in sorted({os.path.normpath(p) for p in read_only}):
        if not readable_by_others(path, stat):
            binds.append({"source": path, "target": path, "readonly": True})
    for source, target, ro in host_mounts:
        binds.append({"source": os.path.normpath(source), "target": os.path.normpath(target),
                      "readonly": bool(ro)})
    overlays = []
    if working_dir:
        wd = os.path.normpath(working_dir)
        overlays.append({"lower": wd, "upper": dirs.upper, "work": dirs.work, "target": wd})
    for o in overlays:
        for key in ("lower", "upper", "work"):
            if any(c in o[key] for c in ",:\\"):
                raise SandboxPlanError(
                    f"{o[key]!r} holds ',', ':' or '\\', which an overlay mount cannot take; "
                    "rename the directory")
    hide = {os.path.normpath(rlark_home)}
    for target in [str(b["target"]) for b in binds] + [o["target"] for o in overlays]:
        block = blocking_dir(target, stat)
        if block is not None and _exists(block, stat):  # a missing one: the keeper makes it
            hide.add(block)
    hide = {h for h in hide if not any(h != o and _inside(h, o) for o in hide)}
    if "/" in hide:
        raise SandboxPlanError("others may not enter / on this machine: nothing can be given to "
                               "a Worker")
    if any(_inside(stage, h) for h in hide):
        raise SandboxPlanError(f"the stage directory {stage} lies in {sorted(hide)}, which "
                               "Workers must not see")
    tmpfs = [{"target": "/dev/shm", "size": int(shm_bytes) + SHM_HEADROOM, "mode": "1777"}]
    # the machine's other shared, writable directories: the Worker's own empty ones, so nothing
    # it writes there outlives it or reaches another Run
    tmpfs += [{"target": d, "size": SHARED_DIR_BYTES, "mode": "1777"} for d in SHARED_DIRS
              if _is_dir(d, stat)]
    return {
        "stage": stage,
        "binds": binds,
        "overlays": overlays,
        "hide": sorted(hide),
        "tmpfs": tmpfs,
        "mqueue": _is_dir("/dev/mqueue", stat),
    }


#: writable directories every user shares besides /tmp, /var/tmp and /dev/shm (which the plan
#: gives the Worker of its own already): covered with an empty tmpfs of the Worker's own
SHARED_DIRS = ("/run/lock", "/var/crash", "/var/metrics")
SHARED_DIR_BYTES = 16 * 1024 * 1024


def _is_dir(path: str, stat: StatFn) -> bool:
    try:
        return stat_module.S_ISDIR(stat(path).st_mode)
    except OSError:
        return False


def _exists(path: str, stat: StatFn) -> bool:
    try:
        stat(path)
    except OSError:
        return False
    return True


def python_prefixes(executable: str, realpath: Callable[[str], str] = os.path.realpath,
                    read_text: Callable[[str], str] | None = None) -> list[str]:
    """The installation directories a Python interpreter needs to run: its virtualenv (the
    directory above ``bin/`` holding ``pyvenv.cfg``) and the base installation (above the
    ``bin/`` of ``pyvenv.cfg``'s ``home``, and of the interpreter's real path). Reads
    ``pyvenv.cfg`` (PEP 405) and resolves links; nothing else."""
    out: list[str] = []
    read = read_text or (lambda p: open(p, encoding="utf-8").read())
    env_dir = os.path.dirname(os.path.dirname(os.path.abspath(executable)))
    try:
        cfg = read(os.path.join(env_dir, "pyvenv.cfg"))
    except OSError:
        cfg = None
    if cfg is not None:
        out.append(env_dir)
        for line in cfg.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home" and value.strip():
                out.append(os.path.dirname(os.path.normpath(value.strip())))
    real = realpath(executable)
    out.append(os.path.dirname(os.path.dirname(real)))
    seen: list[str] = []
    for p in out:
        if p not in seen and p != "/":
            seen.append(p)
    return seen


def reader_plan(*, rlark_home: str, read_only: Iterable[str], stat: StatFn,
                stage: str = STAGE_DIR) -> dict:
    """The view of a process the server runs to read what a Job names (its RLinf config): this
    machine as others see it, ``$RLARK_HOME`` covered, and ``read_only`` paths bound read-only
    at their own paths where others could not reach them (pure; the keeper's ``--exec`` applies
    it; the process writes nothing, so it needs no directory of its own).

    Raises:
        SandboxPlanError: a directory to hide is ``/``, or the stage lies in a hidden one.
    """
    paths = [p for p in sorted({os.path.normpath(x) for x in read_only})
             if not readable_by_others(p, stat)]
    binds = [{"source": p, "target": p, "readonly": True} for p in paths]
    hide = {os.path.normpath(rlark_home)}
    for p in paths:
        block = blocking_dir(p, stat)
        if block is not None and _exists(block, stat):
            hide.add(block)
    hide = {h for h in hide if not any(h != o and _inside(h, o) for o in hide)}
    if "/" in hide:
        raise SandboxPlanError("others may not enter / on this machine")
    if any(_inside(stage, h) for h in hide):
        raise SandboxPlanError(f"the stage directory {stage} lies in {sorted(hide)}")
    return {"stage": stage, "binds": binds, "overlays": [], "hide": sorted(hide),
            "tmpfs": [], "mqueue": False}
