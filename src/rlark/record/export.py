"""A run record as people and programs read it: JSON, YAML or Markdown (:func:`render`), and the
units it shows amounts in (:func:`human_bytes`). Pure; reads records of every readable version.
"""

from __future__ import annotations

import json
from typing import Any

import yaml


def human_bytes(n: Any) -> str:
    """A byte count as people read it, in binary units: ``25275990016`` -> ``"23.5 GiB"``,
    ``1073741824`` -> ``"1 GiB"``, ``322122547`` -> ``"307.2 MiB"``, ``512`` -> ``"512 B"``
    (one decimal, a trailing ``.0`` dropped). Anything that is not a number is returned as text
    (``None`` as ``"-"``)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return "-" if n is None else str(n)
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            break
        value /= 1024
    text = f"{value:.0f}" if unit == "B" else f"{value:.1f}".removesuffix(".0")
    return f"{text} {unit}"


def render_markdown(rec: dict[str, Any]) -> str:
    """A human-readable Markdown view of a run record."""
    # imported here: the builder pulls in the record's pydantic schema (~0.2 s), which every
    # `rlark` command would pay through human_bytes otherwise
    from rlark.record.build import PROVISIONAL_REASON

    r = rec["result"]
    lines = [
        f"# Run record: {rec['job']} run {rec['run']}",
        "",
        *([f"- **Provisional:** {rec.get('provisionalReason') or PROVISIONAL_REASON}", ""]
          if rec.get("provisional") else []),
        f"- Result: **{r['phase']}** ({r['reason']}) {r['message']}",
        f"- Exit code: {r['exitCode']}",
        f"- Runtime: {rec['runtime']}; run uid `{rec['runUid']}`; cause {rec['cause']}",
        f"- Started {rec['times']['started']}, running {rec['times']['running']}, "
        f"finished {rec['times']['finished']} ({rec['times']['durationSeconds']} s)",
        f"- Workers: {rec['workers']['actual']} joined of {rec['workers']['expected']} expected",
        "- Versions: " + ", ".join(
            f"{k} {'/'.join(map(str, v)) or '-'}" for k, v in rec["versions"].items()
            if isinstance(v, list) and k != "packageLists"
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
            f"| {'' if store is None else human_bytes(store)} "
            f"| {f'{ports[0]}-{ports[1]} ({ports[1] - ports[0] + 1})' if ports else ''} "
            f"| {w['phase']} | {'' if w['exitCode'] is None else w['exitCode']} | {w['log'] or ''} |"
        )
    lines += _markdown_v2(rec)
    if rec["mounts"]:
        lines += ["", "## Mounts", "", "| role | name | type | source | mountPath | readOnly |",
                  "|---|---|---|---|---|---|"]
        for m in rec["mounts"]:
            lines.append(
                f"| {m.get('role')} | {m.get('name')} | {m.get('type')} | {m.get('source')} | "
                f"{m.get('mountPath')} | {m.get('readOnly', False)} |"
            )
    return "\n".join(lines) + "\n"


def _cell(text: Any) -> str:
    return str("" if text is None else text).replace("|", "\\|").replace("\n", " ")


def _markdown_v2(rec: dict[str, Any]) -> list[str]:
    """The version 2 sections of :func:`render_markdown` (none for a version 1 record)."""
    lines: list[str] = []
    checks = (rec.get("checks") or {}).get("items") or []
    if checks:
        lines += ["", f"## Checks: {rec['checks'].get('status')}", "", "| check | status | evidence |",
                  "|---|---|---|"]
        lines += [f"| {c.get('id')} | {c.get('status')} | {_cell('; '.join(c.get('evidence') or []))} |"
                  for c in checks]
    code = rec.get("code") or {}
    if code:
        lines += ["", "## Code", ""]
        for part, g in code.items():
            g = g or {}
            git = (g.get("git") or {}) if part == "rlinf" else g
            desc = (f"`{git['commit'][:12]}` {git.get('branch') or ''} {git.get('remote') or ''} "
                    + ("dirty, diff sha256 `" + str(git.get("diffSha256"))[:12] + "`"
                       if git.get("dirty") else "clean")) if git.get("commit") else \
                (git.get("absent") or (g.get("directUrl") or {}).get("absent") or "-")
            lines.append(f"- {part}: {('rlinf ' + g['version'] + ', ') if g.get('version') else ''}{desc}")
    configs = rec.get("configs") or {}
    if configs:
        resolved = configs.get("resolved") or {}
        over = configs.get("overrides") or {}
        lines += ["", "## Configs", "",
                  f"- Resolved from: {resolved.get('source')} {resolved.get('dir') or ''}".rstrip(),
                  f"- Overrides: spec {over.get('spec') or []}, run script {over.get('runScript') or []}"]
        for f in (configs.get("original") or {}).get("files") or []:
            lines.append(f"- `{f.get('path')}` sha256 `{f.get('sha256') or f.get('absent')}`")
    if rec.get("locations"):
        lines += ["", "## Locations", "", "| key | kind | path | backed by |", "|---|---|---|---|"]
        for loc in rec["locations"]:
            by = "; ".join(f"{r}: {b.get('why')}" for r, b in (loc.get("byRole") or {}).items())
            lines.append(f"| {loc.get('key')} | {loc.get('kind')} | {_cell(loc.get('path') or loc.get('value'))} "
                         f"| {_cell(by)} |")
    resume = rec.get("resume")
    if resume:
        lines += ["", "## Resumed", "",
                  f"- From run {resume.get('fromRun')}"
                  + (" (automatic retry)" if resume.get("automatic") else "") + ": "
                  + (f"`{resume['checkpoint']}` (step {resume.get('step')}), "
                     f"`{resume.get('override')}`" if resume.get("checkpoint")
                     else "no checkpoint, started afresh")]
        lines += [f"- {_cell(n)}" for n in resume.get("notes") or []]
    if rec.get("outputs"):
        lines += ["", "## Outputs", "", "| output | path | mount | read back from | files | bytes |",
                  "|---|---|---|---|---|---|"]
        for o in rec["outputs"]:
            back = o.get("readBack") or {}
            mount = o.get("mount") or {}
            where = back.get("at") if back.get("ok") else f"not read back: {back.get('why')}"
            lines.append(f"| {_cell(o.get('name'))} | {_cell(o.get('path'))} | "
                         f"{_cell(' '.join(filter(None, (mount.get('type'), mount.get('name')))) or '-')} | "
                         f"{_cell(where)} | {o.get('fileCount', '-')} | "
                         f"{human_bytes(o['bytes']) if o.get('bytes') is not None else '-'} |")
    return lines


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
