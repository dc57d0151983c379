"""Run records as the controller writes them and as routes, CLI and console read and compare
them: the I/O around :func:`rlark.record.build.build_record` (composing the config when RLinf wrote
no Hydra output, looking at logs and outputs after the Run) and the one comparison service.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rlark import settings
from rlark.record.build import build_record
from rlark.record.checks import failed_checks
from rlark.status import ConditionType, Reason

#: how many entries :func:`probe_outputs` counts in one output directory at most
MAX_ENTRIES = 10000


def config_roots(job_spec: dict[str, Any], runtime: str) -> list[str]:
    """Where this server may read the RLinf config a Job names: the server's config roots
    (``rlark server --config-root``, :func:`rlark.settings.config_roots`) and, on the local
    runtime, the Job's own absolute ``spec.workingDir`` (its Workers run on this machine's
    filesystem). On Kubernetes ``workingDir`` is a path inside the image, not here. A
    ``workingDir`` that is ``/`` or a system directory (:func:`rlark.services.jobs.system_dir`)
    is no root: it would let a Job read any file of the server."""
    from rlark.services.jobs import system_dir

    roots = list(settings.config_roots())
    wd = (job_spec.get("spec") or {}).get("workingDir")
    if runtime == "local" and isinstance(wd, str) and os.path.isabs(wd) and not system_dir(wd):
        roots.append(wd)
    return roots


def head_reported_hydra_output(workers: Sequence[Any]) -> bool:
    """Whether the head reported the Hydra output directory its run script wrote."""
    head = next((w for w in workers if w.is_head), None)
    out = (head.facts or {}).get("hydra_output") if head is not None else None
    return isinstance(out, dict) and bool((out.get("files") or {}).get("config.yaml"))


def compose_for_record(spec: dict[str, Any], runtime: str) -> dict[str, Any] | None:
    """RLark's own isolated composition of the config a Run's spec names (with
    ``spec.rlinf.overrides``), for the record when RLinf wrote no Hydra output: ``{"data",
    "overrides", "error"?}``; None when the spec names no config. Reads only under
    :func:`config_roots`; never raises (a failure is the ``error``)."""
    from rlark.rlinf_config import _inside, config_location
    from rlark.rlinf_config.isolated import compose_isolated
    from rlark.spec import Job

    try:
        job = Job.model_validate(spec)
    except ValueError as exc:
        return {"data": None, "overrides": [], "error": f"the Run's spec does not parse: {exc}"}
    where = config_location(job)
    if where is None:
        return None
    config_dir, name = where
    overrides = list(job.spec.rlinf.overrides) if job.spec.rlinf else []
    roots = config_roots(spec, runtime)
    if not os.path.isabs(config_dir) or not _inside(
            os.path.join(config_dir, f"{name.removesuffix('.yaml')}.yaml"), roots):
        return {"data": None, "overrides": overrides,
                "error": f"{config_dir} is not readable by this server (not under spec.workingDir "
                         "of a local Job or a --config-root)"}
    head = job.role(job.spec.head_role)
    plain = {e.name: e.value or "" for e in (head.env if head else []) if e.secret_ref is None}
    try:
        composed = compose_isolated(config_dir, name, overrides, child_env=plain, roots=roots,
                                    path="spec.rlinf")
    except Exception as exc:  # noqa: BLE001 - ComposerBusy and the like: the record says so
        return {"data": None, "overrides": overrides, "error": str(exc)}
    out: dict[str, Any] = {"data": composed.data, "overrides": overrides,
                           "configDir": config_dir, "configName": name,
                           "inputs": config_inputs(config_dir, roots)}
    if composed.data is None:
        out["error"] = "; ".join(f.message for f in composed.findings) or "composing failed"
    return out


def config_inputs(config_dir: str, roots: Sequence[str]) -> dict[str, Any]:
    """The sha256 of every Hydra file below ``config_dir`` on this machine, found the way the
    head's snapshot finds them (``bootstrap/facts_config.py`` ``config_snapshot``: ``*.yaml`` and
    ``*.yml``, directories starting with ``.`` skipped, at most ``CONFIG_MAX_FILES``):
    ``{"files": {relative path: sha256}, "cut": bool}``. A file whose real path leaves ``roots``
    (a symbolic link out of the config roots) is not read: its hash is None, so it never
    compares equal. The record compares these with the head's snapshot
    (:func:`rlark.record.build.compare_inputs`)."""
    from rlark.bootstrap.facts_config import CONFIG_MAX_FILES
    from rlark.rlinf_config import _inside

    found: list[str] = []
    for root, dirs, names in os.walk(config_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.relpath(os.path.join(root, n), config_dir)
                  for n in sorted(names) if n.endswith((".yaml", ".yml"))]
        if len(found) > CONFIG_MAX_FILES:
            break
    files: dict[str, str | None] = {}
    for rel in found[:CONFIG_MAX_FILES]:
        full = os.path.join(config_dir, rel)
        if not _inside(full, roots):
            files[rel] = None
            continue
        digest = hashlib.sha256()
        try:
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(65536), b""):
                    digest.update(chunk)
        except OSError:
            files[rel] = None
            continue
        files[rel] = digest.hexdigest()
    return {"files": files, "cut": len(found) > CONFIG_MAX_FILES}


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
    :mod:`rlark.runtimes.local_sandbox`) sees, at the deepest of these that holds the path: a
    ``hostPath`` mount's ``source`` at its ``mountPath`` (``host_mounts``: ``(source,
    mountPath)``); the Job's ``working_dir`` as an overlay whose writes land in ``dirs.upper``
    (a path the run wrote or changed is there; one it did not touch is the working directory's
    own; a whiteout, the character device 0:0 overlayfs leaves for a removed file, means removed);
    ``/tmp`` and ``/var/tmp`` as ``dirs.tmp``; its ``HOME`` ``dirs.home``; ``/dev/shm`` a
    tmpfs gone with it; anything else this machine's file system as other users see it. A
    Worker without (it runs as the server's user) sees this machine's file system as it is.
    ``dirs``: the Worker's :class:`rlark.runtimes.local_sandbox.WorkerDirs`.
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
    from rlark.runtimes.local_sandbox import readable_by_others

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


def probe_outputs(rec: dict[str, Any], sandboxed: bool = False) -> dict[str, Any]:
    """After a Run: whether each output/checkpoint location of the record exists and can be
    read here, looked for where each Worker's view of it lies on this machine
    (:func:`host_view`: a local Worker's copy of the working directory, a ``hostPath`` mount's
    source, ...; local runtime only: elsewhere the server does not see the Workers' files and
    nothing is looked at), and whether each Worker's log file is there. ``{"outputs": {path:
    {"exists", "readable", "entries", "at", "why"?}}, "logs": {worker: bool}}``: of the
    Workers' views of a path, the first readable one, else the first that exists, else the
    first. ``sandboxed``: the Run's Workers had a uid and mount namespace of their own (the
    Run's ``worker_uid``, set by the runtime; never taken from what the Workers report, which
    their own code could forge). Nothing is looked at for a Run whose Workers reported nothing
    (none ran)."""
    from rlark.rlinf_config.locations import WRITTEN_KINDS
    from rlark.runtimes.local_sandbox import worker_dirs

    outputs: dict[str, dict[str, Any]] = {}
    if rec.get("runtime") == "local":
        body = (rec.get("spec") or {}).get("spec") or {}
        mounts = {r.get("name"): [(m.get("source"), m.get("mountPath")) for m in r.get("mounts") or []
                                  if m.get("type") == "hostPath"] for r in body.get("roles") or []}
        home, ray_root = str(settings.rlark_home()), settings.ray_tmp_root()
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
    logs = {w["name"]: bool(w.get("log")) and os.path.exists(w["log"])
            for w in (rec.get("workers") or {}).get("items") or []}
    return {"outputs": outputs, "logs": logs}


def finish_record(run, logs_root: "str | Path | None") -> dict[str, Any]:
    """The record of a finished Run, as the controller stores it (final: every Worker has
    ended): RLark's composition of the config when the head reported no Hydra output
    (:func:`compose_for_record`), what is left of the outputs and logs (:func:`probe_outputs`),
    then :func:`build_record` with both."""
    workers = list(run.workers)
    composed = None
    if not head_reported_hydra_output(workers):
        composed = compose_for_record(run.spec or {}, run.runtime or "local")
    first = build_record(run.job, run, workers, logs_root, composed=composed)
    return build_record(run.job, run, workers, logs_root, composed=composed,
                        probes=probe_outputs(first, sandboxed=run.worker_uid is not None),
                        final=True)


def record_condition(rec: dict[str, Any]) -> tuple[ConditionType, bool, Reason, str]:
    """The ``RecordVerified`` condition a stored record gives its Run: False (``ChecksFailed``)
    naming each failed check and its first evidence, else True (``ChecksPassed``)."""
    failed = failed_checks(rec)
    if failed:
        return (ConditionType.RecordVerified, False, Reason.ChecksFailed,
                "; ".join(f"{c['id']}: {(c.get('evidence') or ['failed'])[0]}" for c in failed))
    warned = [c["id"] for c in (rec.get("checks") or {}).get("items") or [] if c["status"] == "warn"]
    return (ConditionType.RecordVerified, True, Reason.ChecksPassed,
            "every check of the run record passed" + (f" ({len(warned)} with warnings: "
                                                      f"{', '.join(warned)})" if warned else ""))


def parse_run_ref(text: str, field: str) -> tuple[str, int | None]:
    """``JOB`` or ``JOB:RUN`` -> ``(job, run or None)``.

    Raises:
        Invalid: not that shape (the message names the field, the value and the fix).
    """
    from rlark.services.errors import Invalid
    from rlark.spec import DNS1123_LABEL

    name, sep, number = (text or "").partition(":")
    if not DNS1123_LABEL.match(name) or (sep and not (number.isdigit() and 0 < int(number) < 2**31)):
        raise Invalid(f"{field} = {text!r} is not JOB or JOB:RUN; give a Job name and optionally "
                      "a run number, e.g. quickstart:2")
    return name, int(number) if sep else None


def diff_runs(jobs: Any, a: str, b: str | None, project: str) -> dict[str, Any]:
    """The comparison of two runs of ``project`` (:func:`rlark.record.diff.diff_records`), each
    given as ``JOB`` (its current Run) or ``JOB:RUN``; ``b`` None: ``a`` against the run before
    it of the same Job (itself when it is the first), the earlier one as ``a``. The records are
    read as every reader reads them (:meth:`rlark.services.jobs.JobService.record`: stored or
    live, secrets masked).

    Raises:
        Invalid: a reference is malformed. NotFound: no such Job or Run in ``project``.
    """
    from rlark.record.diff import diff_records

    ja, ra = parse_run_ref(a, "a")
    rec_a = jobs.record(ja, ra, project)
    if b is None:
        number = int(rec_a.get("run") or 1)
        previous = jobs.record(ja, number - 1, project) if number > 1 else rec_a
        return diff_records(previous, rec_a)
    jb, rb = parse_run_ref(b, "b")
    return diff_records(rec_a, jobs.record(jb, rb, project))
