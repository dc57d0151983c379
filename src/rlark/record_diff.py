"""What changed between two runs: their records compared key by key (pure).

:func:`comparable` flattens a record (version 1 or 2) into ``{section: {key: value}}`` with only
what says how a run was made and how it ended: code, versions, images, config keys, Workers and
their resources, result. Times, uids, process ids, log paths and other per-run bookkeeping are
left out, so two runs of the same spec that differ in one override show exactly that override
and the config key it changed. :func:`diff_records` lists the differences.
"""

from __future__ import annotations

import json
from typing import Any

#: the sections of a comparison, in the order tables show them
SECTIONS = ("code", "versions", "images", "config", "workers", "resources", "result")


def _flat(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k in sorted(value, key=str):
            _flat(value[k], f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value


def _versions(rec: dict[str, Any]) -> dict[str, Any]:
    v = rec.get("versions") or {}
    out = {k: "/".join(map(str, v.get(k) or [])) or None
           for k in ("python", "ray", "rlinf", "torch", "cuda", "nvidiaDriver", "nccl")}
    for name, versions in sorted((v.get("deviceLibs") or {}).items()):
        out[f"deviceLibs.{name}"] = "/".join(map(str, versions))
    out["packageLists"] = ", ".join(h[:12] for h in v.get("packageLists") or []) or None
    return out


def _code(rec: dict[str, Any]) -> dict[str, Any]:
    code = rec.get("code") or {}
    wd, rl = code.get("workingDir") or {}, code.get("rlinf") or {}
    rgit = rl.get("git") or {}
    return {"workingDir.commit": wd.get("commit"), "workingDir.branch": wd.get("branch"),
            "workingDir.dirty": wd.get("dirty"), "workingDir.diffSha256": wd.get("diffSha256"),
            "rlinf.version": rl.get("version"),
            "rlinf.commit": rgit.get("commit") or (rl.get("directUrl") or {}).get("commit"),
            "rlinf.source": (rl.get("directUrl") or {}).get("url") or rgit.get("remote")}


def _config(rec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rlinf = rec.get("rlinf") or {}
    out["spec.rlinf.configDir"] = rlinf.get("configDir")
    out["spec.rlinf.configName"] = rlinf.get("configName")
    out["spec.rlinf.overrides"] = json.dumps(rlinf.get("overrides") or [])
    configs = rec.get("configs") or {}
    for f in (configs.get("original") or {}).get("files") or []:
        out[f"file:{f.get('path')}"] = (f.get("sha256") or "")[:12] or None
    resolved = configs.get("resolved") or {}
    if resolved:
        out["resolved.source"] = resolved.get("source")
    data = resolved.get("data")
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        _flat(data, "", flat)
        out.update(flat)
    return out


def _workers(rec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    ws = rec.get("workers") or {}
    workers: dict[str, Any] = {"expected": ws.get("expected"), "joined": ws.get("actual")}
    resources: dict[str, Any] = {}
    for w in ws.get("items") or []:
        r = f"rank {w.get('nodeRank')}"
        workers[f"{r}.role"] = w.get("role")
        workers[f"{r}.host"] = w.get("host")
        workers[f"{r}.phase"] = w.get("phase")
        workers[f"{r}.exitCode"] = w.get("exitCode")
        res = w.get("resources") or {}
        for side in ("asked", "seen"):
            for k, v in sorted((res.get(side) or {}).items()):
                if k in ("deviceFiles",):
                    continue
                resources[f"{r}.{side}.{k}"] = json.dumps(v, sort_keys=True) \
                    if isinstance(v, (dict, list)) else v
        if not res:  # version 1: what the Worker told ray start
            for k, v in sorted((w.get("rayNode") or {}).items()):
                resources[f"{r}.rayNode.{k}"] = json.dumps(v) if isinstance(v, list) else v
    return workers, resources


def comparable(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The parts of a record (version 1 or 2) that say how its run was made and ended, as
    ``{section: {key: value}}`` (:data:`SECTIONS`); values are JSON scalars."""
    workers, resources = _workers(rec)
    result = rec.get("result") or {}
    checks = {f"check.{c.get('id')}": c.get("status")
              for c in (rec.get("checks") or {}).get("items") or []}
    digests = {f"{role}.digests": ", ".join(sorted(ds))
               for role, ds in (rec.get("imageDigests") or {}).items()}
    return {
        "code": _code(rec),
        "versions": _versions(rec),
        "images": {**{str(k): v for k, v in (rec.get("images") or {}).items()}, **digests},
        "config": _config(rec),
        "workers": workers,
        "resources": resources,
        "result": {"phase": result.get("phase"), "reason": result.get("reason"),
                   "exitCode": result.get("exitCode"), **checks},
    }


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The differences between records ``a`` and ``b``: ``{"a": {"job", "run", "recordVersion"},
    "b": {...}, "changes": [{"section", "key", "a", "b"}], "same": bool}``; a key only one side
    has shows None on the other. Pure."""
    ca, cb = comparable(a), comparable(b)
    changes = []
    for section in SECTIONS:
        left, right = ca.get(section) or {}, cb.get(section) or {}
        for key in sorted(set(left) | set(right)):
            va, vb = left.get(key), right.get(key)
            if va != vb:
                changes.append({"section": section, "key": key, "a": va, "b": vb})

    def ident(r: dict[str, Any]) -> dict[str, Any]:
        return {"job": r.get("job"), "run": r.get("run"), "recordVersion": r.get("recordVersion", 1)}

    return {"a": ident(a), "b": ident(b), "changes": changes, "same": not changes}
