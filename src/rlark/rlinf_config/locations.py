"""Data, model, checkpoint and output locations of an RLinf config, and the mount that backs
each on each Worker (pure).

The keys are the ones RLinf itself reads (RLinf at commit a3816b5, github.com/RLinf/RLinf; how
often each appears among the 222 example configs of that commit is in brackets):

==================================  ==========  ===============================================
key                                 kind        where RLinf reads it
==================================  ==========  ===============================================
``runner.logger.log_path``          output      rlinf/utils/metric_logger.py ``MetricLogger``
                                                (``log_path``, default ``logs``);
                                                rlinf/runners/embodied_runner.py
                                                ``_save_checkpoint`` writes checkpoints below
                                                it [212]
``runner.output_dir``               output      rlinf/runners/reasoning_runner.py,
                                                rlinf/runners/coding_online_rl_runner.py [35]
``runner.resume_dir``               checkpoint  rlinf/runners/embodied_runner.py (resume) [174]
``runner.ckpt_path``                checkpoint  rlinf/workers/actor/embodied_fsdp_actor_worker.py,
                                                rlinf/workers/rollout/hf/huggingface_worker.py
                                                (``torch.load``) [134]
``<component>.model.model_path``    model       rlinf/config.py (``rollout.model.model_path must
                                                be specified``; actor/rollout) [378]
``<component>.model.tokenizer_path``  model     rlinf/config.py (the tokenizer) [10]
``data.train_data_paths``,          dataset     rlinf/config.py (``validate_cfg``: train, else
``data.val_data_paths``,                        val paths required) [55, 30]
``data.eval_data_paths``,
``data.dataset_path``
``env.<split>.video_cfg.             output     rlinf/envs/wrappers/record_video.py [147]
video_base_dir``
==================================  ==========  ===============================================

A location is *persistent* when a mount backs it (any mount type: a hostPath directory of the
node, a PVC, object storage), or on the local runtime, where every Worker runs on this machine's
own filesystem (mounts are not applied there: a path is what it is). On Kubernetes a location
under no mount is in the container's filesystem and is lost when the Worker's Pod goes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlark.findings import Finding, Severity

#: (pattern of the dotted key, kind, RLinf source) - the table above
LOCATION_KEYS: tuple[tuple[str, str, str], ...] = (
    (r"runner\.logger\.log_path", "output",
     "rlinf/utils/metric_logger.py MetricLogger; rlinf/runners/embodied_runner.py _save_checkpoint"),
    (r"runner\.output_dir", "output",
     "rlinf/runners/reasoning_runner.py; rlinf/runners/coding_online_rl_runner.py"),
    (r"runner\.resume_dir", "checkpoint", "rlinf/runners/embodied_runner.py (resume)"),
    (r"runner\.ckpt_path", "checkpoint",
     "rlinf/workers/actor/embodied_fsdp_actor_worker.py; rlinf/workers/rollout/hf/huggingface_worker.py"),
    (r"[a-z_]+\.model\.model_path", "model", "rlinf/config.py (actor/rollout model_path)"),
    (r"[a-z_]+\.model\.tokenizer_path", "model", "rlinf/config.py (tokenizer)"),
    (r"data\.(train|val|eval)_data_paths(\[\d+\])?", "dataset", "rlinf/config.py validate_cfg"),
    (r"data\.dataset_path", "dataset", "rlinf/config.py"),
    (r"env\.[a-z_]+\.video_cfg\.video_base_dir", "output", "rlinf/envs/wrappers/record_video.py"),
)
_COMPILED = tuple((re.compile(p + r"$"), kind, src) for p, kind, src in LOCATION_KEYS)
#: kinds a Run writes: lost with the Workers when no persistent mount backs them
WRITTEN_KINDS = frozenset({"output", "checkpoint"})


@dataclass(frozen=True)
class Filesystem:
    """What backs a Worker's path beyond the mounts its role names, as its runtime says
    (:attr:`rlark.runtimes.base.RuntimeProfile.filesystem`)."""

    #: whether a path under no mount outlives the Workers
    persistent: bool
    #: why, said of such a path
    why: str
    #: Workers see a ``hostPath`` mount's files at its ``source`` (they share this machine's
    #: file system), rather than at its ``mountPath``
    host_paths_at_source: bool = False


#: a container's own file system, gone with its Worker: how a path under no mount is judged
#: where the runtime is not known (the stricter judgement)
CONTAINER = Filesystem(persistent=False, why="under no mount: the container's own filesystem")


@dataclass
class Location:
    """One location key of a config: ``key`` (dotted, list items as ``[i]``), ``kind``,
    ``value`` as the config has it, ``path`` (absolute, relative ones joined to the working
    directory; None when that is unknown) and ``source`` (where RLinf reads the key)."""

    key: str
    kind: str
    value: str
    path: str | None
    source: str
    backing: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> see back()

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "value": self.value, "path": self.path,
                "rlinfSource": self.source, "byRole": self.backing,
                "persistent": all(b["persistent"] for b in self.backing.values())
                if self.backing else None}


def _strings(data: Any, path: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(data, str):
        yield path, data


def find_locations(data: Any, working_dir: str | None = None) -> list[Location]:
    """Every :data:`LOCATION_KEYS` key of the composed config ``data`` with a usable value
    (not empty, no unresolved ``${...}``), in config order."""
    out = []
    for key, value in _strings(data):
        v = value.strip()
        if not v or "${" in v or "://" in v:
            continue
        for pattern, kind, source in _COMPILED:
            if pattern.match(key):
                if posixpath.isabs(v):
                    path: str | None = posixpath.normpath(v)
                else:
                    path = posixpath.normpath(posixpath.join(working_dir, v)) if working_dir else None
                out.append(Location(key, kind, value, path, source))
                break
    return out


def _under(path: str, root: str) -> bool:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def mount_holding(path: str, mounts: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Of ``mounts`` (a role's, as a Job document holds them: camelCase keys), the one whose
    ``mountPath`` holds the absolute in-Worker ``path`` (the deepest where several do), or None
    (pure)."""
    best: Mapping[str, Any] | None = None
    for m in mounts:
        at = m.get("mountPath")
        if isinstance(at, str) and at.startswith("/") and _under(path, at) and (
                best is None or len(posixpath.normpath(at)) > len(posixpath.normpath(
                    str(best.get("mountPath"))))):
            best = m
    return best


def back(locations: Sequence[Location], roles: Sequence[Mapping[str, Any]],
         filesystem: Filesystem) -> list[Location]:
    """Fill each location's ``backing``: per role (a Job document's ``spec.roles`` entries),
    ``{"mount": name or None, "type", "source", "mountPath", "readOnly", "persistent", "why"}``
    for the deepest mount whose ``mountPath`` holds the path (a hostPath whose ``source`` holds
    it where Workers see sources at their own paths: :attr:`Filesystem.host_paths_at_source`);
    a path under no mount is as ``filesystem`` (the runtime's) says. Returns the list."""
    for loc in locations:
        for role in roles:
            name = str(role.get("name"))
            if loc.path is None:
                loc.backing[name] = {"mount": None, "persistent": filesystem.persistent,
                                     "why": "relative path and no spec.workingDir"}
                continue
            best = None
            for m in role.get("mounts") or []:
                at = m.get("source") if filesystem.host_paths_at_source \
                    and m.get("type") == "hostPath" else m.get("mountPath")
                if isinstance(at, str) and _under(loc.path, at) and (
                        best is None or len(at) > len(best[0])):
                    best = (at, m)
            if best is not None:
                m = best[1]
                loc.backing[name] = {"mount": m.get("name"), "type": m.get("type"),
                                     "source": m.get("source"), "mountPath": m.get("mountPath"),
                                     "readOnly": bool(m.get("readOnly")), "persistent": True,
                                     "why": f"{m.get('type')} mount {m.get('name')}"}
            else:
                loc.backing[name] = {"mount": None, "persistent": filesystem.persistent,
                                     "why": filesystem.why}
    return list(locations)


def location_problems(locations: Sequence[Location]) -> list[str]:
    """Human-readable problems of written locations (output, checkpoint): on no persistent
    mount, or on a read-only one, naming the roles. Pure."""
    out = []
    for loc in locations:
        if loc.kind not in WRITTEN_KINDS:
            continue
        lost = sorted(r for r, b in loc.backing.items() if not b["persistent"])
        ro = sorted(r for r, b in loc.backing.items() if b.get("readOnly"))
        if lost:
            out.append(f"{loc.kind} path {loc.path or loc.value} ({loc.key}) is not on a "
                       f"persistent mount for role(s) {', '.join(lost)}")
        if ro:
            out.append(f"{loc.kind} path {loc.path or loc.value} ({loc.key}) is on a read-only "
                       f"mount for role(s) {', '.join(ro)}")
    return out


def proposed_outputs(data: Any, outputs: Sequence[Mapping[str, Any]],
                     working_dir: str | None) -> list[Finding]:
    """``OutputProposed`` (info), for a Job that names ``spec.outputs``: each output or
    checkpoint location of the config (its absolute path) that none of them holds, with the
    entry to add. (A Job that names none has every such location read back as an output of its
    own, by its config key: :func:`rlark.record.outputs.output_targets`; nothing to propose.)
    ``outputs``: the Job's ``spec.outputs`` as a Job document holds them. Pure."""
    out: list[Finding] = []
    if not outputs:
        return out
    seen: set[str] = set()
    for loc in find_locations(data, working_dir):
        if loc.kind not in WRITTEN_KINDS or loc.path is None or loc.path in seen:
            continue
        seen.add(loc.path)
        if any(isinstance(o.get("path"), str) and _under(loc.path, o["path"]) for o in outputs):
            continue
        name = re.sub(r"[^a-z0-9]+", "-", loc.key.rsplit(".", 1)[-1].lower()).strip("-")[:63] \
            or "output"
        out.append(Finding(
            code="OutputProposed", severity=Severity.info, path=loc.key,
            message=f"{loc.key} = {loc.path}: the Run writes its {loc.kind}s there",
            hint=f"name it in spec.outputs ({{name: {name}, path: {loc.path}}}) to have it "
                 "listed and read back after the Run and resumed from (`rlark restart --resume`)"))
    return out


def location_findings(data: Any, roles: Sequence[Mapping[str, Any]],
                      filesystem: Filesystem | None, working_dir: str | None) -> list[Finding]:
    """``OutputNotPersistent`` warnings before a Run: an output or checkpoint location of the
    config that no persistent mount backs (its contents are lost when the Workers go) or that a
    read-only mount backs. ``filesystem``: the runtime's (None, unknown: :data:`CONTAINER`, the
    stricter)."""
    found = back(find_locations(data, working_dir), roles, filesystem or CONTAINER)
    out = []
    for loc, problem in ((loc, p) for loc in found for p in location_problems([loc])):
        out.append(Finding(
            code="OutputNotPersistent", severity=Severity.warning, path=loc.key,
            message=problem + ("; what the Run writes there is lost when its Workers go"
                               if "persistent" in problem else "; the Run cannot write there"),
            hint="add a mount (pvc, objectStorage or hostPath) whose mountPath holds it, or "
                 f"override {loc.key} to a path under one"))
    return out
