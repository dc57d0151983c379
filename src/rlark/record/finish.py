"""A finished Run's record as the controller stores it: the I/O around
:func:`rlark.record.build.build_record` (RLark's own composition of the config when RLinf wrote
no Hydra output, what is left of the outputs and logs where the Run's runtime lets the server
look) and the ``RecordVerified`` condition its checks give.

Below the controller and the services (both use it), above the runtimes and the store: what
differs between runtimes is asked of the Run's runtime profile
(:func:`rlark.runtimes.profile`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rlark import runtimes, settings
from rlark.paths import system_dir
from rlark.record.build import build_record
from rlark.record.checks import failed_checks
from rlark.status import ConditionType, Reason

if TYPE_CHECKING:
    from rlark.runtimes.base import RuntimeProfile


def config_roots(job_spec: dict[str, Any], profile: RuntimeProfile) -> list[str]:
    """Where this server may read the RLinf config a Job names: the server's config roots
    (``rlark server --config-root``, :func:`rlark.settings.config_roots`) and, where the
    Workers run on this machine's filesystem (``profile.here_only``: the local runtime), the
    Job's own absolute ``spec.workingDir``. Elsewhere (Kubernetes) ``workingDir`` is a path
    inside the image, not here. A ``workingDir`` that is ``/`` or a system directory
    (:func:`rlark.paths.system_dir`) is no root: it would let a Job read any file of
    the server."""
    roots = list(settings.config_roots())
    wd = (job_spec.get("spec") or {}).get("workingDir")
    if profile.here_only and isinstance(wd, str) and os.path.isabs(wd) and not system_dir(wd):
        roots.append(wd)
    return roots


def head_reported_hydra_output(workers: Sequence[Any]) -> bool:
    """Whether the head reported the Hydra output directory its run script wrote."""
    head = next((w for w in workers if w.is_head), None)
    out = (head.facts or {}).get("hydra_output") if head is not None else None
    return isinstance(out, dict) and bool((out.get("files") or {}).get("config.yaml"))


def compose_for_record(spec: dict[str, Any], profile: RuntimeProfile,
                       extra: Sequence[str] = ()) -> dict[str, Any] | None:
    """RLark's own isolated composition of the config a Run's spec names (with
    ``spec.rlinf.overrides``, then ``extra``: a resumed Run's), for the record when RLinf wrote
    no Hydra output: ``{"data",
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
    overrides = (list(job.spec.rlinf.overrides) if job.spec.rlinf else []) + list(extra)
    roots = config_roots(spec, profile)
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


def probe_outputs(rec: dict[str, Any], sandboxed: bool = False) -> dict[str, Any]:
    """After a Run: what is left of each output/checkpoint location of the record, where the
    Run's runtime lets the server look (:meth:`rlark.runtimes.base.RuntimeProfile.output_probes`:
    on the local runtime where each Worker's view of it lies on this machine; elsewhere the
    server does not see the Workers' files and nothing is looked at), and whether each
    Worker's log file is there: ``{"outputs": {path: {"exists", "readable", "entries", "at",
    "why"?}}, "logs": {worker: bool}}``. ``sandboxed``: the Run's Workers had a uid and mount
    namespace of their own (the Run's ``worker_uid``, set by the runtime; never taken from what
    the Workers report, which their own code could forge)."""
    name = rec.get("runtime")
    try:
        profile = runtimes.profile(name) if isinstance(name, str) and name else None
    except ValueError:  # a runtime this version does not know: nothing to look at
        profile = None
    outputs = profile.output_probes(rec, sandboxed) if profile is not None else {}
    logs = {w["name"]: bool(w.get("log")) and os.path.exists(w["log"])
            for w in (rec.get("workers") or {}).get("items") or []}
    return {"outputs": outputs, "logs": logs}


def read_back_context(rec: dict[str, Any], keys: Any, sandboxed: bool) -> Any:
    """The :class:`rlark.record.outputs.ReadBackContext` of a record: its runtime's profile
    says where a Worker's path lies here; ``keys``: the Run's opened secrets (None: not at
    hand); the S3 endpoints the server may read from (:func:`rlark.settings.object_storage_allow_networks`;
    a bad setting allows none)."""
    from rlark.record.outputs import ReadBackContext

    name = rec.get("runtime")
    try:
        profile = runtimes.profile(name) if isinstance(name, str) and name else None
    except ValueError:  # a runtime this version does not know: nothing to look at here
        profile = None
    try:
        allowed = settings.object_storage_allow_networks()
    except ValueError:
        allowed = []

    def unseen(_rec: dict, path: str, _rank: int, _sandboxed: bool) -> tuple[str | None, str]:
        return None, f"the server does not see the Workers' files of runtime {name}"

    return ReadBackContext(
        worker_dir=profile.worker_dir if profile is not None else unseen,
        persistent_filesystem=bool(profile.filesystem.persistent) if profile is not None else False,
        keys=keys, allow_networks=allowed, sandboxed=sandboxed)


def finish_record(run, logs_root: "str | Path | None", keys: Any = None) -> dict[str, Any]:
    """The record of a finished Run, as the controller stores it (final: every Worker has
    ended): RLark's composition of the config when the head reported no Hydra output
    (:func:`compose_for_record`), what is left of the outputs and logs (:func:`probe_outputs`),
    each output read back through its mount (:func:`rlark.record.outputs.list_outputs`;
    ``keys``: the Run's opened secrets, ``(secret, key)`` -> value, for its objectStorage
    mounts), then :func:`build_record` with all of it."""
    from rlark.record.outputs import list_outputs

    workers = list(run.workers)
    profile = runtimes.profile(run.runtime)
    composed = None
    if not head_reported_hydra_output(workers):
        composed = compose_for_record(run.spec or {}, profile, resume_override(run))
    first = build_record(run.job, run, workers, logs_root, composed=composed)
    sandboxed = run.worker_uid is not None
    outputs = list_outputs(first, read_back_context(first, keys, sandboxed))
    return build_record(run.job, run, workers, logs_root, composed=composed,
                        probes=probe_outputs(first, sandboxed=sandboxed),
                        final=True, outputs=outputs)


def resume_override(run) -> list[str]:
    """The override a resumed Run's run script was given (``run.resume``), for RLark's own
    composition of its config; none for another Run."""
    raw = getattr(run, "resume", None)
    return [raw["override"]] if isinstance(raw, dict) and raw.get("override") else []


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
