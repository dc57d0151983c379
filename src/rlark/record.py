"""The run record: what ran, where, with which versions and configs, and how it ended.

:func:`build_record` assembles it from stored rows (no I/O); :func:`render_markdown` and
:func:`render` export it. Record version 1 holds: the spec snapshot, expected vs actual Workers
with node ranks, hosts, IPs and Ray node ids, each Worker's facts, image references (and, where
the runtime reports them, the digest each Worker ran, with roles whose Workers differ flagged),
``spec.rlinf`` as given, mount sources and paths, start/end times, result and reason, and where
each log is.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rlark.status import text_of

RECORD_VERSION = 1


def iso(t: datetime | None) -> str | None:
    """ISO 8601 text of a timestamp, or None."""
    return t.isoformat() if t else None


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
    :data:`PRIVATE_FACTS` (records stored before they were left out still hold them). Returns a
    copy when anything was removed, else ``rec`` itself."""
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


def build_record(job, run, workers, logs_root: Path | str | None = None) -> dict[str, Any]:
    """Assemble the run record (a JSON-ready dict) from a Job row, a Run row and its Worker rows.

    Pure: reads attributes only. ``logs_root`` is reported so readers know where logs live.
    """
    spec = run.spec or {}
    body = spec.get("spec", {})
    roles = body.get("roles", [])
    joined = [w for w in workers if (w.lifecycle or {}).get("joined")]
    duration = None
    if run.started_at and run.finished_at:
        duration = round((run.finished_at - run.started_at).total_seconds(), 3)
    worker_entries = []
    for w in sorted(workers, key=lambda w: w.node_rank):
        facts = public_facts(w.facts)
        worker_entries.append(
            {
                "name": w.name,
                "role": w.role,
                "nodeRank": w.node_rank,
                "isHead": w.is_head,
                "host": w.host,
                "ip": w.ip or w.node_ip,
                "rayNodeId": w.ray_node_id,
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
                "facts": facts,
            }
        )
    every_facts = [w.facts or {} for w in workers]
    digests, mixed = image_digests(workers)
    notes = (["local runtime: images are recorded, not pulled; each Worker ran with the Python "
              "environment named in its facts (python_executable)"]
             if run.runtime == "local" else [])
    for role in mixed:
        notes.append(f"role {role}: its Workers ran {len(digests[role])} different image digests ("
                     + "; ".join(f"{d}: {', '.join(ws)}" for d, ws in digests[role].items())
                     + "); the tag moved while the Run started")
    return {
        "recordVersion": RECORD_VERSION,
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
        "mounts": [
            {"role": r.get("name"), **m} for r in roles for m in r.get("mounts", [])
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
        },
        "logs": {
            "root": str(logs_root) if logs_root else None,
            "workers": {w.name: w.log_path for w in workers},
        },
        "spec": spec,
    }


def render_markdown(rec: dict[str, Any]) -> str:
    """A human-readable Markdown view of a run record."""
    r = rec["result"]
    lines = [
        f"# Run record: {rec['job']} run {rec['run']}",
        "",
        f"- Result: **{r['phase']}** ({r['reason']}) {r['message']}",
        f"- Exit code: {r['exitCode']}",
        f"- Runtime: {rec['runtime']}; run uid `{rec['runUid']}`; cause {rec['cause']}",
        f"- Started {rec['times']['started']}, running {rec['times']['running']}, "
        f"finished {rec['times']['finished']} ({rec['times']['durationSeconds']} s)",
        f"- Workers: {rec['workers']['actual']} joined of {rec['workers']['expected']} expected",
        "- Versions: " + ", ".join(
            f"{k} {'/'.join(map(str, v)) or '-'}" for k, v in rec["versions"].items()
        ),
        *[f"- Note: {n}" for n in rec.get("runtimeNotes") or []],
        "",
        "## Images",
        "",
        *[f"- {role}: `{image}`" for role, image in rec["images"].items()],
        *[f"  - {role} digest `{d}`: {', '.join(ws)}"
          for role, ds in (rec.get("imageDigests") or {}).items() for d, ws in ds.items()],
        *[f"- **Warning:** Workers of role {role} ran different image digests"
          for role in rec.get("imageDigestMismatch") or []],
        "",
        "## RLinf config (as given, never rewritten)",
        "",
        *(["```json", json.dumps(rec["rlinf"], indent=2), "```"] if rec["rlinf"]
          else ["none (spec.rlinf not set)"]),
        "",
        "## Workers",
        "",
        "| rank | worker | role | host | IP | Ray node | Ray | object store | worker ports "
        "| phase | exit | log |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in rec["workers"]["items"]:
        node = w.get("rayNode") or {}
        store = node.get("objectStoreBytes")
        ports = node.get("workerPorts")
        lines.append(
            f"| {w['nodeRank']} | {w['name']} | {w['role']} | {w['host'] or ''} | {w['ip'] or ''} "
            f"| {(w['rayNodeId'] or '')[:12]} | {w.get('rayVersion') or ''} "
            f"| {'' if store is None else f'{store / 2**20:.0f} MiB'} "
            f"| {f'{ports[0]}-{ports[1]} ({ports[1] - ports[0] + 1})' if ports else ''} "
            f"| {w['phase']} | {'' if w['exitCode'] is None else w['exitCode']} | {w['log'] or ''} |"
        )
    if rec["mounts"]:
        lines += ["", "## Mounts", "", "| role | name | type | source | mountPath | readOnly |",
                  "|---|---|---|---|---|---|"]
        for m in rec["mounts"]:
            lines.append(
                f"| {m.get('role')} | {m.get('name')} | {m.get('type')} | {m.get('source')} | "
                f"{m.get('mountPath')} | {m.get('readOnly', False)} |"
            )
    return "\n".join(lines) + "\n"


def render(rec: dict[str, Any], fmt: str) -> str:
    """Export as ``json``, ``yaml`` or ``md``.

    Raises:
        ValueError: unknown format.
    """
    if fmt == "json":
        return json.dumps(rec, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(rec, sort_keys=False)
    if fmt in ("md", "markdown"):
        return render_markdown(rec)
    raise ValueError(f"unknown record format {fmt!r}; use json, yaml or md")
