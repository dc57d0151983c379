"""After a local Run: what is left of the outputs it wrote, looked for where each Worker's view
of a path lies on this machine (its copy of the working directory, a ``hostPath`` mount's
source, its own ``/tmp``...), for the run record's outputs-readable check. Only the local runtime
can look: elsewhere the server does not see the Workers' files.
"""

from __future__ import annotations

import os
import stat as stat_module
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rlark import settings
from rlark.rlinf_config.locations import WRITTEN_KINDS
from rlark.runtimes.local.objects import object_dir
from rlark.runtimes.local.sandbox import readable_by_others, worker_dirs

#: how many entries :func:`look_at` counts in one output directory at most
MAX_ENTRIES = 10000


@dataclass(frozen=True)
class HostView:
    """Where one path of a local Worker's view lies on this machine: ``at`` (None: nowhere the
    server can read, ``why`` says so), ``root``: the directory ``at`` must stay in once symbolic
    links are resolved (a link the workload made must not lead the server elsewhere),
    ``what``: which of the Worker's places it is, ``others``: True when it is this machine's
    own file system as the Worker's uid sees it (only what other users may read)."""

    at: str | None
    root: str
    what: str
    why: str | None = None
    others: bool = False


def _under(path: str, top: str) -> str | None:
    """``path`` relative to ``top`` ("" for ``top`` itself), or None when it is not below it."""
    path, top = os.path.normpath(path), os.path.normpath(top)
    if path == top:
        return ""
    if path.startswith(top.rstrip("/") + "/"):
        return path[len(top.rstrip("/")) + 1:]
    return None


def host_view(path: str, *, rank: int, sandboxed: bool, working_dir: str | None,
              host_mounts: Sequence[tuple[str, str]], dirs: Any,
              lstat: Callable[[str], os.stat_result] = os.lstat) -> HostView:
    """Where ``path``, as local Worker ``rank`` saw it, lies on this machine (pure but for
    ``lstat``).

    A Worker with a mount namespace of its own (``sandboxed``: its keeper reported
    ``sandbox``; docs/security.md "Worker identity", the plan in
    :mod:`rlark.runtimes.local.sandbox`) sees, at the deepest of these that holds the path: a
    ``hostPath`` mount's ``source`` at its ``mountPath`` (``host_mounts``: ``(source,
    mountPath)``); the Job's ``working_dir`` as an overlay whose writes land in ``dirs.upper``
    (a path the run wrote or changed is there; one it did not touch is the working directory's
    own; a whiteout, the character device 0:0 overlayfs leaves for a removed file, means removed);
    ``/tmp`` and ``/var/tmp`` as ``dirs.tmp``; its ``HOME`` ``dirs.home``; ``/dev/shm`` a
    tmpfs gone with it; anything else this machine's file system as other users see it. A
    Worker without (it runs as the server's user) sees this machine's file system as it is.
    ``dirs``: the Worker's :class:`rlark.runtimes.local.sandbox.WorkerDirs`.
    """
    if not sandboxed:
        return HostView(path, "/", "this machine's file system")
    places: list[tuple[str, str, str]] = [(target, source, f"mount {source}")
                                          for source, target in host_mounts]
    if working_dir:
        places.append((working_dir, "", f"rank {rank}'s copy of the working directory"))
    places += [("/tmp", dirs.tmp, f"rank {rank}'s /tmp"), ("/var/tmp", dirs.tmp, f"rank {rank}'s /tmp"),
               (dirs.home, dirs.home, f"rank {rank}'s home"), ("/dev/shm", "", "")]
    best: tuple[str, str, str, str] | None = None
    for target, source, what in places:
        rel = _under(path, target)
        if rel is not None and (best is None or len(os.path.normpath(target)) > len(best[0])):
            best = (os.path.normpath(target), source, what, rel)
    if best is None:
        return HostView(path, "/", "this machine's file system as other users see it",
                        others=True)
    target, source, what, rel = best
    if target == "/dev/shm":
        return HostView(None, "/dev/shm", f"rank {rank}'s /dev/shm",
                        why="the Worker's own /dev/shm, gone with the Worker")
    if target != os.path.normpath(working_dir or "") or source:
        return HostView(os.path.join(source, rel) if rel else source, source, what)
    upper = os.path.join(dirs.upper, rel) if rel else dirs.upper
    try:
        st = lstat(upper)
    except OSError:
        # the run did not write it: the Worker saw the working directory's own file
        return HostView(os.path.join(target, rel) if rel else target, target, what)
    if stat_module.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return HostView(None, dirs.upper, what, why=f"the run removed it ({upper} is a whiteout)")
    return HostView(upper, dirs.upper, what)


def look_at(view: HostView, rlark_home: str) -> dict[str, Any]:
    """``{"exists", "readable", "entries", "at", "why"?}`` of one :class:`HostView`: entries
    counted below a directory up to :data:`MAX_ENTRIES`, symbolic links not followed."""
    if view.at is None:
        return {"exists": False, "readable": False, "entries": None, "at": None, "why": view.why}
    out: dict[str, Any] = {"exists": os.path.lexists(view.at), "readable": False,
                           "entries": None, "at": view.at}
    if not out["exists"]:
        return out
    real, root = os.path.realpath(view.at), os.path.realpath(view.root)
    if _under(real, root) is None:
        return {**out, "why": f"{view.at} is a symbolic link out of {view.what} ({real})"}
    if view.others and (_under(real, rlark_home) is not None
                        or not readable_by_others(real, os.stat)):
        return {**out, "exists": False,
                "why": f"{real} is not where the Workers' uid could reach (only what other "
                       "users of this machine may read)"}
    out["exists"] = os.path.exists(real)
    out["readable"] = out["exists"] and os.access(
        real, os.R_OK | (os.X_OK if os.path.isdir(real) else 0))
    if out["readable"] and os.path.isdir(real):
        entries = 0
        for _root, dirs, files in os.walk(real):
            entries += len(dirs) + len(files)
            if entries > MAX_ENTRIES:
                break
        out["entries"] = entries
    return out


def _hostpath_mounts(rec: dict[str, Any], home: str | None = None
                    ) -> dict[Any, list[tuple[str, str]]]:
    """Per role, ``(directory on this machine, mountPath)`` of each mount bound into its
    Workers from a directory here: a ``hostPath`` mount's source, a ``pvc`` mount's volume of
    the record's project (:func:`rlark.runtimes.local.volumes.volume_dir` below ``home``,
    default the server's ``$RLARK_HOME``; none for a record without its project)."""
    from rlark.runtimes.local.volumes import volume_dir

    body = (rec.get("spec") or {}).get("spec") or {}
    project = rec.get("project")
    home = home or str(settings.rlark_home())
    out: dict[Any, list[tuple[str, str]]] = {}
    for r in body.get("roles") or []:
        places = out.setdefault(r.get("name"), [])
        for m in r.get("mounts") or []:
            if m.get("type") == "hostPath":
                places.append((m.get("source"), m.get("mountPath")))
            elif m.get("type") == "pvc" and isinstance(project, str) and project:
                try:
                    places.append((volume_dir(home, project, str(m.get("source"))),
                                   m.get("mountPath")))
                except ValueError:
                    continue  # not a volume name: the Run never had it
    return out


def _copied_mounts(rec: dict[str, Any], role: Any, worker_root: str) -> list[tuple[str, str]]:
    """``(the Worker's own directory, mountPath)`` of each ``objectStorage`` mount of ``role``
    in the record's spec: the directory the keeper copies the bucket into and out of, bound at
    the mountPath (:func:`rlark.runtimes.local.objects.object_dir`, by the mount's index in
    the role); what the Worker writes there is in the bucket only after it copies out."""
    body = (rec.get("spec") or {}).get("spec") or {}
    for r in body.get("roles") or []:
        if r.get("name") == role:
            return [(object_dir(worker_root, j), m.get("mountPath"))
                    for j, m in enumerate(r.get("mounts") or [])
                    if m.get("type") == "objectStorage" and isinstance(m.get("mountPath"), str)]
    return []


def server_dir(rec: dict[str, Any], path: str, rank: int, sandboxed: bool = False
               ) -> tuple[str | None, str]:
    """Where the directory ``path``, as Worker ``rank`` of the Run of record ``rec`` saw it, lies
    on this machine for the server to read (:func:`host_view`): ``(real path, what it is)``, the
    real path with every symbolic link resolved and checked to stay inside the Worker's place
    (a link the workload made must not lead the server elsewhere) and, for the machine's own
    file system seen by a Worker of its own uid, to be what other users may read and outside
    ``$RLARK_HOME``; else ``(None, why not)``. ``sandboxed``: as :func:`output_probes`."""
    worker = next((w for w in (rec.get("workers") or {}).get("items") or []
                   if int(w.get("nodeRank") or 0) == rank), None)
    role = worker.get("role") if worker else None
    home = str(settings.rlark_home())
    dirs = worker_dirs(home, settings.ray_tmp_root(), str(rec.get("runUid")), rank)
    view = host_view(path, rank=rank, sandboxed=sandboxed, working_dir=rec.get("workingDir"),
                     host_mounts=_hostpath_mounts(rec, home).get(role, [])
                     + _copied_mounts(rec, role, dirs.root), dirs=dirs)
    if view.at is None:
        return None, f"{path} is {view.what}: {view.why}"
    real, root = os.path.realpath(view.at), os.path.realpath(view.root)
    if _under(real, root) is None:
        return None, f"{view.at} is a symbolic link out of {view.what} ({real})"
    if view.others and (_under(real, home) is not None or not readable_by_others(real, os.stat)):
        return None, (f"{real} is not where the Workers' uid could reach (only what other users "
                      "of this machine may read)")
    return real, view.what


def output_probes(rec: dict[str, Any], sandboxed: bool = False) -> dict[str, dict[str, Any]]:
    """Whether each output/checkpoint location of the record ``rec`` exists and can be read
    here, looked for where each Worker's view of it lies on this machine (:func:`host_view`):
    ``{path: {"exists", "readable", "entries", "at", "why"?}}``; of the Workers' views of a
    path, the first readable one, else the first that exists, else the first. ``sandboxed``:
    the Run's Workers had a uid and mount namespace of their own (the Run's ``worker_uid``, set
    by the runtime; never taken from what the Workers report, which their own code could
    forge). Nothing is looked at for a Run whose Workers reported nothing (none ran)."""
    outputs: dict[str, dict[str, Any]] = {}
    home, ray_root = str(settings.rlark_home()), settings.ray_tmp_root()
    mounts = _hostpath_mounts(rec, home)
    items = [w for w in (rec.get("workers") or {}).get("items") or [] if w.get("facts")]
    for loc in rec.get("locations") or []:
        path = loc.get("path")
        if loc.get("kind") not in WRITTEN_KINDS or not path or path in outputs or not items:
            continue
        views: dict[str | None, HostView] = {}
        for w in items:
            rank = int(w.get("nodeRank") or 0)
            view = host_view(path, rank=rank, sandboxed=sandboxed,
                             working_dir=rec.get("workingDir"),
                             host_mounts=mounts.get(w.get("role"), []),
                             dirs=worker_dirs(home, ray_root, str(rec.get("runUid")), rank))
            views.setdefault(view.at, view)
        looked = [look_at(v, home) for v in views.values()]
        outputs[path] = next((x for x in looked if x["readable"]),
                             next((x for x in looked if x["exists"]), looked[0]))
    return outputs
