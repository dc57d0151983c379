"""``rlark plan``: from an RLinf config to node ranks, components and a ready-to-edit Job.

Pure functions: the composed config comes in as plain data (see :mod:`.compose`), a
:class:`Plan` comes out. The suggested roles follow RLark's rank rule (:mod:`rlark.ranks`: the
head role's Workers get ranks 0.., then every other role in spec order), so the roles are one
per contiguous rank range whose nodes RLinf treats the same ("run conditions": the node groups a
rank belongs to, the robots attached to it, the environment and Python interpreter RLinf uses
there, the GPUs the components placed there need), in rank order, the first one being the head
role. Submitting the suggested Job therefore starts exactly the nodes ``node_groups`` expects, at
exactly the ranks it expects.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlark.findings import Finding, Severity, has_errors
from rlark.rlinf_config.cluster import (
    MAX_NODES,
    ACCELERATOR,
    ClusterSpec,
    ComponentLayout,
    parse_cluster,
    resolve_groups,
    resolve_placements,
    robot_count,
)
from rlark.rlinf_config.ranks import format_ranks
from rlark.spec import dump_yaml

#: Image the suggested Job uses until the user edits it (the quickstart's image).
DEFAULT_IMAGE = "docker.io/rlinf/rlinf:0.3.0"
#: RLinf entry points by example family (from RLinf's run scripts, e.g.
#: examples/embodiment/run_embodiment.sh runs train_embodied_agent.py).
ENTRY_POINTS = {
    "examples/embodiment": "train_embodied_agent.py",
    "examples/reasoning": "main_grpo.py",
}
_CAPACITY_CODES = {"PlacementNeedsMoreAccelerators"}
_PLAN_HINT = "pass --gpus-per-node with the number of GPUs each node has, or use fewer ranks"


@dataclass(frozen=True)
class RankConditions:
    """How RLinf treats one node rank: what decides which Worker template it needs."""

    node_groups: tuple[str, ...] = ()
    hardware: tuple[tuple[str, int], ...] = ()  # (robot type, count) attached to this node
    env_vars: tuple[tuple[str, str, str], ...] = ()  # (group label, NAME, value)
    python: tuple[tuple[str, str], ...] = ()  # (group label, interpreter path)
    gpus: int = 0

    def describe(self, with_gpus: bool = True) -> str:
        """``"node groups a800; GLOO_SOCKET_IFNAME=eth0; 8 GPUs"``."""
        parts = [f"node group{'s' if len(self.node_groups) > 1 else ''} "
                 f"{', '.join(self.node_groups)}" if self.node_groups else "no node group"]
        parts += [f"{n} {t}" for t, n in self.hardware]
        parts += [f"{k}={v}" for _, k, v in self.env_vars]
        parts += [f"python {p}" for _, p in self.python]
        if with_gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        return "; ".join(parts)

    def without_gpus(self) -> "RankConditions":
        return RankConditions(self.node_groups, self.hardware, self.env_vars, self.python, 0)


@dataclass(frozen=True)
class SuggestedRole:
    """A role covering node ranks ``first..last`` (inclusive), all with ``conditions``."""

    name: str
    first_rank: int
    last_rank: int
    conditions: RankConditions

    @property
    def workers(self) -> int:
        return self.last_rank - self.first_rank + 1

    @property
    def node_ranks(self) -> list[int]:
        return list(range(self.first_rank, self.last_rank + 1))


@dataclass
class Plan:
    """The plan for one RLinf config. :meth:`to_dict` is the JSON shape of ``rlark plan``."""

    source: str
    num_nodes: int | None = None
    gpus_per_node: int | None = None
    gpus_assumed: bool = False
    spec: ClusterSpec | None = None
    components: dict[str, ComponentLayout] = field(default_factory=dict)
    conditions: list[RankConditions] = field(default_factory=list)
    roles: list[SuggestedRole] = field(default_factory=list)
    job: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    config: object = field(default=None, repr=False)  # the composed config

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)

    @property
    def usable(self) -> bool:
        """The cluster section parsed and ``num_nodes`` is small enough to expand rank lists."""
        return self._usable_spec() is not None

    def _usable_spec(self) -> ClusterSpec | None:
        spec = self.spec
        return spec if spec is not None and 0 <= spec.num_nodes <= MAX_NODES else None

    def node_groups(self) -> dict[str, list[int]]:
        """label -> node ranks, as RLinf expands them (first group wins on a repeated label)."""
        out: dict[str, list[int]] = {}
        spec = self._usable_spec()
        for g in spec.node_groups if spec is not None else ():
            out.setdefault(g.label, list(g.node_ranks))
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"num_nodes", "node_groups", "components", "roles", "job", "findings", ...}``."""
        spec = self.spec
        usable = self._usable_spec()
        details: dict[str, Any] = {}
        resolved = {g.label: g for g in resolve_groups(
            usable, [self.gpus_per_node or 0] * usable.num_nodes)} if usable is not None else {}
        for g in usable.node_groups if usable is not None else ():
            r = resolved.get(g.label)
            details.setdefault(g.label, {
                "node_ranks": list(g.node_ranks),
                "hardware_type": r.hardware_type if r else g.hardware_type,
                "ignore_hardware": g.ignore_hardware,
                "hardware": [dict(h.fields) for h in g.hardware],
                "env_configs": [{"node_ranks": list(e.node_ranks), "env_vars": dict(e.env_vars),
                                 "python_interpreter_path": e.python_interpreter_path}
                                for e in g.env_configs],
            })
        role_of = {r: role.name for role in self.roles for r in role.node_ranks}
        return {
            "config": self.source,
            "num_nodes": self.num_nodes,
            "node_ranks": list(range(self.num_nodes or 0)) if (self.num_nodes or 0) <= MAX_NODES else [],
            "gpus_per_node": self.gpus_per_node,
            "gpus_per_node_assumed": self.gpus_assumed,
            "node_groups": self.node_groups(),
            "node_group_details": details,
            "components": {
                name: {"node_group": c.node_group, "node_ranks": c.node_ranks,
                       "processes": c.processes, "resource": c.resource,
                       "placement_entry": c.entry}
                for name, c in self.components.items()
            },
            "nodes": [
                {"node_rank": r, "role": role_of.get(r), "node_groups": list(c.node_groups),
                 "components": [n for n, lay in self.components.items() if r in lay.node_set],
                 "gpus": c.gpus, "conditions": c.describe(with_gpus=False)}
                for r, c in enumerate(self.conditions)
            ],
            "roles": [
                {"name": r.name, "workers": r.workers, "node_ranks": r.node_ranks,
                 "node_groups": list(r.conditions.node_groups), "gpu": r.conditions.gpus,
                 "head": i == 0}
                for i, r in enumerate(self.roles)
            ],
            "job": self.job,
            "findings": [f.model_dump(mode="json") for f in self.findings],
        }


# --- building blocks ---------------------------------------------------------------------------


def rank_conditions(spec: ClusterSpec, gpus: Sequence[int]) -> list[RankConditions]:
    """The :class:`RankConditions` of node ranks ``0..num_nodes-1``; ``gpus[r]`` is the GPU count
    the plan gives rank ``r``."""
    out = []
    for r in range(spec.num_nodes):
        groups = spec.groups_of(r)
        hw_types = sorted({g.hardware_type for g in groups if g.hardware and g.hardware_type})
        out.append(RankConditions(
            node_groups=tuple(g.label for g in groups),
            hardware=tuple((t, n) for t in hw_types if (n := robot_count(spec, r, t))),
            env_vars=tuple((g.label, k, v) for g in groups for k, v in sorted(g.env_vars_for(r).items())),
            python=tuple((g.label, p) for g in groups if (p := g.python_for(r))),
            gpus=int(gpus[r]) if r < len(gpus) else 0,
        ))
    return out


def role_name(labels: Sequence[str]) -> str:
    """A DNS-1123 role name from node group labels: ``["A800", "rollout"]`` -> ``a800-rollout``;
    no labels -> ``node``."""
    text = "-".join(labels).lower() if labels else "node"
    text = re.sub(r"[^a-z0-9-]+", "-", text)
    text = re.sub(r"-+", "-", text).strip("-")[:30].strip("-")
    return text or "group"


def suggest_roles(conditions: Sequence[RankConditions],
                  components: Mapping[str, ComponentLayout] | None = None) -> list[SuggestedRole]:
    """One role per maximal run of consecutive ranks with equal conditions, in rank order.

    Names come from the node group labels; a repeated name gets ``-2``, ``-3``...; a name equal to
    an RLinf component whose node ranks differ from the role's gets ``-nodes`` (role names do not
    place components, and a role named ``actor`` that is not where the actor runs misleads).
    """
    runs: list[tuple[int, int, RankConditions]] = []
    for r, c in enumerate(conditions):
        if runs and runs[-1][2] == c and runs[-1][1] == r - 1:
            runs[-1] = (runs[-1][0], r, c)
        else:
            runs.append((r, r, c))
    used: dict[str, int] = {}
    out = []
    for first, last, c in runs:
        base = role_name(c.node_groups)
        comp = (components or {}).get(base)
        if comp is not None and comp.node_ranks != list(range(first, last + 1)):
            base = f"{base}-nodes"
        used[base] = used.get(base, 0) + 1
        name = base if used[base] == 1 else f"{base}-{used[base]}"
        out.append(SuggestedRole(name, first, last, c))
    return out


def job_name_from(config_name: str) -> str:
    """``maniskill_ppo_openvlaoft`` -> ``maniskill-ppo-openvlaoft`` (DNS-1035, at most 40
    characters so ``<job>-<role>-<index>`` fits 63)."""
    text = re.sub(r"[^a-z0-9-]+", "-", config_name.lower())
    text = re.sub(r"-+", "-", text).strip("-")
    if not text or not text[0].isalpha():
        text = f"rlinf-{text}".strip("-")
    return text[:40].strip("-") or "rlinf"


def launch_settings(config_dir: str, config_name: str, overrides: Sequence[str],
                    cwd: str) -> dict[str, Any]:
    """Where the suggested Job runs and how it starts RLinf.

    Args:
        config_dir: absolute directory of the config.
        cwd: absolute directory the Job file will be saved in (``workingDir: .`` resolves there).

    Returns:
        ``{"working_dir", "rlinf": {configDir, configName, overrides}, "run_script", "entry_known"}``.
        Inside an RLinf checkout (``<repo>/examples/...``) the Job works in the checkout, exports
        ``REPO_PATH``/``EMBODIED_PATH``/... as RLinf's run scripts do and runs the family's entry
        point; elsewhere it runs ``train.py`` (to be edited).
    """
    from rlark.rlinf_config.compose import RLINF_PATH_VARS, find_rlinf_repo

    def rel(path: str, base: str) -> str:
        r = os.path.relpath(path, base)
        return path if r.startswith("..") else (r if r != "." else ".")

    repo = find_rlinf_repo(config_dir)
    extra = " ".join(shlex.quote(o) for o in overrides)
    if repo is not None:
        repo_s = str(repo)
        config_rel = os.path.relpath(config_dir, repo_s)
        family = "/".join(config_rel.split(os.sep)[:2])
        entry_file = ENTRY_POINTS.get(family)
        entry = f"{family}/{entry_file}" if entry_file else "train.py"
        exports = " ".join(f'{k}="$PWD{"" if v == "." else "/" + v}"'
                           for k, v in RLINF_PATH_VARS.items())
        script = (f"export {exports}\n"
                  f'python {entry} --config-path "$PWD/{config_rel}" --config-name {config_name}'
                  f"{' ' + extra if extra else ''}\n")
        return {"working_dir": rel(repo_s, cwd), "entry_known": entry_file is not None,
                "rlinf": {"configDir": config_rel, "configName": config_name,
                          "overrides": list(overrides)},
                "run_script": script}
    config_rel = rel(config_dir, cwd)
    script = (f'python train.py --config-path "$PWD/{config_rel}" --config-name {config_name}'
              f"{' ' + extra if extra else ''}\n") if not os.path.isabs(config_rel) else (
        f"python train.py --config-path {shlex.quote(config_rel)} --config-name {config_name}"
        f"{' ' + extra if extra else ''}\n")
    return {"working_dir": ".", "entry_known": False,
            "rlinf": {"configDir": config_rel, "configName": config_name,
                      "overrides": list(overrides)},
            "run_script": script}


def _max_rank_mentioned(spec: ClusterSpec) -> int:
    best = 0
    for e in spec.placements:
        text = str(e.value.get("placement", "")) if isinstance(e.value, Mapping) else str(e.value)
        best = max([best, *(int(m) for m in re.findall(r"\d+", text)[:64])])
    return min(best, 1023)


def _choose_gpus(spec: ClusterSpec) -> int:
    """The fewest GPUs per node (1..) with the fewest placement errors."""
    best, best_errors = 1, None
    for g in range(1, _max_rank_mentioned(spec) + 2):
        _, found = resolve_placements(spec, [g] * spec.num_nodes)
        errors = sum(1 for f in found if f.severity == Severity.error)
        if best_errors is None or errors < best_errors:
            best, best_errors = g, errors
        if errors == 0:
            break
    return best


def _layout_key(layouts: Mapping[str, ComponentLayout]) -> dict[str, tuple]:
    return {n: (c.process_nodes, c.resource_ranks) for n, c in layouts.items()}


# --- plan --------------------------------------------------------------------------------------


def plan(
    data: object,  # the composed config: any value YAML or Hydra gave, or None
    *,
    source: str = "config",
    gpus_per_node: int | None = None,
    config_name: str = "rlinf",
    job_name: str | None = None,
    image: str = DEFAULT_IMAGE,
    launch: Mapping[str, Any] | None = None,
) -> Plan:
    """Plan RLark roles for a composed RLinf config.

    Args:
        data: the composed config as plain data (``ComposedConfig.data``); None when composing
            failed (the plan is then empty; the caller adds the compose Findings).
        source: how to name the config in messages.
        gpus_per_node: GPUs on each node; None = the fewest that fit every accelerator placement
            (reported as an ``AssumedGpusPerNode`` info Finding). 0 = CPU-only nodes.
        config_name / job_name / image / launch: for the suggested Job (``launch`` from
            :func:`launch_settings`).

    Returns:
        A :class:`Plan`; its Findings hold every reason RLinf would refuse the cluster section and
        every placement problem. Never raises for a bad config.
    """
    result = Plan(source=source, config=data)
    if data is None:
        return result
    if not isinstance(data, Mapping) or "cluster" not in data:
        result.findings.append(Finding(
            code="RLinfClusterMissing", path="cluster",
            message=f"{source} has no cluster: section, so RLinf cannot start from it (it may be a "
                    "defaults-group file such as env/ or model/, not a top-level config)",
            hint="plan the top-level config that includes it; RLinf needs cluster.num_nodes and "
                 "cluster.component_placement"))
        return result
    spec, found = parse_cluster(data["cluster"])
    result.findings.extend(found)
    raw_nodes = data["cluster"].get("num_nodes") if isinstance(data["cluster"], Mapping) else None
    result.num_nodes = raw_nodes if type(raw_nodes) is int else None
    if spec is None:
        return result
    result.spec = spec
    n = spec.num_nodes
    if gpus_per_node is None:
        g = _choose_gpus(spec)
        result.gpus_assumed = True
    else:
        g = max(0, int(gpus_per_node))
    result.gpus_per_node = g
    layouts, found = resolve_placements(spec, [g] * n, capacity_hint=_PLAN_HINT)
    if result.gpus_assumed and not any(c.resource == ACCELERATOR for c in layouts.values()):
        g = result.gpus_per_node = 0  # nothing runs on accelerators: CPU-only nodes suffice
        layouts, found = resolve_placements(spec, [0] * n, capacity_hint=_PLAN_HINT)
    result.findings.extend(found)
    result.components = layouts
    if result.gpus_assumed and any(c.resource == ACCELERATOR for c in layouts.values()):
        result.findings.append(Finding(
            code="AssumedGpusPerNode", severity=Severity.info, path="cluster.component_placement",
            message=f"no --gpus-per-node given: assumed {g} GPU{'s' if g != 1 else ''} per node, "
                    "the fewest that fit every accelerator placement",
            hint="pass --gpus-per-node with the GPUs your nodes really have (0 for CPU-only)"))

    # GPUs per rank: nodes that run only CPU/robot components need none.
    uses_accel = {r for c in layouts.values() if c.resource == ACCELERATOR for r in c.node_set}
    used = {r for c in layouts.values() for r in c.node_set}
    gpus = [g if (r in uses_accel or r not in used) else 0 for r in range(n)]
    if gpus != [g] * n:
        again, found_again = resolve_placements(spec, gpus)
        if _layout_key(again) != _layout_key(layouts) or len(found_again) != len(found):
            gpus = [g] * n  # the accelerator numbering depends on every node's GPUs: keep them
    result.conditions = rank_conditions(spec, gpus)
    result.roles = suggest_roles(result.conditions, layouts)
    result.findings.extend(_advice(spec, result.roles, layouts))
    result.job = _job(result.roles, job_name or job_name_from(config_name), image, launch)
    return result


def _advice(spec: ClusterSpec, roles: list[SuggestedRole],
            layouts: Mapping[str, ComponentLayout]) -> list[Finding]:
    out = []
    for i, role in enumerate(roles):
        if role.conditions.hardware:
            what = ", ".join(f"{n} {t}" for t, n in role.conditions.hardware)
            out.append(Finding(
                code="HardwareNode", severity=Severity.info, path=f"spec.roles[{i}]",
                message=f"role {role.name} (node rank{'s' if role.workers > 1 else ''} "
                        f"{format_ranks(role.node_ranks)}) must run on the machine(s) wired to the "
                        f"robots ({what} per node)",
                hint="pin it with nodeSelector (Kubernetes) and check the robot settings in "
                     "hardware.configs"))
        for label, path in role.conditions.python:
            out.append(Finding(
                code="PythonInImage", severity=Severity.info, path=f"spec.roles[{i}].image",
                message=f"RLinf runs workers of node group {label!r} with {path} "
                        f"(env_configs.python_interpreter_path)",
                hint=f"make sure role {role.name}'s image has {path}"))
    # Robot controllers run where hardware.configs say (controller_node_rank fields).
    controllers = {v for g in spec.node_groups for h in g.hardware for k, v in h.fields.items()
                   if str(k).endswith("controller_node_rank") and type(v) is int}
    placed = {r for c in layouts.values() for r in c.node_set}
    unplaced = [r for r in range(spec.num_nodes) if r not in controllers and r not in placed]
    if layouts and unplaced:
        out.append(Finding(
            code="NodeWithoutComponent", severity=Severity.warning,
            path="cluster.component_placement",
            message=f"no component runs on node rank{'s' if len(unplaced) > 1 else ''} "
                    f"{format_ranks(unplaced)}; those Workers would idle",
            hint="lower cluster.num_nodes or place a component there"))
    return out


def _job(roles: list[SuggestedRole], name: str, image: str,
         launch: Mapping[str, Any] | None) -> dict[str, Any]:
    launch = dict(launch or {})
    longest = max((len(r.name) + len(str(r.workers - 1)) + 2 for r in roles), default=0)
    name = name[: max(1, 63 - longest)].strip("-") or "rlinf"
    spec: dict[str, Any] = {"headRole": roles[0].name if roles else "node"}
    if launch.get("working_dir"):
        spec["workingDir"] = launch["working_dir"]
    if launch.get("rlinf"):
        spec["rlinf"] = {k: v for k, v in launch["rlinf"].items() if v not in (None, [], "")}
    spec["roles"] = []
    for role in roles:
        entry: dict[str, Any] = {"name": role.name, "workers": role.workers, "image": image,
                                 "resources": {"gpu": role.conditions.gpus}}
        spec["roles"].append(entry)
    spec["runScript"] = launch.get("run_script") or "python train.py\n"
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
    return doc  # tests check that it parses and passes preflight


# --- text --------------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render_text(p: Plan) -> str:
    """The human-readable plan ``rlark plan`` prints (tables, Findings, then the Job YAML)."""
    d = p.to_dict()
    out = [f"RLinf config: {p.source}"]
    if p.num_nodes is None:
        out.append("cluster.num_nodes: not usable (see Findings)")
    else:
        gpus = ("GPUs per node unknown" if p.gpus_per_node is None else
                f"{p.gpus_per_node} GPU{'s' if p.gpus_per_node != 1 else ''} per node"
                + (" (assumed; pass --gpus-per-node)" if p.gpus_assumed else ""))
        ranks = f"0-{p.num_nodes - 1}" if p.num_nodes > MAX_NODES else format_ranks(range(p.num_nodes))
        out.append(f"cluster.num_nodes = {p.num_nodes}: node ranks {ranks}, {gpus}")
    if d["node_group_details"]:
        out += ["", "Node groups (RLinf labels -> node ranks)"]
        rows = [["LABEL", "NODE RANKS", "RESOURCES", "ENV / PYTHON"]]
        for label, g in d["node_group_details"].items():
            envs = "; ".join(
                ", ".join([f"{k}={v}" for k, v in e["env_vars"].items()]
                          + ([f"python {e['python_interpreter_path']}"]
                             if e["python_interpreter_path"] else []))
                + f" (ranks {format_ranks(e['node_ranks'])})" for e in g["env_configs"])
            res = g["hardware_type"] or ("node (ignore_hardware)" if g["ignore_hardware"] else "node")
            rows.append([label, format_ranks(g["node_ranks"]), res, envs or "-"])
        out += _table(rows)
    if d["components"]:
        out += ["", "Components (where RLinf places them)"]
        rows = [["COMPONENT", "NODE GROUP", "NODE RANKS", "PROCESSES", "RESOURCE"]]
        for name, c in d["components"].items():
            rows.append([name or "''", c["node_group"], format_ranks(c["node_ranks"]),
                         str(c["processes"]), c["resource"]])
        out += _table(rows)
    if d["nodes"]:
        out += ["", "Nodes"]
        rows = [["RANKS", "ROLE", "COMPONENTS", "GPUS", "RUN CONDITIONS"]]
        runs: list[tuple[list[int], list[str]]] = []
        for node in d["nodes"]:
            row = [node["role"] or "-", ", ".join(node["components"]) or "-", str(node["gpus"]),
                   node["conditions"]]
            if runs and runs[-1][1] == row and runs[-1][0][-1] == node["node_rank"] - 1:
                runs[-1][0].append(node["node_rank"])
            else:
                runs.append(([node["node_rank"]], row))
        rows += [[format_ranks(ranks), *row] for ranks, row in runs]
        out += _table(rows)
    if p.roles:
        out += ["", "Suggested roles (in this order RLark gives them node ranks; the first is the "
                    "head role)"]
        rows = [["ROLE", "WORKERS", "NODE RANKS", "GPU", "NODE GROUPS"]]
        for r in d["roles"]:
            rows.append([r["name"], str(r["workers"]), format_ranks(r["node_ranks"]), str(r["gpu"]),
                         ", ".join(r["node_groups"]) or "-"])
        out += _table(rows)
    if p.findings:
        out += ["", "Findings"]
        for f in p.findings:
            out.append(f"  {f.severity.value:7} {f.code}: {f.message}")
            if f.hint:
                out.append(f"          fix: {f.hint}")
    if p.job is not None:
        out += ["", "Job (ready to edit: set the image, resources and mounts; save it where you ran "
                    "this command, then `rlark check` and `rlark submit` it)", "---"]
        out.append(dump_yaml(p.job).rstrip())
    return "\n".join(out) + "\n"


__all__ = ["DEFAULT_IMAGE", "dump_yaml", "Plan", "RankConditions", "SuggestedRole", "job_name_from",
           "launch_settings", "plan", "rank_conditions", "render_text", "role_name",
           "suggest_roles"]
