"""What changed between two runs: their records compared key by key (pure).

:func:`comparable` flattens a record (version 1 or 2) into ``{section: {key: value}}``. First
what the user wrote, section ``spec``: the Job's spec snapshot as the Run got it (images,
resources, env names with plain values, secret references by secret name and key (values
never: a record holds none), prepare and run scripts, mounts, RLinf config and overrides,
failure policy), keyed like the document with list items of a name by that name
(``spec.roles[head].env[MODE].value``). Then what RLark observed: ``code``, ``versions``,
``images`` (digests), ``config`` (each original file's hash, the resolved config's source and
every key of it, dotted), ``workers``, ``resources`` (seen, and what Ray counts), ``result``
(with each check's status).

What differs from run to run by nature is left out, so that a spec change shows as that change
and what it caused, nothing else: addresses and identities (IPs, Ray's ``node:<ip>`` resources,
Ray node ids, pids, uids, the Workers' own directories), times and log paths.

Values are JSON scalars or lists of them, never mappings; each change also carries ``display``:
the two values as people read them (bytes in binary units, lists joined, a multi-line text
reduced to its differing lines).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from rlark.record.export import human_bytes

#: what the user wrote
SPEC_SECTIONS = ("spec",)
#: what RLark observed, in the order tables show them
OBSERVED_SECTIONS = ("code", "versions", "images", "config", "workers", "resources", "result")
#: every section, in the order a comparison lists them: the cause first, then its effects
SECTIONS = SPEC_SECTIONS + OBSERVED_SECTIONS

#: keys whose values are byte counts (shown in binary units): their last dotted part
BYTE_KEYS = ("memoryBytes", "objectStoreBytes", "memory", "object_store_memory")


def _flat(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Flatten mappings to dotted keys and lists of named mappings to ``key[name]``; a list of
    scalars stays a value, other lists are indexed. Empty mappings and lists, and None, are
    left out (absent and empty compare equal)."""
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            _flat(value[k], f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        if not value:
            return
        names = [v.get("name") for v in value if isinstance(v, dict)]
        if len(names) == len(value) and all(isinstance(n, str) for n in names) \
                and len(set(names)) == len(names):
            for v in value:
                _flat({k: x for k, x in v.items() if k != "name"} or {"name": v["name"]},
                      f"{prefix}[{v['name']}]", out)
        elif all(not isinstance(v, (dict, list)) for v in value):
            out[prefix] = list(value)
        else:
            for i, v in enumerate(value):
                _flat(v, f"{prefix}[{i}]", out)
    elif value is not None:
        out[prefix] = value


def _spec(rec: dict[str, Any]) -> dict[str, Any]:
    doc = rec.get("spec") or {}
    out: dict[str, Any] = {}
    _flat(doc.get("spec") or {}, "spec", out)
    _flat((doc.get("metadata") or {}).get("labels") or {}, "metadata.labels", out)
    return out


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
    configs = rec.get("configs") or {}
    for f in (configs.get("original") or {}).get("files") or []:
        out[f"file:{f.get('path')}"] = (f.get("sha256") or "")[:12] or None
    resolved = configs.get("resolved") or {}
    if resolved:
        out["resolved.source"] = resolved.get("source")
    data = resolved.get("data")
    if isinstance(data, dict):
        _flat(data, "", out)
    return out


def per_run_resource(name: str) -> bool:
    """Ray's ``node:<address>`` resource (one per node, named after its IP): an address, not a
    resource the run was given."""
    if not name.startswith("node:"):
        return False
    try:
        ipaddress.ip_address(name[5:])
    except ValueError:
        return False
    return True


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
        # what was asked is the spec's (section spec); here what the Worker saw and Ray counts
        seen = dict(((w.get("resources") or {}).get("seen") or {}))
        seen.pop("deviceFiles", None)
        ray = seen.pop("ray", None)
        _flat(seen, f"{r}.seen", resources)
        if isinstance(ray, dict):
            _flat({k: v for k, v in ray.items() if not per_run_resource(str(k))},
                  f"{r}.ray", resources)
        if not w.get("resources"):  # version 1: what the Worker told ray start
            _flat({k: v for k, v in (w.get("rayNode") or {}).items() if k != "workerPorts"},
                  f"{r}.rayNode", resources)
    return workers, resources


def comparable(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The parts of a record (version 1 or 2) that say how its run was made and ended, as
    ``{section: {key: value}}`` (:data:`SECTIONS`); values are JSON scalars or lists of them."""
    workers, resources = _workers(rec)
    result = rec.get("result") or {}
    checks = {f"check.{c.get('id')}": c.get("status")
              for c in (rec.get("checks") or {}).get("items") or []}
    digests = {f"{role}.digests": sorted(ds)
               for role, ds in (rec.get("imageDigests") or {}).items()}
    spec = _spec(rec)
    # a version 1 record without a spec snapshot: its image references are all it says
    images = digests if spec else {**{str(k): v for k, v in (rec.get("images") or {}).items()},
                                   **digests}
    return {
        "spec": spec,
        "code": _code(rec),
        "versions": _versions(rec),
        "images": images,
        "config": _config(rec),
        "workers": workers,
        "resources": resources,
        "result": {"phase": result.get("phase"), "reason": result.get("reason"),
                   "exitCode": result.get("exitCode"), **checks},
    }


def _lines_that_differ(text: str, other: str) -> str:
    """The lines of ``text`` that ``other`` does not have at that place, each with its line
    number (``"3: python train.py x=1"``), ``…`` between runs of them; ``(no line the other
    lacks)`` when ``other`` only adds lines."""
    import difflib

    mine, theirs = text.splitlines(), other.splitlines()
    parts = ["\n".join(f"{n + 1}: {mine[n]}" for n in range(i1, i2))
             for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(
                 a=mine, b=theirs, autojunk=False).get_opcodes()
             if tag != "equal" and i2 > i1]
    return "\n…\n".join(parts) or "(no line the other lacks)"


def display(key: str, value: Any, other: Any = None) -> str:
    """``value`` as a comparison table shows it: ``-`` for absent, bytes in binary units for
    :data:`BYTE_KEYS`, a whole float as an integer, lists joined with ``, ``, ``""`` for an
    empty text, and a text where
    either side has several lines reduced to the lines ``other`` (the other side's value)
    does not have."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(display(key, v) for v in value) or "(none)"
    if key.rsplit(".", 1)[-1] in BYTE_KEYS and isinstance(value, (int, float)):
        return human_bytes(value)
    if isinstance(value, str):
        if value == "":
            return '""'
        if isinstance(other, str) and ("\n" in value.strip() or "\n" in other.strip()):
            return _lines_that_differ(value, other)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # Ray counts CPUs as 4.0: people read 4
    return str(value)


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The differences between records ``a`` and ``b``: ``{"a": {"job", "run",
    "recordVersion", "provisional"}, "b": {...}, "changes": [{"section", "key", "a", "b",
    "display": {"a", "b"}}], "same": bool}``, the ``spec`` section's changes first; a key
    only one side has shows None on the other. ``provisional``: that side's record is not final
    yet (its Run's Workers had not all ended), so its observations may still change. Pure."""
    ca, cb = comparable(a), comparable(b)
    changes = []
    for section in SECTIONS:
        left, right = ca.get(section) or {}, cb.get(section) or {}
        for key in sorted(set(left) | set(right)):
            va, vb = left.get(key), right.get(key)
            if va != vb:
                changes.append({"section": section, "key": key, "a": va, "b": vb,
                                "display": {"a": display(key, va, vb), "b": display(key, vb, va)}})

    def ident(r: dict[str, Any]) -> dict[str, Any]:
        return {"job": r.get("job"), "run": r.get("run"), "recordVersion": r.get("recordVersion", 1),
                "provisional": bool(r.get("provisional"))}

    return {"a": ident(a), "b": ident(b), "changes": changes, "same": not changes}
