"""The run record: what ran, where, with which versions and configs, how it ended, and whether
that is what was intended.

:func:`build_record` assembles it from stored rows (no I/O) through the models of
:mod:`rlark.record.schema`; :mod:`rlark.record.export` renders it, :mod:`rlark.record.checks`
holds the automatic checks and
:mod:`rlark.record.diff` the comparison of two records. docs/record.md documents the format.

Record version 2 (:data:`RECORD_VERSION`) holds everything version 1 did (the spec snapshot,
expected vs actual Workers with node ranks, hosts, IPs and Ray node ids, each Worker's facts,
image references and digests, ``spec.rlinf`` as given, mounts, times, result, log locations)
and: ``code`` (working directory and RLinf: commit, branch, remote, dirty flag, diff hash, per
Worker), ``diffs`` (each distinct uncommitted diff once, by sha256), ``versions`` (also CUDA,
driver, NCCL, device libraries, package-list hashes), ``packageLists`` (each distinct list once,
by sha256), ``configs`` (original Hydra files with hashes, overrides, the resolved config and
where it came from), ``locations`` (data, model, checkpoint and output paths and the mount
backing each per role), per Worker ``resources`` (asked, seen, Ray's count) and
``rayReportedRank``, and ``checks``. Version 1 records still read everywhere (render, diff).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rlark import runtimes
from rlark.record.schema import RECORD_VERSION, validate_record
from rlark.status import text_of

#: record versions this RLark reads
READABLE_VERSIONS = (1, 2)


def iso(t: datetime | None) -> str | None:
    """ISO 8601 text of a timestamp, or None."""
    return t.isoformat() if t else None


#: why a record built before its Run's Workers all ended is provisional (``provisionalReason``)
PROVISIONAL_REASON = ("the Run's Workers have not all ended: this record is built afresh on each "
                      "read, its checks are not final (outputs and logs are looked at, the config "
                      "composed, once every Worker ended; the record is then stored and final)")


def _distinct(values) -> list:
    out = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return out


def image_digests(workers) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """Per role, which Workers ran which image digest (``facts.imageDigest`` from the runtime,
    else ``facts.imageID``): ``({role: {digest: [worker names]}}, [roles with more than one])``.
    Workers without either are left out."""
    by_role: dict[str, dict[str, list[str]]] = {}
    for w in sorted(workers, key=lambda w: w.node_rank):
        facts = w.facts or {}
        digest = facts.get("imageDigest") or facts.get("imageID")
        if digest:
            by_role.setdefault(w.role, {}).setdefault(digest, []).append(w.name)
    return by_role, [role for role, d in by_role.items() if len(d) > 1]


#: facts a Worker reports that are not for users: ``tok``, the Run's event token (the secret
#: that marks its genuine lifecycle lines), which older controllers stored with the facts
PRIVATE_FACTS = frozenset({"tok"})


def public_facts(facts: dict[str, Any] | None) -> dict[str, Any]:
    """A Worker's facts without :data:`PRIVATE_FACTS`."""
    return {k: v for k, v in (facts or {}).items() if k not in PRIVATE_FACTS}


def public_record(rec: dict[str, Any]) -> dict[str, Any]:
    """A stored run record as users may read it: each Worker's facts without
    :data:`PRIVATE_FACTS` (records stored before they were left out still hold them), and
    ``provisional: false`` on records stored before that field existed (a stored record is
    final). Returns a copy when anything changed, else ``rec`` itself."""
    if "provisional" not in rec:
        rec = {**rec, "provisional": False}
    items = (rec.get("workers") or {}).get("items")
    if not isinstance(items, list) or not any(
            isinstance(w, dict) and PRIVATE_FACTS & set(w.get("facts") or {}) for w in items):
        return rec
    clean = [{**w, "facts": public_facts(w.get("facts"))} if isinstance(w, dict) else w
             for w in items]
    return {**rec, "workers": {**rec["workers"], "items": clean}}


def ray_node_facts(facts: dict[str, Any]) -> dict[str, Any] | None:
    """What a Worker's bootstrap told ``ray start`` (its ``ray_resources`` fact): ``numCpus``,
    ``numGpus``, ``memoryBytes``, ``objectStoreBytes``, ``workerPorts`` (``[min, max]``, None
    for Ray's own range); None before the Worker reported."""
    res = facts.get("ray_resources")
    if not isinstance(res, dict):
        return None
    return {"numCpus": res.get("num_cpus"), "numGpus": res.get("num_gpus"),
            "memoryBytes": res.get("memory_bytes"), "objectStoreBytes": res.get("object_store_bytes"),
            "workerPorts": res.get("worker_ports")}


def _text(value: Any) -> str | None:
    """A column a Worker's report filled (its host name, IP, Ray node id) as the record's
    text: None, the text itself, else the JSON text of what it reported."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


def _dict(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` when it is a mapping, else an empty one (facts are what a Worker wrote)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


#: facts moved out of each Worker's ``facts`` into sections of their own (kept once there)
_MOVED_FACTS = ("config", "hydra_output")


def _worker_code(facts: dict[str, Any]) -> dict[str, Any]:
    """One Worker's code summary: working-directory and RLinf commit, branch, dirty flag and
    diff hash, RLinf version and its pip source."""
    code = _dict(facts, "code")
    wd = _dict(code, "workingDir")
    rl = _dict(code, "rlinf")
    rgit = _dict(rl, "git")
    direct = _dict(rl, "directUrl")
    return {
        "workingDirCommit": wd.get("commit"), "workingDirBranch": wd.get("branch"),
        "workingDirDirty": wd.get("dirty"), "workingDirDiffSha256": wd.get("diffSha256"),
        "rlinfVersion": rl.get("version") or facts.get("rlinf"),
        "rlinfCommit": rgit.get("commit") or direct.get("commit"),
        "rlinfDirty": rgit.get("dirty"), "rlinfDiffSha256": rgit.get("diffSha256"),
        "rlinfSource": direct.get("url") or rgit.get("remote") or rgit.get("root"),
    }


def _slim_facts(facts: dict[str, Any], diffs: dict[str, str],
                packages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A Worker's public facts as the record keeps them: diffs and the package list moved into
    the record's dedup maps (``diffs``, ``packageLists``, by sha256), the Hydra snapshot and
    output moved to ``configs``."""
    out = {k: v for k, v in facts.items() if k not in _MOVED_FACTS}
    code = out.get("code")
    if isinstance(code, dict):
        code = dict(code)
        for part in ("workingDir", "rlinf"):
            g = code.get(part)
            if part == "rlinf" and isinstance(g, dict) and isinstance(g.get("git"), dict):
                code[part] = {**g, "git": _move_diff(g["git"], diffs)}
            elif isinstance(g, dict):
                code[part] = _move_diff(g, diffs)
        out["code"] = code
    pk = out.get("packages")
    if isinstance(pk, dict) and isinstance(pk.get("list"), list) and pk.get("sha256"):
        packages.setdefault(pk["sha256"], {"count": len(pk["list"]), "packages": pk["list"]})
        out["packages"] = {k: v for k, v in pk.items() if k != "list"}
    return out


def _move_diff(g: dict[str, Any], diffs: dict[str, str]) -> dict[str, Any]:
    if g.get("diff") is None:
        return g
    key = g.get("diffSha256")
    if key:
        diffs.setdefault(key, g["diff"])
    return {k: v for k, v in g.items() if k != "diff"}


def _seen_resources(facts: dict[str, Any]) -> dict[str, Any]:
    """What a Worker saw of its machine: CPUs it may run on, memory (bytes: cgroup limit, else
    MemTotal), GPUs (visible indices; UUIDs and models where nvidia-smi answered), device files,
    and what Ray counts on its node (the head's node table)."""
    dev = _dict(facts, "devices")
    gpus = dev.get("gpus") if isinstance(dev.get("gpus"), list) else None
    table = _dict(facts, "ray_node_table")
    return {
        "cpus": facts.get("visible_cpus"),
        "memoryBytes": facts.get("visible_memory_bytes"),
        "gpus": len(gpus) if gpus is not None else len(facts.get("visible_gpus") or []),
        "gpuUuids": [g.get("uuid") for g in gpus] if gpus is not None else None,
        "gpuModels": sorted({str(g.get("model")) for g in gpus}) if gpus else [],
        "deviceFiles": dev.get("deviceFiles"),
        "ray": table.get("resources"),
    }


def _asked_resources(role: dict[str, Any] | None) -> dict[str, Any]:
    res = (role or {}).get("resources") or {}
    return {"cpu": res.get("cpu"), "memory": res.get("memory"), "gpu": res.get("gpu", 0),
            "devices": res.get("devices") or {}}


def run_script_overrides(script: str) -> list[str]:
    """The Hydra overrides a run script visibly passes: ``key.sub=value``, ``+key=value``,
    ``++key=value`` and ``~key`` words (dotted keys, or the ``+``/``~`` forms; shell words, so
    quoting is undone). A plain ``NAME=value`` is an environment assignment, not counted. Pure."""
    import re
    import shlex

    pattern = re.compile(r"^(?:\+\+|\+|~)?[A-Za-z_][\w\-]*(?:\[\d+\])?"
                         r"(?:\.[A-Za-z_][\w\-]*(?:\[\d+\])?)*(?:=|$)")
    out: list[str] = []
    for line in (script or "").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        for w in words:
            dotted = "." in w.split("=", 1)[0]
            prefixed = w.startswith(("+", "~"))
            if (dotted or prefixed) and pattern.match(w) and ("=" in w or w.startswith("~")) \
                    and not w.startswith("-") and w not in out:
                out.append(w)
    return out


def compare_inputs(original: dict[str, Any] | None,
                   inputs: dict[str, Any] | None) -> dict[str, Any]:
    """Whether the Hydra files RLark composed from (``inputs``: ``{"files": {path: sha256},
    "cut"}`` or ``{"absent": why}``) are the files the head saw when the Run started (its
    snapshot ``original``: ``{"files": [{path, sha256}], "filesCut"}``): ``{"same": True}``;
    ``{"same": False, "differ": [path, ...]}`` (changed, added or gone since); or ``{"same":
    None, "why": ...}`` when either side is missing or cut. Pure."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("files"), dict):
        return {"same": None, "why": str((inputs or {}).get("absent")
                                         or "RLark did not hash the files it composed from")}
    if not isinstance(original, dict) or not isinstance(original.get("files"), list):
        return {"same": None, "why": "the head did not report the Hydra files it saw"
                + (f" ({original['absent']})" if isinstance(original, dict)
                   and original.get("absent") else "")}
    if original.get("filesCut") or inputs.get("cut"):
        return {"same": None, "why": "too many Hydra files to compare them all"}
    head = {str(f.get("path")): f.get("sha256") for f in original["files"] if isinstance(f, dict)}
    here = {str(k): v for k, v in inputs["files"].items()}
    differ = sorted(p for p in set(head) | set(here)
                    if head.get(p) is None or head.get(p) != here.get(p))
    return {"same": not differ, **({"differ": differ} if differ else {})}


def _resolved_config(head_facts: dict[str, Any], composed: dict[str, Any] | None,
                     original: dict[str, Any] | None = None) -> dict[str, Any]:
    """The resolved final config: the one RLinf wrote to Hydra's output directory when the head
    found one (``source: hydra-output``), else RLark's own isolated composition (``source:
    rlark-composition``, with ``sameInputs``: whether it read the very files the head saw,
    :func:`compare_inputs`), else absent."""
    out = head_facts.get("hydra_output")
    if isinstance(out, dict) and isinstance(out.get("files"), dict) and out["files"].get("config.yaml"):
        files = out["files"]
        error: str | None = None
        try:
            data = yaml.safe_load(files["config.yaml"].get("text") or "")
        except yaml.YAMLError as exc:
            data, error = None, f"config.yaml does not parse: {str(exc).splitlines()[0]}"
        try:
            overrides = yaml.safe_load((files.get("overrides.yaml") or {}).get("text") or "[]")
        except yaml.YAMLError:
            overrides = None
        return {"source": "hydra-output", "dir": out.get("dir"),
                "sha256": files["config.yaml"].get("sha256"),
                "cut": bool(files["config.yaml"].get("cut")),
                "data": data if isinstance(data, dict) else None,
                "overrides": overrides if isinstance(overrides, list) else None,
                **({"error": error} if error else {})}
    if composed is not None:
        return {"source": "rlark-composition",
                "note": "composed by RLark (hydra compose of spec.rlinf with spec.rlinf.overrides, "
                        "in an isolated child), because RLinf wrote no Hydra output directory "
                        "(RLinf's own configs set hydra.output_subdir: null)",
                **composed,
                "sameInputs": compare_inputs(original, composed.get("inputs"))}
    return {"source": "absent", "data": None}


def _copies(workers: list, role: Any, mount: Any) -> dict:
    """``{"mode", "copies": [{worker, mode, requested, why, inFiles, inBytes, outFiles, outBytes,
    mounted, unmounted}]}`` for an object-storage mount: how each Worker of ``role`` had it (its
    keeper's ``mount`` lines, kept in its lifecycle by the controller: ``fuse`` mounted and
    unmounted, or ``copy`` with what was copied); ``mode`` the one mode they all had (``mixed``
    when they differ); nothing for other mounts or when no Worker said."""
    name = mount.get("name") if isinstance(mount, dict) else None
    out = [{"worker": w.name, **((w.lifecycle or {}).get("mounts") or {})[name]}
           for w in workers if w.role == role
           and name in ((w.lifecycle or {}).get("mounts") or {})]
    modes = {c.get("mode") for c in out}
    return {"mode": modes.pop() if len(modes) == 1 else "mixed", "copies": out} if out else {}


def run_resume(run) -> dict[str, Any] | None:
    """What a Run's record says of its resume (``run.resume``, as the controller resolved it
    at launch: :func:`rlark.record.outputs.resume_point`): ``{fromRun, automatic, checkpoint,
    step, output, override, notes}``; None for a Run that did not resume (or is not launched)."""
    raw = getattr(run, "resume", None)
    if not isinstance(raw, dict) or "resolved" not in raw:
        return None
    return {"fromRun": int(raw.get("fromRun") or 0), "automatic": bool(raw.get("automatic")),
            "checkpoint": raw.get("checkpoint"), "step": raw.get("step"),
            "output": raw.get("output"), "override": raw.get("override"),
            "notes": [str(n) for n in raw.get("notes") or []]}


def build_record(job, run, workers, logs_root: Path | str | None = None, *,
                 composed: dict[str, Any] | None = None,
                 probes: dict[str, Any] | None = None, final: bool = False,
                 outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Assemble the run record (a JSON-ready dict, version :data:`RECORD_VERSION`) from a Job
    row, a Run row and its Worker rows.

    Pure: reads attributes only. ``logs_root`` is reported so readers know where logs live.
    ``composed``: RLark's own composition of the config (``{"data", "overrides", "error",
    "inputs"}``, :func:`rlark.record.finish.compose_for_record`), used when no Worker
    reported Hydra's output directory. ``probes``: what the caller looked at after the Run
    (``{"outputs": {path: {"exists", "readable", "entries", "at"}}, "logs": {worker: bool}}``)
    for the outputs-readable and logs checks; without them those checks warn. ``final``: True
    only for the record stored once every Worker of the Run has ended
    (:func:`rlark.record.finish.finish_record`); any other is ``provisional`` (the field,
    ``provisionalReason``, and ``checks.status`` ``provisional``). ``outputs``: each output
    read back after the Run (:func:`rlark.record.outputs.list_outputs`), which the
    outputs-readable check then judges instead of ``probes``. The Run's ``resume`` (where it
    resumed from: ``run.resume``) is recorded as such.

    Returns the record as :class:`rlark.record.schema.RecordV2` holds it (JSON values only, as
    the store keeps them), so every record built matches the published schema.

    Raises:
        RecordInvalid: the assembled record does not match :class:`~rlark.record.schema.RecordV2`
            (a bug in this function, never the Workers' doing: what they report is kept as JSON
            values).
    """
    from rlark.record.checks import run_checks
    from rlark.rlinf_config.locations import back, find_locations

    # what the Run's runtime says of itself: notes for the record, what backs a path
    profile = runtimes.profile(run.runtime)
    spec = run.spec or {}
    body = spec.get("spec", {})
    roles = body.get("roles", [])
    role_by_name = {r.get("name"): r for r in roles}
    joined = [w for w in workers if (w.lifecycle or {}).get("joined")]
    duration = None
    if run.started_at and run.finished_at:
        duration = round((run.finished_at - run.started_at).total_seconds(), 3)
    diffs: dict[str, str] = {}
    package_lists: dict[str, dict[str, Any]] = {}
    worker_entries = []
    ordered = sorted(workers, key=lambda w: w.node_rank)
    head_facts: dict[str, Any] = {}
    for w in ordered:
        facts = public_facts(w.facts)
        if w.is_head:
            head_facts = facts
        table = _dict(facts, "ray_node_table")
        raylet = _dict(facts, "ray_node_rank")
        pk = _dict(facts, "packages")
        worker_entries.append(
            {
                "name": w.name,
                "role": w.role,
                "nodeRank": w.node_rank,
                "isHead": w.is_head,
                "host": _text(w.host),
                "ip": _text(w.ip or w.node_ip),
                "rayNodeId": _text(w.ray_node_id),
                "joined": bool((w.lifecycle or {}).get("joined")),
                "phase": text_of(w.phase),
                "reason": text_of(w.reason) or None,
                "exitCode": w.exit_code,
                "startedAt": iso(w.started_at),
                "finishedAt": iso(w.finished_at),
                "log": w.log_path,
                # what this Worker's Ray node ran and was started with (its own report)
                "rayVersion": facts.get("ray"),
                "rayNode": ray_node_facts(facts),
                # RLINF_NODE_RANK as Ray has it: the node's rank label in Ray's node table, and
                # the value in its raylet's environment (what RLinf's node probe reads)
                "rayReportedRank": {"label": (table.get("labels") or {}).get("rlark.io/node-rank"),
                                    "rayletEnv": raylet.get("rayletEnv"),
                                    **({"absent": raylet["absent"]} if raylet.get("absent") else {})},
                "resources": {"asked": _asked_resources(role_by_name.get(w.role)),
                              "seen": _seen_resources(facts)},
                "code": _worker_code(facts),
                "packagesSha256": pk.get("sha256"),
                "factsSeconds": facts.get("factsSeconds"),
                "facts": _slim_facts(facts, diffs, package_lists),
            }
        )
    every_facts = [public_facts(w.facts) for w in workers]
    extra = [_dict(f, "versions_extra")
             for f in every_facts]
    devices = [_dict(f, "devices") for f in every_facts]
    device_libs: dict[str, list[str]] = {}
    for e in extra:
        for name, version in sorted((e.get("deviceLibs") or {}).items()):
            if version not in device_libs.setdefault(name, []):
                device_libs[name].append(version)
    digests, mixed = image_digests(workers)
    notes = list(profile.record_notes)
    for role in mixed:
        notes.append(f"role {role}: its Workers ran {len(digests[role])} different image digests ("
                     + "; ".join(f"{d}: {', '.join(ws)}" for d, ws in digests[role].items())
                     + "); the tag moved while the Run started")
    rlinf_ref = body.get("rlinf") or {}
    resume = run_resume(run)
    spec_overrides = list(rlinf_ref.get("overrides") or [])
    script_overrides = run_script_overrides(body.get("runScript") or "")
    original = head_facts.get("config") if isinstance(head_facts.get("config"), dict) else None
    resolved = _resolved_config(head_facts, composed, original) if rlinf_ref.get("configName") \
        else {"source": "absent", "data": None, "note": "spec.rlinf names no config"}
    locations = back(find_locations(resolved.get("data"), body.get("workingDir")), roles,
                     profile.filesystem) if resolved.get("data") else []
    head_code = _dict(head_facts, "code")
    rec: dict[str, Any] = {
        "recordVersion": RECORD_VERSION,
        "provisional": not final,
        **({} if final else {"provisionalReason": PROVISIONAL_REASON}),
        "job": job.name,
        "run": run.number,
        "runUid": run.uid,
        "cause": text_of(run.cause),
        "runtime": run.runtime,
        "result": {
            "phase": text_of(run.phase),
            "reason": text_of(run.reason),
            "message": run.message,
            "exitCode": run.exit_code,
        },
        "times": {
            "created": iso(run.created_at),
            "started": iso(run.started_at),
            "running": iso(run.running_at),
            "finished": iso(run.finished_at),
            "durationSeconds": duration,
        },
        "runtimeNotes": notes,
        "headRole": body.get("headRole"),
        "images": {r.get("name"): r.get("image") for r in roles},
        "imageDigests": digests,
        "imageDigestMismatch": mixed,
        "rlinf": body.get("rlinf"),
        "workingDir": body.get("workingDir"),
        "project": _text(getattr(getattr(job, "project", None), "name", None)),
        "code": {
            "workingDir": _move_diff(head_code["workingDir"], diffs)
            if isinstance(head_code.get("workingDir"), dict) else None,
            "rlinf": _slim_facts({"code": {"rlinf": head_code["rlinf"]}}, diffs, {})["code"]["rlinf"]
            if isinstance(head_code.get("rlinf"), dict) else None,
        },
        "diffs": diffs,
        "mounts": [
            {"role": r.get("name"), **m, **_copies(workers, r.get("name"), m)}
            for r in roles for m in r.get("mounts", [])
        ],
        "workers": {
            "expected": sum(int(r.get("workers", 0)) for r in roles),
            "actual": len(joined),
            "items": worker_entries,
        },
        "versions": {
            "python": _distinct(f.get("python") for f in every_facts),
            "ray": _distinct(f.get("ray") for f in every_facts),
            "rlinf": _distinct(f.get("rlinf") for f in every_facts),
            "torch": _distinct(f.get("torch") for f in every_facts),
            "cuda": _distinct(e.get("torchCuda") for e in extra),
            "nvidiaDriver": _distinct(d.get("driver") for d in devices),
            "nccl": _distinct(e.get("nccl") for e in extra),
            "deviceLibs": device_libs,
            "packageLists": _distinct(w["packagesSha256"] for w in worker_entries),
        },
        "packageLists": package_lists,
        "configs": {
            "original": original,
            "overrides": {"spec": spec_overrides, "runScript": script_overrides,
                          "notInRunScript": [o for o in spec_overrides
                                             if o not in (body.get("runScript") or "")],
                          **({"resume": [resume["override"]]} if resume and resume.get("override")
                             else {})},
            "resolved": resolved,
        },
        "locations": [loc.to_dict() for loc in locations],
        **({"outputs": outputs} if outputs is not None else {}),
        **({"resume": resume} if resume else {}),
        "logs": {
            "root": str(logs_root) if logs_root else None,
            "workers": {w.name: w.log_path for w in workers},
        },
        "spec": spec,
    }
    rec["checks"] = run_checks(rec, probes)
    if not final:
        # the items are what the record shows so far; their verdict comes with the final record
        rec["checks"]["status"] = "provisional"
    # As the store keeps it (a JSON column: keys as text, lists for tuples; a value that is no
    # JSON as its text), then through the record's model: a record that does not match it is a
    # bug here, raised, never a record stored or shown.
    return validate_record(json.dumps(rec, default=str)).model_dump(exclude_unset=True)
