"""Run records as the controller writes them and as routes, CLI and console read and compare
them: the I/O around :func:`rlark.record.build_record` (composing the config when RLinf wrote
no Hydra output, looking at logs and outputs after the Run) and the one comparison service.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from rlark import settings
from rlark.record import build_record
from rlark.record_checks import failed_checks
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
                           "configDir": config_dir, "configName": name}
    if composed.data is None:
        out["error"] = "; ".join(f.message for f in composed.findings) or "composing failed"
    return out


def probe_outputs(rec: dict[str, Any]) -> dict[str, Any]:
    """After a Run: whether each output/checkpoint location of the record exists and can be
    read here (local runtime only: the server sees the Workers' filesystem; elsewhere nothing
    is looked at), and whether each Worker's log file is there. ``{"outputs": {path: {"exists",
    "readable", "entries"}}, "logs": {worker: bool}}``."""
    from rlark.rlinf_config.locations import WRITTEN_KINDS

    outputs: dict[str, dict[str, Any]] = {}
    if rec.get("runtime") == "local":
        for loc in rec.get("locations") or []:
            path = loc.get("path")
            if loc.get("kind") not in WRITTEN_KINDS or not path or path in outputs:
                continue
            exists = os.path.exists(path)
            readable = exists and os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0))
            entries = None
            if readable and os.path.isdir(path):
                entries = 0
                for _root, dirs, files in os.walk(path):
                    entries += len(dirs) + len(files)
                    if entries > MAX_ENTRIES:
                        break
            outputs[path] = {"exists": exists, "readable": readable, "entries": entries}
    logs = {w["name"]: bool(w.get("log")) and os.path.exists(w["log"])
            for w in (rec.get("workers") or {}).get("items") or []}
    return {"outputs": outputs, "logs": logs}


def finish_record(run, logs_root: "str | Path | None") -> dict[str, Any]:
    """The record of a finished Run, as the controller stores it: RLark's composition of the
    config when the head reported no Hydra output (:func:`compose_for_record`), what is left
    of the outputs and logs (:func:`probe_outputs`), then :func:`build_record` with both."""
    workers = list(run.workers)
    composed = None
    if not head_reported_hydra_output(workers):
        composed = compose_for_record(run.spec or {}, run.runtime or "local")
    first = build_record(run.job, run, workers, logs_root, composed=composed)
    return build_record(run.job, run, workers, logs_root, composed=composed,
                        probes=probe_outputs(first))


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
    """The comparison of two runs of ``project`` (:func:`rlark.record_diff.diff_records`), each
    given as ``JOB`` (its current Run) or ``JOB:RUN``; ``b`` None: ``a`` against the run before
    it of the same Job (itself when it is the first), the earlier one as ``a``. The records are
    read as every reader reads them (:meth:`rlark.services.jobs.JobService.record`: stored or
    live, secrets masked).

    Raises:
        Invalid: a reference is malformed. NotFound: no such Job or Run in ``project``.
    """
    from rlark.record_diff import diff_records

    ja, ra = parse_run_ref(a, "a")
    rec_a = jobs.record(ja, ra, project)
    if b is None:
        number = int(rec_a.get("run") or 1)
        previous = jobs.record(ja, number - 1, project) if number > 1 else rec_a
        return diff_records(previous, rec_a)
    jb, rb = parse_run_ref(b, "b")
    return diff_records(rec_a, jobs.record(jb, rb, project))
