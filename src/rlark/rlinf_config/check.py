"""``rlark check``: a Job against the RLinf config it runs.

Pure: a parsed :class:`~rlark.spec.Job` and the composed config as plain data in, Findings out.
The checks, each with a stable code:

==============================  ========  =======================================================
code                            severity  what
==============================  ========  =======================================================
(RLinf's own refusals)          error     everything :func:`.cluster.parse_cluster` reports:
                                          RLinf 0.3.0 would refuse the ``cluster:`` section
                                          (bad ``num_nodes``, node ranks outside ``0..num_nodes-1``,
                                          ``HardwareRankOutsideGroup``, ``RobotIpInvalid``, ...)
``RLinfClusterMissing``         error     the config has no ``cluster:`` section
``WorkersMismatch``             error     the roles' Workers do not add up to ``cluster.num_nodes``
``RoleStraddlesNodeGroups``     warning   a role's node ranks fall in node groups (or env_configs,
                                          robots) that RLinf treats differently
``RoleNamedLikeComponent``      warning   a role is named like an RLinf component but does not sit
                                          where RLinf places that component
``PlacementNeedsMoreAccelerators``  error a placement needs more GPUs than the roles' ``gpu`` give
``PlacementBeyondNodes``        error     a node placement names ranks beyond the group / num_nodes
``PlacementNeedsMoreHardware``  error     more robot ranks than ``hardware.configs`` describe
``PlacementInvalid``,           error     RLinf cannot parse a placement / finds no such group
``UnknownNodeGroup``
``ComponentPlacedTwice``        error     one component appears in two placement entries
``NodeGroupLabelDuplicate``     error     two node groups share a label
``UnfilledPlaceholder``         error     ``ROBOT_IP``, ``/path/to/model``, ``???`` left in the config
``OverrideNotInRunScript``      warning   a ``spec.rlinf.overrides`` entry the run script does not pass
``RLinfConfigNameMismatch``     error     the run script's ``--config-name`` is not
                                          ``spec.rlinf.configName`` (:mod:`.script`; checked with
                                          the spec itself, whether or not the config is here)
``PathNotMounted``              warning   an absolute data/model/checkpoint/output path is not under
                                          any mount's ``mountPath``
``OutputNotPersistent``         warning   an output/checkpoint location RLinf writes (see
                                          :mod:`.locations`) is on no persistent mount (lost when
                                          the Workers go) or on a read-only one
``ConfigEnvNotSet``             warning   the config reads ``${oc.env:X}`` and neither this machine
                                          nor the head role's env sets X
==============================  ========  =======================================================
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from rlark.findings import Finding, Severity
from rlark.ranks import plan_workers
from rlark.rlinf_config.cluster import (
    ClusterSpec,
    iter_strings,
    parse_cluster,
    resolve_placements,
)
from rlark.rlinf_config.plan import rank_conditions
from rlark.rlinf_config.ranks import format_ranks
from rlark.spec import Job

if TYPE_CHECKING:
    from rlark.rlinf_config.locations import Filesystem

#: Words that mark an ALL_CAPS value as a placeholder (``ROBOT_IP``, ``MODEL_PATH``,
#: ``ZED_SERIAL_1``); values such as ``FLASH_ATTN`` or ``D435`` are not placeholders.
PLACEHOLDER_WORDS = frozenset({
    "IP", "PATH", "DIR", "PORT", "SERIAL", "URL", "URI", "HOST", "KEY", "TOKEN", "ID", "ENTITY",
    "NAME", "DESCRIPTION", "POSE", "CONNECTION", "DATASET", "MODEL", "ADDRESS", "ROOT", "FILE",
    "USER", "PASSWORD", "PROJECT", "BUCKET", "ENDPOINT", "CKPT", "CHECKPOINT", "SECRET",
})
_CAPS = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")
_PATH_PLACEHOLDER = re.compile(r"(?i)(^|[/\s])path/to(/|$)|^path_to_|^your[_-]|^<[^<>]+>$")
#: Keys whose absolute values are data, models, checkpoints or outputs a Worker must see.
_PATH_KEY = re.compile(r"(?i)(path|dir|ckpt|checkpoint|model|data|output|save|load|root|file)")
_ENV_MISSING = re.compile(r"Environment variable '([^']+)' not found")
_CAPACITY = {"PlacementNeedsMoreAccelerators"}


def is_placeholder(value: str) -> bool:
    """True for values a config author left for the user to fill: ``ROBOT_IP``, ``MODEL_PATH``,
    ``SERIAL1``, ``/path/to/model``, ``path_to_your_model``, ``<ip>``, and OmegaConf's ``???``."""
    v = value.strip()
    if v == "???" or _PATH_PLACEHOLDER.search(v):
        return True
    if _CAPS.match(v):
        words = {re.sub(r"\d+$", "", w) for w in v.split("_")}
        return bool(words & PLACEHOLDER_WORDS)
    return False


def placeholder_findings(data: Mapping[str, Any], skip: Iterable[str] = ()) -> list[Finding]:
    """One ``UnfilledPlaceholder`` error per distinct placeholder value in the config, at the
    first key that holds it (the message lists up to three more). Keys in ``skip`` (already
    reported) are left out."""
    skip = set(skip)
    seen: dict[str, list[str]] = {}
    for path, value in iter_strings(data):
        if path.startswith("hydra.") or path in skip or not is_placeholder(value):
            continue
        seen.setdefault(value, []).append(path)
    out = []
    for value, paths in seen.items():
        more = f" (also at {', '.join(paths[1:4])}{', ...' if len(paths) > 4 else ''})" \
            if len(paths) > 1 else ""
        what = "a required value (???) that is still empty" if value.strip() == "???" else \
            "a placeholder that was never filled in"
        out.append(Finding(
            code="UnfilledPlaceholder", severity=Severity.error, path=paths[0],
            message=f"{paths[0]} = {value!r} is {what}{more}",
            hint=placeholder_hint(paths)))
    return out


def placeholder_hint(paths: Sequence[str]) -> str:
    """The fix for a placeholder held by the keys ``paths``: one override per key. Keys that
    hold the same text are still separate settings (a model path and a tokenizer path may both
    say ``/path/to/model``); overriding one leaves the others unfilled, so each is named."""
    overrides = [f"{p}=<value>" for p in paths]
    if len(paths) == 1:
        return (f"put the real value in the config, or override it: add {overrides[0]} to "
                "spec.rlinf.overrides and to the run script's RLinf command "
                f"(rlark check: --override {overrides[0]})")
    return (f"put the real values in the config, or override each of the {len(paths)} keys: "
            f"add {', '.join(overrides)} to spec.rlinf.overrides and to the run script's RLinf "
            f"command (rlark check: {' '.join('--override ' + o for o in overrides)})")


def _under(path: str, root: str) -> bool:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def path_findings(data: Mapping[str, Any], mount_paths: Sequence[str],
                  known_dirs: Sequence[str] = ()) -> list[Finding]:
    """``PathNotMounted`` warnings: absolute values of data/model/checkpoint/output-like keys
    (outside ``cluster:``) that are under no mount path. Paths under ``known_dirs`` (the RLinf
    checkout the config comes from) and placeholders are skipped; one warning per distinct path."""
    seen: dict[str, list[str]] = {}
    for path, value in iter_strings(data):
        if path.startswith(("cluster.", "hydra.")):
            continue
        key = re.sub(r"\[\d+\]$", "", path).rsplit(".", 1)[-1]
        v = value.strip()
        if not v.startswith("/") or "${" in v or not _PATH_KEY.search(key) or is_placeholder(v):
            continue
        if any(_under(v, m) for m in mount_paths) or any(_under(v, d) for d in known_dirs if d):
            continue
        seen.setdefault(v, []).append(path)
    out = []
    mounts = ", ".join(sorted(set(mount_paths))) or "none"
    for value, paths in seen.items():
        more = f" (also at {', '.join(paths[1:4])})" if len(paths) > 1 else ""
        out.append(Finding(
            code="PathNotMounted", severity=Severity.warning, path=paths[0],
            message=f"{paths[0]} = {value!r} is not inside any mount (mountPaths: {mounts}){more}; "
                    "Workers see it only if the image has it",
            hint="mount the directory that holds it (spec.roles[].mounts[].mountPath), or bake it "
                 "into the image"))
    return out


def env_findings(unresolved: Mapping[str, str], job: Job | None) -> list[Finding]:
    """``ConfigEnvNotSet`` warnings for ``${oc.env:X}`` values X is not set for (here, nor in the
    head role's env, where RLinf's driver composes the config)."""
    head_env: set[str] = set()
    if job is not None:
        head = job.role(job.spec.head_role)
        head_env = {e.name for e in head.env} if head else set()
    names: dict[str, list[str]] = {}
    for path, reason in unresolved.items():
        m = _ENV_MISSING.search(reason)
        if m and m.group(1) not in head_env:
            names.setdefault(m.group(1), []).append(path)
    return [Finding(
        code="ConfigEnvNotSet", severity=Severity.warning, path=paths[0],
        message=f"{paths[0]} reads the environment variable {name}, which is not set here"
                f"{' nor in the head role env' if job is not None else ''}"
                f"{' (also ' + ', '.join(paths[1:3]) + ')' if len(paths) > 1 else ''}",
        hint=f"set {name} in the head role's env (or the image)")
        for name, paths in names.items()]


def check_config(
    job: Job,
    data: object,  # the composed config: any value YAML or Hydra gave, or None
    *,
    source: str = "the RLinf config",
    unresolved: Mapping[str, str] | None = None,
    known_dirs: Sequence[str] = (),
    filesystem: Filesystem | None = None,
) -> list[Finding]:
    """Every RLinf Finding for ``job`` run with the composed config ``data``.

    Args:
        job: a structurally valid Job (its own preflight Findings are not repeated here).
        data: ``ComposedConfig.data``; None gives no Findings (the compose Findings say why).
        source: the config's name in messages.
        unresolved: ``ComposedConfig.unresolved`` (for ``ConfigEnvNotSet``).
        known_dirs: directories the Workers have anyway (the RLinf checkout), for
            ``PathNotMounted``.
        filesystem: what backs a path under no mount on the runtime the Job will run on
            (:attr:`rlark.runtimes.base.RuntimeProfile.filesystem`), for ``OutputNotPersistent``
            (:mod:`.locations`); None (not known) leaves that check out.

    Returns:
        Findings in this order: cluster section, Workers vs nodes, roles vs node groups,
        placements, placeholders, paths, environment. See the module table for the codes.
    """
    if data is None:
        return []
    findings: list[Finding] = []
    if not isinstance(data, Mapping) or "cluster" not in data:
        findings.append(Finding(
            code="RLinfClusterMissing", path="cluster",
            message=f"{source} has no cluster: section; RLinf needs cluster.num_nodes and "
                    "cluster.component_placement",
            hint="point spec.rlinf at the top-level training config"))
        return findings
    spec, cluster_findings = parse_cluster(data["cluster"])
    findings.extend(cluster_findings)
    if spec is not None:
        findings.extend(_job_vs_cluster(job, spec, source))
    findings.extend(placeholder_findings(data, skip={f.path for f in cluster_findings}))
    mounts = [m.mount_path for r in job.spec.roles for m in r.mounts]
    findings.extend(path_findings(data, mounts, known_dirs))
    if filesystem is not None:
        from rlark.rlinf_config.locations import location_findings, proposed_outputs

        roles = [r.model_dump(by_alias=True) for r in job.spec.roles]
        findings.extend(location_findings(data, roles, filesystem, job.spec.working_dir))
        findings.extend(proposed_outputs(
            data, [o.model_dump(by_alias=True) for o in job.spec.outputs], job.spec.working_dir))
    findings.extend(env_findings(unresolved or {}, job))
    findings.extend(override_findings(job))
    return findings


def override_findings(job: Job) -> list[Finding]:
    """``OverrideNotInRunScript`` warnings: RLark checks the config with ``spec.rlinf.overrides``
    but never rewrites the user's command, so an override the run script does not pass to RLinf
    was checked but will not be in effect."""
    rlinf = job.spec.rlinf
    out = []
    for i, override in enumerate(rlinf.overrides if rlinf else []):
        if override not in job.spec.run_script:
            out.append(Finding(
                code="OverrideNotInRunScript", severity=Severity.warning,
                path=f"spec.rlinf.overrides[{i}]",
                message=f"spec.rlinf.overrides[{i}] = {override!r} is not in spec.runScript: RLark "
                        "checked the config with it, but RLinf will run without it",
                hint=f"add {override} to the RLinf command in runScript (RLark never rewrites it)"))
    return out


def _roles_text(job: Job) -> str:
    return ", ".join(f"{r.name} x{r.workers}" for r in job.spec.roles)


def _job_vs_cluster(job: Job, spec: ClusterSpec, source: str) -> list[Finding]:
    out: list[Finding] = []
    n = spec.num_nodes
    total = job.total_workers
    if total != n:
        out.append(Finding(
            code="WorkersMismatch", severity=Severity.error, path="spec.roles",
            message=f"the roles have {total} Worker{'s' if total != 1 else ''} in all "
                    f"({_roles_text(job)}), but cluster.num_nodes = {n} in {source}: RLinf waits "
                    f"for {n} node{'s' if n != 1 else ''} with RLINF_NODE_RANK 0..{n - 1}",
            hint=f"make the roles' workers add up to {n} (`rlark plan` suggests roles), or change "
                 "cluster.num_nodes"))
    try:
        workers = plan_workers(job)
    except ValueError:
        return out  # spec.headRole names no role: the Job's own preflight reports it
    role_index = {r.name: i for i, r in enumerate(job.spec.roles)}
    gpus_of = {r.name: r.resources.gpu for r in job.spec.roles}
    role_at = {w.node_rank: w.role for w in workers}
    gpus = [gpus_of.get(role_at[r], 0) if r in role_at else 0 for r in range(n)]
    conditions = rank_conditions(spec, gpus)

    # roles vs run conditions
    for role in job.spec.roles:
        ranks = [w.node_rank for w in workers if w.role == role.name and w.node_rank < n]
        kinds: dict[Any, list[int]] = {}
        for r in ranks:
            kinds.setdefault(conditions[r].without_gpus(), []).append(r)
        if len(kinds) > 1:
            parts = "; ".join(f"ranks {format_ranks(rs)}: {c.describe(with_gpus=False)}"
                              for c, rs in kinds.items())
            out.append(Finding(
                code="RoleStraddlesNodeGroups", severity=Severity.warning,
                path=f"spec.roles[{role_index[role.name]}]",
                message=f"role {role.name} gets node ranks {format_ranks(ranks)}, which RLinf "
                        f"treats differently ({parts}); one Worker template cannot fit them all",
                hint="split the role at the node group boundaries (`rlark plan` shows them), "
                     "keeping the order so the ranks still line up"))

    # placements with the roles' GPUs
    hint = ("give the Workers at those node ranks more GPUs ("
            + ", ".join(f"spec.roles[{role_index[r.name]}].resources.gpu = {r.resources.gpu} for "
                        f"role {r.name}" for r in job.spec.roles)
            + "), or use fewer ranks")
    layouts, placement = resolve_placements(spec, gpus, capacity_hint=hint)
    if total != n:
        placement = [f for f in placement if f.code not in _CAPACITY]
    out.extend(placement)

    # role names vs components
    for role in job.spec.roles:
        layout = layouts.get(role.name)
        if layout is None:
            continue
        ranks = sorted(w.node_rank for w in workers if w.role == role.name)
        if ranks != layout.node_ranks:
            out.append(Finding(
                code="RoleNamedLikeComponent", severity=Severity.warning,
                path=f"spec.roles[{role_index[role.name]}].name",
                message=f"role {role.name} (node ranks {format_ranks(ranks)}) is named like RLinf's "
                        f"component {role.name!r}, but RLinf places {role.name!r} on node ranks "
                        f"{format_ranks(layout.node_ranks)} (cluster.component_placement, node group "
                        f"{layout.node_group!r}). Role names place nothing: RLinf decides from node "
                        "ranks",
                hint="name roles after node groups, and order/size them so their ranks match "
                     "node_groups (`rlark plan` suggests such roles)"))
    return out


__all__ = ["PLACEHOLDER_WORDS", "check_config", "env_findings", "is_placeholder",
           "path_findings", "placeholder_findings", "placeholder_hint"]
