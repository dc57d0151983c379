"""The ``cluster:`` section of an RLinf config, read the way RLinf 0.3.0 reads it.

Long because: it mirrors RLinf's own parser of the section (``ClusterConfig`` and its node
group, environment, hardware and robot configs) and its placement rules check for check, and a
differential test (tests/test_rlinf_differential.py) holds it to RLinf's verdicts;
split, the copy would no longer read side by side with the code it follows.

Two layers, both pure (plain Python data in, dataclasses and Findings out):

* :func:`parse_cluster` is RLark's own re-implementation of
  ``rlinf.scheduler.ClusterConfig.from_dict_cfg`` (``rlinf/scheduler/cluster/config.py``, with
  ``NodeGroupConfig``, ``NodeGroupEnvConfig``, ``NodeHardwareConfig`` and the robot configs in
  ``rlinf/scheduler/hardware/``): it reports an *error* Finding exactly where RLinf would refuse
  the section, and nothing where RLinf accepts it. A differential test feeds the same sections to
  RLinf's own code and compares the verdicts.
* :func:`resolve_groups` and :func:`resolve_placements` follow what RLinf does once the Ray
  cluster exists (``rlinf/scheduler/cluster/node.py`` ``NodeGroupInfo``,
  ``rlinf/scheduler/placement/placement.py`` ``ComponentPlacement`` and the ``Node``/``Flexible``
  placement strategies): which node groups exist, how many placement resources each has, and on
  which node ranks every component's processes land.

RLark never imports RLinf: it must work where RLinf is not installed.

Facts these functions encode (RLinf 0.3.0):

* Node ranks are ``RLINF_NODE_RANK`` values, ``0 .. num_nodes-1``.
* A node group's placement resources are, in this order: the robots of its ``hardware.type``
  (one per entry of ``hardware.configs`` on that node); the node's accelerators, when any node of
  the group has some and ``ignore_hardware`` is false; otherwise each node is one resource.
* ``cluster`` (all nodes, accelerators when present) and ``node`` (all nodes, one resource each)
  are built-in groups; their labels are reserved.
* Resource ranks in a placement count *inside* the chosen node group(s), from 0, nodes in rank
  order; several groups (``node_group: "a,b"``) are numbered one after the other.
* A YAML list is not a list to RLinf where it calls ``str()`` (``node_ranks: [0, 1]``,
  ``node_group: [a, b]``): write ``"0,1"`` / ``"a,b"``.
"""

from __future__ import annotations

import re

import bisect
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlark.findings import Finding, Severity
from rlark.rlinf_config.ranks import RankError, format_ranks, parse_ranks

#: Labels RLinf reserves for its built-in groups (``NodeGroupInfo.RESERVED_LABELS``).
RESERVED_LABELS = ("cluster", "node")
DEFAULT_GROUP = "cluster"
NODE_GROUP = "node"
#: RLinf's default hardware type (``Hardware.DEFAULT_HW_TYPE``): GPUs/NPUs of a node.
ACCELERATOR = "Accelerator"

_CLUSTER_REQUIRED = ("num_nodes", "component_placement")
_NODE_GROUP_FIELDS = ("label", "node_ranks", "env_configs", "hardware", "hardware_type",
                      "ignore_hardware")
_NODE_GROUP_REQUIRED = ("label", "node_ranks")
_ENV_CONFIG_FIELDS = ("node_ranks", "env_vars", "python_interpreter_path")
_HARDWARE_FIELDS = ("type", "configs")
#: Robot hardware types RLinf 0.3.0 registers, with the fields of each config dataclass
#: (``rlinf/scheduler/hardware/robots/*.py``); ``node_rank`` is the only required one.
ROBOT_FIELDS: dict[str, tuple[str, ...]] = {
    "Franka": ("node_rank", "robot_ip", "camera_serials", "camera_type", "gripper_type",
               "gripper_connection", "controller_node_rank", "disable_validate"),
    "DualFranka": ("node_rank", "left_robot_ip", "right_robot_ip", "left_camera_serials",
                   "right_camera_serials", "base_camera_serials", "camera_type",
                   "base_camera_type", "left_camera_type", "right_camera_type",
                   "left_gripper_type", "right_gripper_type", "left_gripper_connection",
                   "right_gripper_connection", "left_controller_node_rank",
                   "right_controller_node_rank"),
    "Turtle2": ("node_rank",),
    "GimArm": ("node_rank", "can_interface", "arm_variant", "camera_serials", "camera_type",
               "enable_gripper", "gripper_type", "controller_node_rank", "disable_validate"),
    "DOSW1": ("node_rank", "robot_url", "left_arm_port", "right_arm_port", "left_lead_port",
              "right_lead_port", "camera_serials"),
}
#: Fields RLinf validates with ``ipaddress.ip_address`` when set.
ROBOT_IP_FIELDS = {"Franka": ("robot_ip",), "DualFranka": ("left_robot_ip", "right_robot_ip")}
#: Fields that ``list()`` is applied to when truthy (so a truthy non-iterable is refused).
_LISTED_FIELDS = {"Franka": ("camera_serials",), "GimArm": ("camera_serials",),
                  "DualFranka": ("left_camera_serials", "right_camera_serials",
                                 "base_camera_serials")}
#: Profiling backends (``AcceleratorManager.profile_backend_register``) and their fields.
PROFILING_FIELDS: dict[str, tuple[str, ...]] = {
    "nsight": ("backend", "enabled", "worker_groups", "steps", "output_dir", "options", "flags"),
    "rocprof_sys": ("backend", "enabled", "worker_groups", "steps", "output_dir", "args", "env"),
}

_REJECTS = "RLinf 0.3.0 refuses the config"
#: Largest cluster RLark plans or checks (RLinf has no limit; no real cluster comes near it).
MAX_NODES = 10_000


# --- data ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvConfig:
    """One ``env_configs`` entry of a node group: software settings for some of its nodes."""

    node_ranks: tuple[int, ...]
    env_vars: tuple[tuple[str, str], ...] = ()
    python_interpreter_path: str | None = None
    #: node_ranks as a set (filled in by __post_init__)
    rank_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank_set", frozenset(self.node_ranks))


@dataclass(frozen=True)
class HardwareEntry:
    """One entry of ``hardware.configs``: a robot attached to node ``node_rank``."""

    node_rank: int
    fields: Mapping[str, Any]
    index: int = 0  # position in hardware.configs


@dataclass(frozen=True)
class NodeGroup:
    """A ``cluster.node_groups`` entry as RLinf understands it (ranks expanded)."""

    label: str
    node_ranks: tuple[int, ...]
    path: str
    hardware_type: str | None = None  # hardware.type, or the hardware_type field
    hardware: tuple[HardwareEntry, ...] = ()
    ignore_hardware: bool = False
    env_configs: tuple[EnvConfig, ...] = ()
    #: node_ranks as a set (filled in by __post_init__)
    rank_set: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank_set", frozenset(self.node_ranks))

    def env_vars_for(self, rank: int) -> dict[str, str]:
        """Environment RLinf gives workers it places through this group on node ``rank``."""
        out: dict[str, str] = {}
        for env in self.env_configs:
            if rank in env.rank_set:
                out.update(dict(env.env_vars))
        return out

    def python_for(self, rank: int) -> str | None:
        """The ``python_interpreter_path`` RLinf uses on node ``rank`` for this group, if any."""
        return next((e.python_interpreter_path for e in self.env_configs
                     if rank in e.rank_set and e.python_interpreter_path is not None), None)

    def hardware_on(self, rank: int) -> int:
        """How many ``hardware.configs`` entries name node ``rank``."""
        return sum(1 for h in self.hardware if h.node_rank == rank)


@dataclass(frozen=True)
class PlacementEntry:
    """One ``component_placement`` entry, as written: ``"actor,rollout": "0-7"``."""

    key: str
    components: tuple[str, ...]
    value: Any
    path: str


@dataclass(frozen=True)
class ClusterSpec:
    """A ``cluster:`` section RLinf would accept (``num_nodes`` > 0, groups parsed)."""

    num_nodes: int
    node_groups: tuple[NodeGroup, ...] = ()
    placements: tuple[PlacementEntry, ...] = ()
    placement_is_mapping: bool = True

    @property
    def components(self) -> list[str]:
        """Component names in ``component_placement`` order (a name placed twice appears twice)."""
        return [c for e in self.placements for c in e.components]

    def groups_of(self, rank: int) -> list[NodeGroup]:
        """The node groups that contain node ``rank``, in config order."""
        return [g for g in self.node_groups if rank in g.rank_set]


@dataclass(frozen=True)
class ResolvedGroup:
    """A node group as RLinf builds it once the nodes are known (``NodeGroupInfo``).

    ``counts[i]`` is the number of placement resources on ``node_ranks[i]`` when
    ``hardware_type`` is set; with ``hardware_type`` None each node is one resource.
    """

    label: str
    node_ranks: tuple[int, ...]
    hardware_type: str | None
    counts: tuple[int, ...]
    ignore_hardware: bool = False
    #: running totals of counts: the first local resource rank past each node
    _ends: tuple[int, ...] = field(init=False, repr=False, compare=False)

    @property
    def resource_count(self) -> int:
        return len(self.node_ranks) if self.hardware_type is None else sum(self.counts)

    @property
    def resource_name(self) -> str:
        return "node" if self.hardware_type is None else self.hardware_type

    def __post_init__(self) -> None:
        ends, total = [], 0
        for count in self.counts:
            total += count
            ends.append(total)
        object.__setattr__(self, "_ends", tuple(ends))

    def node_of(self, local_rank: int) -> int:
        """Node rank holding resource ``local_rank`` of this group.

        Raises:
            IndexError: the group has fewer resources.
        """
        if self.hardware_type is None:
            return self.node_ranks[local_rank]
        i = bisect.bisect_right(self._ends, local_rank)  # first node whose resources end after it
        if local_rank < 0 or i >= len(self.node_ranks):
            raise IndexError(local_rank)
        return self.node_ranks[i]


@dataclass(frozen=True)
class ComponentLayout:
    """Where one RLinf component's processes run."""

    name: str
    entry: str  # the component_placement key it came from
    node_group: str  # label(s) as RLinf reads them, comma-joined; "cluster" when none is given
    resource: str  # "Accelerator", "node" or a robot type
    processes: int
    process_nodes: tuple[int, ...]  # node rank of each process, in process-rank order
    resource_ranks: tuple[int, ...]  # resource ranks used, counted inside the node group(s)
    #: process_nodes as a set, and sorted (filled in by __post_init__)
    node_set: frozenset[int] = field(init=False, repr=False, compare=False)
    _node_ranks: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_set", frozenset(self.process_nodes))
        object.__setattr__(self, "_node_ranks", tuple(sorted(self.node_set)))

    @property
    def node_ranks(self) -> list[int]:
        """The node ranks the component runs on, ascending."""
        return list(self._node_ranks)


# --- helpers ---------------------------------------------------------------------------------------


def _err(code: str, path: str, message: str, hint: str) -> Finding:
    return Finding(code=code, severity=Severity.error, path=path, message=message, hint=hint)


def hydra_key(path: str) -> str:
    """A Finding path (``cluster.node_groups[1].hardware.configs[0].robot_ip``) as a Hydra
    override key (``cluster.node_groups.1.hardware.configs.0.robot_ip``): Hydra's override
    grammar has no ``[i]`` indexing; list items are addressed with dotted indices."""
    return re.sub(r"\[(\d+)\]", r".\1", path)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _iterate(value: Any) -> list[Any] | None:
    """What ``for x in value`` yields in RLinf for a YAML value (a mapping yields its keys), or
    None when the value is not iterable (RLinf raises TypeError)."""
    if isinstance(value, Mapping):
        return list(value.keys())
    if isinstance(value, (list, tuple, str)):
        return list(value)
    return None


def _arg_check(value: Mapping, fields: Sequence[str], required: Sequence[str], path: str,
               what: str) -> list[Finding]:
    """RLinf's ``dataclass_arg_check``: required fields present, no unknown fields."""
    out = []
    keys = [str(k) for k in value.keys()]
    for name in required:
        if name not in keys:
            out.append(_err("RLinfFieldMissing", f"{path}.{name}",
                            f"{path}.{name} is missing: {what} requires it ({_REJECTS})",
                            f"add {name}"))
    for key in keys:
        if key not in fields:
            out.append(_err("RLinfFieldUnknown", f"{path}.{key}",
                            f"{path}.{key}: {what} has no field {key!r} ({_REJECTS})",
                            f"remove it or fix its spelling; valid fields: {', '.join(fields)}"))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int)  # bool is an int too, as for RLinf's isinstance check


# --- parse: the mirror of ClusterConfig.from_dict_cfg --------------------------------------------


def parse_cluster(section: Any, path: str = "cluster") -> tuple[ClusterSpec | None, list[Finding]]:
    """Read a resolved ``cluster:`` section (plain dicts/lists/scalars).

    Returns ``(spec, findings)``. ``findings`` holds one error per reason RLinf 0.3.0's
    ``ClusterConfig.from_dict_cfg`` (rlinf/scheduler/cluster/config.py) would refuse the section,
    and is empty exactly when RLinf accepts it. ``spec`` is None when the section is too broken to
    plan with (no valid ``num_nodes``); otherwise it holds every node group whose label and ranks
    could be read, so a config refused only for, say, a placeholder robot IP can still be planned.
    Never raises.
    """
    findings: list[Finding] = []
    if not isinstance(section, Mapping):
        findings.append(_err(
            "ClusterSectionInvalid", path,
            f"{path} = {_show(section)} is not a mapping ({_REJECTS})",
            "write cluster: {num_nodes: N, component_placement: {...}}"))
        return None, findings
    for name in _CLUSTER_REQUIRED:
        if name not in section:
            findings.append(_err(
                "RLinfFieldMissing", f"{path}.{name}",
                f"{path}.{name} is missing; RLinf's ClusterConfig requires it ({_REJECTS})",
                "add cluster.num_nodes (the number of nodes) and cluster.component_placement"))
    if section.get("profiling") is not None:
        findings.extend(_check_profiling(section["profiling"], f"{path}.profiling"))

    num_nodes = section.get("num_nodes")
    #: the node count when it is a positive integer (True is an int too: refused)
    count: int | None = num_nodes if type(num_nodes) is int and num_nodes > 0 else None
    num_ok = count is not None
    if count is not None and count > MAX_NODES:
        findings.append(_err(
            "NumNodesInvalid", f"{path}.num_nodes",
            f"{path}.num_nodes = {num_nodes}: RLark plans and checks at most {MAX_NODES} nodes",
            "check the value; no RLark Job runs that many Workers"))
        return None, findings
    groups: list[NodeGroup] = []
    if section.get("node_groups") is not None:
        groups, group_findings = _parse_node_groups(section["node_groups"], num_nodes,
                                                    f"{path}.node_groups")
        findings.extend(group_findings)
    if "num_nodes" in section and not num_ok:
        findings.append(_err(
            "NumNodesInvalid", f"{path}.num_nodes",
            f"{path}.num_nodes = {_show(num_nodes)} is not a positive integer ({_REJECTS})",
            "set it to the number of nodes (RLark Workers) the run uses, e.g. 2"))
    if count is None:
        return None, findings
    placement = section.get("component_placement")
    entries: list[PlacementEntry] = []
    if isinstance(placement, Mapping):
        for key, value in placement.items():
            entries.append(PlacementEntry(
                key=str(key), components=tuple(c.strip() for c in str(key).split(",")),
                value=value, path=f"{path}.component_placement.{key}"))
    spec = ClusterSpec(num_nodes=count, node_groups=tuple(groups), placements=tuple(entries),
                       placement_is_mapping=isinstance(placement, Mapping))
    return spec, findings


def _check_profiling(value: Any, path: str) -> list[Finding]:
    """``ClusterConfig.__post_init__`` profiling checks and ``ProfileConfig`` normalisation."""
    if not isinstance(value, Mapping):
        return [_err("ProfilingInvalid", path, f"{path} = {_show(value)} is not a mapping "
                     f"({_REJECTS})", "write profiling: {backend: nsight, ...}")]
    backend = str(value.get("backend", ""))
    if not backend or backend not in PROFILING_FIELDS:
        return [_err("ProfilingInvalid", f"{path}.backend",
                     f"{path}.backend = {_show(value.get('backend'))} is not a known profiling "
                     f"backend ({_REJECTS})", f"use one of {sorted(PROFILING_FIELDS)}")]
    out = _arg_check(value, PROFILING_FIELDS[backend], (), path, f"the {backend} profiling config")
    if out:
        return out
    wg = value.get("worker_groups")
    if wg is not None and not isinstance(wg, (str, list, tuple)):
        out.append(_err("ProfilingInvalid", f"{path}.worker_groups",
                        f"{path}.worker_groups = {_show(wg)} is not a string or a list ({_REJECTS})",
                        "list worker group names, e.g. [ActorGroup]"))
    steps = value.get("steps")
    if steps is not None:
        bad = not isinstance(steps, (list, tuple))
        if not bad:
            try:
                bad = any(int(s) < 0 for s in steps)
            except (TypeError, ValueError):
                bad = True
        if bad:
            out.append(_err("ProfilingInvalid", f"{path}.steps",
                            f"{path}.steps = {_show(steps)} is not a list of step numbers >= 0 "
                            f"({_REJECTS})", "write steps: [10, 20]"))
    if backend == "nsight":
        flags = value.get("flags")
        if flags is not None:
            items = [flags] if isinstance(flags, str) else flags
            if not isinstance(items, (list, tuple)) or any(str(f) == "" for f in items):
                out.append(_err("ProfilingInvalid", f"{path}.flags",
                                f"{path}.flags = {_show(flags)} must be a string or a list of "
                                f"non-empty strings ({_REJECTS})", "write flags: [--stats]"))
        if value.get("options") is not None and not isinstance(value["options"], Mapping):
            out.append(_err("ProfilingInvalid", f"{path}.options",
                            f"{path}.options = {_show(value['options'])} is not a mapping "
                            f"({_REJECTS})", "write options: {t: cuda,nvtx}"))
    else:
        for name in ("args", "env"):
            if value.get(name) is not None and not isinstance(value[name], Mapping):
                out.append(_err("ProfilingInvalid", f"{path}.{name}",
                                f"{path}.{name} = {_show(value[name])} is not a mapping "
                                f"({_REJECTS})", f"write {name}: {{KEY: value}}"))
    return out


def _parse_node_groups(value: Any, num_nodes: Any,
                       path: str) -> tuple[list[NodeGroup], list[Finding]]:
    findings: list[Finding] = []
    items = _iterate(value)
    if items is None:
        return [], [_err("NodeGroupInvalid", path, f"{path} = {_show(value)} is not a list of node "
                         f"groups ({_REJECTS})", "write node_groups: [{label: ..., node_ranks: ...}]")]
    # num_nodes is used as range(num_nodes) before RLinf checks its type (bool counts as int).
    all_nodes = range(num_nodes) if _is_int(num_nodes) and num_nodes <= MAX_NODES else None
    groups: list[NodeGroup] = []
    hardware_owner: dict[tuple[int, str], str] = {}
    for i, item in enumerate(items):
        gpath = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            findings.append(_err(
                "NodeGroupInvalid", gpath, f"{gpath} = {_show(item)} is not a mapping ({_REJECTS})",
                "each node group is {label: NAME, node_ranks: \"a-b\"}; check the '-' before it"))
            continue
        problems = _arg_check(item, _NODE_GROUP_FIELDS, _NODE_GROUP_REQUIRED, gpath, "a node group")
        if problems:
            findings.extend(problems)
            continue
        label = str(item["label"])
        if label in RESERVED_LABELS:
            findings.append(_err(
                "NodeGroupLabelReserved", f"{gpath}.label",
                f"{gpath}.label = {label!r} is reserved by RLinf's scheduler ({_REJECTS})",
                "choose another label; 'cluster' (all nodes) and 'node' (one resource per node) "
                "already exist and can be used in component_placement as they are"))
        hw_type, hw_entries, hw_findings = _parse_hardware(item, gpath)
        findings.extend(hw_findings)
        env_raw, env_findings = _parse_env_structure(item.get("env_configs"), f"{gpath}.env_configs")
        findings.extend(env_findings)
        if all_nodes is None:
            continue  # RLinf fails on range(num_nodes) first; NumNodesInvalid says so
        try:
            ranks = parse_ranks(item["node_ranks"], all_nodes, "node")
        except RankError as exc:
            findings.append(_err(
                "NodeRanksInvalid", f"{gpath}.node_ranks",
                f"{gpath}.node_ranks = {_show(item['node_ranks'])}: {exc}; num_nodes is "
                f"{num_nodes}, so node ranks are 0-{num_nodes - 1} ({_REJECTS})",
                'write ranks as "a-b", "a,b,c" or "all" (a YAML list is not accepted), within '
                "0..num_nodes-1"))
            continue
        envs: list[EnvConfig] = []
        env_ok = not env_findings
        seen_ranks: set[int] = set()
        seen_keys: set[str] = set()
        for j, (env_ranks_raw, env_vars, python) in enumerate(env_raw):
            epath = f"{gpath}.env_configs[{j}].node_ranks"
            try:
                env_ranks = parse_ranks(env_ranks_raw, ranks, "node")
            except RankError as exc:
                findings.append(_err(
                    "EnvConfigInvalid", epath,
                    f"{epath} = {_show(env_ranks_raw)}: {exc}; the group's node ranks are "
                    f"{format_ranks(ranks)} ({_REJECTS})",
                    "use node ranks of this node group"))
                env_ok = False
                break
            outside = [r for r in env_ranks if r not in ranks]
            if outside:
                findings.append(_err(
                    "EnvConfigInvalid", epath,
                    f"{epath}: node ranks {format_ranks(outside)} are not in node group {label!r} "
                    f"(ranks {format_ranks(ranks)}) ({_REJECTS})",
                    "use node ranks of this node group"))
                env_ok = False
                break
            dup = [r for r in env_ranks if r in seen_ranks]
            if dup:
                findings.append(_err(
                    "EnvConfigInvalid", epath,
                    f"{epath}: node ranks {format_ranks(dup)} already have an env_configs entry in "
                    f"node group {label!r} ({_REJECTS})",
                    "give every node of the group at most one env_configs entry"))
                env_ok = False
                break
            seen_ranks.update(env_ranks)
            for key, _ in env_vars:
                if key in seen_keys:
                    findings.append(_err(
                        "EnvConfigInvalid", f"{gpath}.env_configs[{j}].env_vars",
                        f"{gpath}.env_configs[{j}].env_vars sets {key!r}, which another "
                        f"env_configs entry of node group {label!r} sets too ({_REJECTS})",
                        "set each variable in one env_configs entry of a node group"))
                    env_ok = False
                seen_keys.add(key)
            envs.append(EnvConfig(tuple(env_ranks), tuple(env_vars), python))
        for entry in hw_entries:
            hpath = f"{gpath}.hardware.configs[{entry.index}].node_rank"
            if entry.node_rank not in ranks:
                findings.append(_err(
                    "HardwareRankOutsideGroup", hpath,
                    f"{hpath}: this {hw_type} config names node_rank {entry.node_rank}, which is not "
                    f"in node group {label!r} (node ranks {format_ranks(ranks)}) ({_REJECTS})",
                    f"set node_rank to the rank of the node the {hw_type} is attached to, and list "
                    "that rank in the group's node_ranks"))
                continue
            owner = hardware_owner.setdefault((entry.node_rank, str(hw_type)), label)
            if owner != label:
                findings.append(_err(
                    "HardwareDefinedTwice", hpath,
                    f"{hpath}: node {entry.node_rank} has {hw_type} configs in node groups "
                    f"{owner!r} and {label!r} ({_REJECTS})",
                    "describe each robot in one node group"))
        groups.append(NodeGroup(
            label=label, node_ranks=tuple(ranks), path=gpath, hardware_type=hw_type,
            hardware=tuple(hw_entries), ignore_hardware=bool(item.get("ignore_hardware", False)),
            env_configs=tuple(envs) if env_ok else ()))
    return groups, findings


def _parse_hardware(group: Mapping, gpath: str) -> tuple[str | None, list[HardwareEntry], list[Finding]]:
    """``NodeGroupConfig.__post_init__`` hardware part and ``NodeHardwareConfig``."""
    hw = group.get("hardware")
    declared = group.get("hardware_type")
    path = f"{gpath}.hardware"
    if hw is None:
        return (None if declared is None else str(declared)), [], []
    if not isinstance(hw, Mapping):
        return None, [], [_err("HardwareInvalid", path, f"{path} = {_show(hw)} is not a mapping "
                               f"({_REJECTS})", "write hardware: {type: Franka, configs: [...]}")]
    problems = _arg_check(hw, _HARDWARE_FIELDS, _HARDWARE_FIELDS, path, "a node group's hardware")
    if problems:
        return None, [], problems
    findings: list[Finding] = []
    hw_type = str(hw["type"])
    fields = ROBOT_FIELDS.get(hw_type)
    if fields is None:
        return hw_type, [], [_err(
            "HardwareInvalid", f"{path}.type",
            f"{path}.type = {hw_type!r} is not a hardware type RLinf 0.3.0 knows ({_REJECTS})",
            f"use one of {sorted(ROBOT_FIELDS)} (names are case sensitive); accelerators need no "
            "hardware entry")]
    configs = _iterate(hw["configs"])
    if configs is None:
        return hw_type, [], [_err("HardwareInvalid", f"{path}.configs",
                                  f"{path}.configs = {_show(hw['configs'])} is not a list "
                                  f"({_REJECTS})", "write configs: [{node_rank: N, ...}]")]
    entries: list[HardwareEntry] = []
    seen: dict[str, int] = {}
    for k, cfg in enumerate(configs):
        cpath = f"{path}.configs[{k}]"
        if not isinstance(cfg, Mapping):
            findings.append(_err("HardwareInvalid", cpath, f"{cpath} = {_show(cfg)} is not a "
                                 f"mapping ({_REJECTS})", "write {node_rank: N, ...}"))
            continue
        problems = _arg_check(cfg, fields, ("node_rank",), cpath, f"a {hw_type} config")
        if problems:
            findings.extend(problems)
            continue
        canon = json.dumps({str(a): b for a, b in cfg.items()}, sort_keys=True, default=str)
        if canon in seen:
            findings.append(_err("HardwareInvalid", cpath, f"{cpath} repeats {path}.configs"
                                 f"[{seen[canon]}] ({_REJECTS})", "remove the duplicate"))
        seen.setdefault(canon, k)
        node_rank = cfg["node_rank"]
        if not _is_int(node_rank):
            findings.append(_err("HardwareInvalid", f"{cpath}.node_rank",
                                 f"{cpath}.node_rank = {_show(node_rank)} is not an integer "
                                 f"({_REJECTS})", "write the node rank as a number, e.g. 1"))
            continue
        for name in ROBOT_IP_FIELDS.get(hw_type, ()):
            ip = cfg.get(name)
            if ip is None:
                continue
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                findings.append(_err(
                    "RobotIpInvalid", f"{cpath}.{name}",
                    f"{cpath}.{name} = {_show(ip)} is not an IP address; RLinf's {hw_type} config "
                    f"requires one ({_REJECTS})",
                    f"fill in the IP address of the robot controller (or override "
                    f"{hydra_key(f'{cpath}.{name}')}=<ip>)"))
        for name in _LISTED_FIELDS.get(hw_type, ()):
            val = cfg.get(name)
            if val and _iterate(val) is None:
                findings.append(_err("HardwareInvalid", f"{cpath}.{name}",
                                     f"{cpath}.{name} = {_show(val)} is not a list ({_REJECTS})",
                                     f"write {name}: [\"...\"]"))
        if hw_type == "DOSW1" and cfg.get("camera_serials") is not None \
                and _iterate(cfg["camera_serials"]) is None:
            findings.append(_err("HardwareInvalid", f"{cpath}.camera_serials",
                                 f"{cpath}.camera_serials = {_show(cfg['camera_serials'])} is not a "
                                 f"list ({_REJECTS})", "write camera_serials: [\"...\"]"))
        if hw_type == "GimArm" and cfg.get("arm_variant", "gim_arm_xl") not in ("gim_arm",
                                                                                 "gim_arm_xl"):
            findings.append(_err("HardwareInvalid", f"{cpath}.arm_variant",
                                 f"{cpath}.arm_variant = {_show(cfg.get('arm_variant'))} is not "
                                 f"'gim_arm' or 'gim_arm_xl' ({_REJECTS})",
                                 "use gim_arm or gim_arm_xl"))
        entries.append(HardwareEntry(node_rank=node_rank, fields=dict(cfg), index=k))
    if declared is not None:
        findings.append(_err(
            "HardwareInvalid", f"{gpath}.hardware_type",
            f"{gpath}: hardware_type must not be set together with hardware ({_REJECTS})",
            "remove hardware_type; hardware.type sets it"))
    if group.get("ignore_hardware", False):
        findings.append(_err(
            "HardwareInvalid", f"{gpath}.ignore_hardware",
            f"{gpath}: ignore_hardware is true but the group describes hardware ({_REJECTS})",
            "remove one of them"))
    return hw_type, entries, findings


def _parse_env_structure(value: Any, path: str) -> tuple[list[tuple[Any, list, str | None]], list[Finding]]:
    """``NodeGroupConfig``/``NodeGroupEnvConfig`` structure checks (ranks are parsed later)."""
    if value is None:
        return [], []
    if not isinstance(value, (list, tuple)):
        return [], [_err("EnvConfigInvalid", path, f"{path} = {_show(value)} is not a list "
                         f"({_REJECTS})", "write env_configs: [{node_ranks: ..., env_vars: [...]}] "
                         "(a '-' before node_ranks)")]
    out: list[tuple[Any, list, str | None]] = []
    findings: list[Finding] = []
    for j, item in enumerate(value):
        epath = f"{path}[{j}]"
        if not isinstance(item, Mapping):
            findings.append(_err("EnvConfigInvalid", epath, f"{epath} = {_show(item)} is not a "
                                 f"mapping ({_REJECTS})", "write {node_ranks: ..., env_vars: [...]}"))
            continue
        problems = _arg_check(item, _ENV_CONFIG_FIELDS, ("node_ranks",), epath, "an env_configs entry")
        if problems:
            findings.extend(problems)
            continue
        env_vars: list[tuple[str, str]] = []
        raw_vars = item.get("env_vars")
        if raw_vars is not None:
            if not isinstance(raw_vars, (list, tuple)):
                findings.append(_err("EnvConfigInvalid", f"{epath}.env_vars",
                                     f"{epath}.env_vars = {_show(raw_vars)} is not a list "
                                     f"({_REJECTS})", "write env_vars: [{NAME: value}] (with '-')"))
                continue
            for k, var in enumerate(raw_vars):
                if not isinstance(var, Mapping) or len(var) != 1:
                    findings.append(_err(
                        "EnvConfigInvalid", f"{epath}.env_vars[{k}]",
                        f"{epath}.env_vars[{k}] = {_show(var)} must be a mapping with exactly one "
                        f"NAME: value ({_REJECTS})", "write one '- NAME: value' per variable"))
                    continue
                (name, val), = var.items()
                env_vars.append((str(name), str(val)))
        python = item.get("python_interpreter_path")
        out.append((item["node_ranks"], env_vars, None if python is None else str(python)))
    return out, findings


# --- runtime: node groups and placements --------------------------------------------------------


def node_group_findings(spec: ClusterSpec) -> list[Finding]:
    """What RLinf refuses only once the cluster starts (``NodeProbe``): two node groups with the
    same label (error), a group with no nodes (warning: RLinf drops it)."""
    out: list[Finding] = []
    seen: dict[str, str] = {}
    for g in spec.node_groups:
        if not g.node_ranks:
            out.append(Finding(
                code="NodeGroupEmpty", severity=Severity.warning, path=f"{g.path}.node_ranks",
                message=f"node group {g.label!r} has no node ranks; RLinf drops it, and placements "
                        "that name it fail", hint="give it node ranks or remove it"))
            continue
        if g.label in seen:
            out.append(_err(
                "NodeGroupLabelDuplicate", f"{g.path}.label",
                f"{g.path}.label = {g.label!r} is also the label of {seen[g.label]}; RLinf 0.3.0 "
                "stops when the cluster starts (labels must be unique)",
                "give every node group its own label"))
        seen.setdefault(g.label, g.path)
    return out


def robot_count(spec: ClusterSpec, rank: int, hw_type: str) -> int:
    """Robots of ``hw_type`` RLinf enumerates on node ``rank``: the ``hardware.configs`` entries
    naming that node in the groups that contain it (``ClusterConfig.get_node_hw_configs_by_rank``).
    Robots RLinf would add from environment variables such as ``ROBOT_IP`` are not counted."""
    return sum(g.hardware_on(rank) for g in spec.node_groups
               if g.hardware_type == hw_type and g.hardware and rank in g.rank_set)


def resolve_groups(spec: ClusterSpec, accelerators: Sequence[int]) -> list[ResolvedGroup]:
    """The node groups RLinf builds (``NodeProbe``): each configured group with at least one node,
    then the built-in ``cluster`` and ``node`` groups.

    Args:
        accelerators: accelerators (GPUs) on each node rank; missing entries count as 0.

    A group without ``hardware`` and without ``ignore_hardware`` uses accelerators as resources
    when any of its nodes has some (RLinf's ``NodeGroupInfo.__post_init__``), else one per node.
    """
    accel = [int(accelerators[r]) if r < len(accelerators) else 0 for r in range(spec.num_nodes)]

    def build(label: str, ranks: Sequence[int], declared: str | None, ignore: bool) -> ResolvedGroup:
        hw_type = declared
        if hw_type is None and not ignore and any(accel[r] > 0 for r in ranks):
            hw_type = ACCELERATOR
        if hw_type is None:
            counts = tuple(1 for _ in ranks)
        elif hw_type == ACCELERATOR:
            counts = tuple(accel[r] for r in ranks)
        else:
            counts = tuple(robot_count(spec, r, hw_type) for r in ranks)
        return ResolvedGroup(label, tuple(ranks), hw_type, counts, ignore)

    out = [build(g.label, g.node_ranks, g.hardware_type, g.ignore_hardware)
           for g in spec.node_groups if g.node_ranks]
    everything = range(spec.num_nodes)
    out.append(build(DEFAULT_GROUP, everything, None, False))
    out.append(build(NODE_GROUP, everything, None, True))
    return out


@dataclass
class _Problem:
    code: str
    message: str
    hint: str


def resolve_placements(
    spec: ClusterSpec,
    accelerators: Sequence[int],
    capacity_hint: str = "",
) -> tuple[dict[str, ComponentLayout], list[Finding]]:
    """Where every component of ``component_placement`` runs, as RLinf's ``ComponentPlacement``
    and its placement strategies decide (rlinf/scheduler/placement/placement.py, node.py,
    flexible.py).

    Args:
        accelerators: accelerators on each node rank (see :func:`resolve_groups`).
        capacity_hint: how to get more resources, for the Findings' hints (differs between
            ``rlark plan`` and ``rlark check``).

    Returns:
        ``({component: layout}, findings)``. Findings are errors: an unknown node group, a
        placement RLinf cannot parse, more resource ranks than the node group has
        (``PlacementNeedsMoreAccelerators``, ``PlacementBeyondNodes``,
        ``PlacementNeedsMoreHardware``), a process whose resources span nodes, a component placed
        twice (``ComponentPlacedTwice``). A component placed twice keeps its first layout.
    """
    findings = list(node_group_findings(spec))
    if not spec.placement_is_mapping:
        findings.append(_err(
            "PlacementInvalid", "cluster.component_placement",
            "cluster.component_placement is not a mapping of component names to placements; "
            "RLinf's ComponentPlacement cannot read it",
            'write component_placement: {actor: "0-7", rollout: {node_group: ..., placement: ...}}'))
        return {}, findings
    groups = resolve_groups(spec, accelerators)
    layouts: dict[str, ComponentLayout] = {}
    first_entry: dict[str, str] = {}
    for entry in spec.placements:
        result = _resolve_entry(entry, groups, spec, capacity_hint)
        if isinstance(result, _Problem):
            findings.append(_err(result.code, entry.path, result.message, result.hint))
            continue
        for name in entry.components:
            if name in first_entry:
                findings.append(_err(
                    "ComponentPlacedTwice", entry.path,
                    f"component {name!r} is placed by {entry.key!r} and already by "
                    f"{first_entry[name]!r}; RLinf 0.3.0 stops with 'Component {name} has "
                    "multiple placements defined'",
                    f"place {name!r} in exactly one component_placement entry"))
                continue
            first_entry[name] = entry.key
            layouts[name] = ComponentLayout(name=name, entry=entry.key, **result)
    return layouts, findings


def _find_group(groups: list[ResolvedGroup], label: str) -> ResolvedGroup | None:
    return next((g for g in groups if g.label == label), None)


def _cluster_group(groups: list[ResolvedGroup]) -> ResolvedGroup:
    """The group of every node (:data:`DEFAULT_GROUP`), which :func:`resolve_groups` always
    builds last."""
    group = _find_group(groups, DEFAULT_GROUP)
    if group is None:
        raise ValueError(f"no {DEFAULT_GROUP!r} node group among {[g.label for g in groups]}")
    return group


def _resolve_entry(entry: PlacementEntry, groups: list[ResolvedGroup], spec: ClusterSpec,
                   capacity_hint: str) -> dict | _Problem:
    names = list(entry.components)
    value = entry.value
    labels: list[str] | None = None
    if isinstance(value, Mapping):
        if "node_group" in value:
            raw = value["node_group"]
            if isinstance(raw, str):
                labels = [x.strip() for x in raw.split(",")] if "," in raw else [raw]
            else:
                labels = [str(raw)]  # RLinf reads a YAML list as one label: "['a', 'b']"
            chosen = []
            for label in labels:
                group = _find_group(groups, label)
                if group is None:
                    known = [g.label for g in groups]
                    hint = f"use one of {known}"
                    if isinstance(raw, (list, tuple)):
                        hint = (f'write node_group: "{",".join(str(x) for x in raw)}" - RLinf 0.3.0 '
                                "does not read a YAML list here")
                    return _Problem("UnknownNodeGroup",
                                    f"components {names}: node_group {label!r} is not a node group "
                                    "of this cluster", hint)
                chosen.append(group)
        else:
            chosen = [_cluster_group(groups)]
        if "placement" not in value:
            return _Problem("PlacementInvalid", f"components {names}: the entry has no 'placement'",
                            "add placement: \"<resource ranks>[:<process ranks>]\"")
        rank_map_str = value["placement"]
    else:
        chosen = [_cluster_group(groups)]
        rank_map_str = value
    return _resolve_rank_map(str(rank_map_str), chosen, labels, names, capacity_hint)


def _resolve_rank_map(text: str, groups: list[ResolvedGroup], labels: list[str] | None,
                      names: list[str], capacity_hint: str) -> dict | _Problem:
    """``ComponentPlacement._parse_rank_map`` + ``_rank_map_to_process_resources_map`` + the
    Node/Flexible placement strategies."""
    total = sum(g.resource_count for g in groups)
    typed = [g.hardware_type for g in groups if g.hardware_type is not None]
    # a node group without hardware: every resource is a node (RLinf's NodePlacementStrategy)
    types: list[str] | None = typed if len(typed) == len(groups) else None
    what = "node" if types is None else ", ".join(dict.fromkeys(types))
    group_text = ",".join(g.label for g in groups)
    where = f"node group {group_text!r}" if len(groups) == 1 else f"node groups {group_text!r}"

    def bad(message: str, hint: str = 'write "<resource ranks>[:<process ranks>]", e.g. "0-3" or '
            '"0-1:0-7"; resource ranks ascending, process ranks continuous') -> _Problem:
        return _Problem("PlacementInvalid", f"components {names}: placement {text!r}: {message}",
                        hint)

    rank_map: list[tuple[list[int], list[int]]] = []
    used_res: list[int] = []
    used_proc: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if part == "":
            continue
        pieces = part.split(":")
        if not 1 <= len(pieces) <= 2:
            return bad(f"{part!r} has more than one ':'")
        res_text = pieces[0].strip()
        try:
            if res_text.lower() == "all":
                resources = list(range(total))
            else:
                resources = parse_ranks(res_text, None, what)
        except RankError as exc:
            return bad(str(exc))
        if resources and res_text.lower() != "all" and resources[-1] >= total:
            return _capacity_problem(resources, total, groups, where, what, names, text,
                                     capacity_hint)
        if not resources:
            return bad(f"{part!r} names no resource ranks" + (
                f" ({where} has no {what} resources)" if total == 0 else ""))
        if set(resources) & set(used_res):
            return bad("resource ranks repeat")
        if used_res and resources[0] <= used_res[-1]:
            return bad("resource ranks must be in ascending order")
        used_res.extend(resources)
        if len(pieces) == 2:
            proc_text = pieces[1].strip()
            if proc_text == "all":
                return bad("process ranks (after ':') cannot be 'all'")
            try:
                processes = parse_ranks(proc_text, None, "process")
            except RankError as exc:
                return bad(str(exc))
        else:
            start = max(used_proc) + 1 if used_proc else 0
            processes = list(range(start, start + len(resources)))
        if not processes:
            return bad(f"{part!r} names no process ranks")
        if set(processes) & set(used_proc):
            return bad("process ranks repeat")
        if used_proc and processes[0] != used_proc[-1] + 1:
            return bad("process ranks must continue where the previous part stopped")
        used_proc.extend(processes)
        if len(processes) % len(resources) and len(resources) % len(processes):
            return bad(f"{len(processes)} processes cannot be spread evenly over "
                       f"{len(resources)} resources in {part!r}")
        rank_map.append((resources, processes))

    # process rank -> resource ranks
    proc_res: dict[int, list[int]] = {}
    for resources, processes in rank_map:
        if len(resources) >= len(processes):
            per = len(resources) // len(processes)
            for i, p in enumerate(processes):
                proc_res[p] = resources[i * per:(i + 1) * per]
        else:
            per = len(processes) // len(resources)
            for i, r in enumerate(resources):
                for j in range(per):
                    proc_res.setdefault(processes[i * per + j], []).append(r)
    if not proc_res:
        return bad("it places no process")
    order = sorted(proc_res)

    if types is None:  # NodePlacementStrategy
        flat: list[int] = []
        if labels is not None and len(groups) > 1:
            seen: set[int] = set()
            for g in groups:
                overlap = seen & set(g.node_ranks)
                if overlap:
                    return bad(f"node groups {group_text!r} share nodes {format_ranks(overlap)}; "
                               "node placement over several groups needs disjoint groups",
                               "use one node group, or groups without common nodes")
                seen.update(g.node_ranks)
        for g in groups:
            flat.extend(g.node_ranks)
        indices = []
        for p in order:
            if len(proc_res[p]) != 1:
                return bad(f"process {p} would use {len(proc_res[p])} nodes "
                           f"({format_ranks(proc_res[p])}); one process runs on one node",
                           "give each process at most one node (more processes than nodes is fine)")
            indices.append(proc_res[p][0])
        for idx in indices:
            if idx >= len(flat):
                return _capacity_problem([idx], len(flat), groups, where, what, names, text,
                                         capacity_hint)
        process_nodes = tuple(flat[i] for i in sorted(indices))
        resource = "node"
    else:  # FlexiblePlacementStrategy
        spans: list[tuple[int, int]] = []  # (global start, group index) per group
        start = 0
        for gi, g in enumerate(groups):
            spans.append((start, gi))
            start += g.resource_count

        def locate(hw_rank: int) -> tuple[int, int]:
            for (first, gi) in reversed(spans):
                if hw_rank >= first:
                    return gi, groups[gi].node_of(hw_rank - first)
            raise IndexError(hw_rank)

        placed: list[tuple[list[int], int]] = []
        for p in order:
            hw = sorted(proc_res[p])
            where_hw = [locate(h) for h in hw]
            nodes = {n for _, n in where_hw}
            if len(nodes) > 1:
                return bad(f"process {p} would use {what} ranks {format_ranks(hw)} on nodes "
                           f"{format_ranks(nodes)}; one process's resources must be on one node",
                           "use fewer resources per process, or more per node")
            kinds = {groups[gi].hardware_type for gi, _ in where_hw}
            if len(kinds) > 1:
                return bad(f"process {p} would mix hardware types {sorted(map(str, kinds))}")
            placed.append((hw, where_hw[0][1]))
        placed.sort(key=lambda x: x[0][0])
        process_nodes = tuple(n for _, n in placed)
        resource = what
    return dict(node_group=group_text if labels is not None else DEFAULT_GROUP,
                resource=resource, processes=len(order), process_nodes=process_nodes,
                resource_ranks=tuple(sorted(r for res, _ in rank_map for r in res)))


def _capacity_problem(resources: list[int], total: int, groups: list[ResolvedGroup], where: str,
                      what: str, names: list[str], text: str, capacity_hint: str) -> _Problem:
    nodes = sorted({r for g in groups for r in g.node_ranks})
    need = resources[-1] + 1
    have = f"has {total} {what} resource{'s' if total != 1 else ''}"
    detail = f"{where} (node ranks {format_ranks(nodes)}) {have}"
    if what == ACCELERATOR:
        code = "PlacementNeedsMoreAccelerators"
        per_node = ", ".join(f"rank {r}: {c}" for g in groups for r, c in zip(g.node_ranks, g.counts))
        detail += f" ({per_node})"
    elif what == "node":
        cpu_only = all(g.label not in (NODE_GROUP,) and not g.ignore_hardware for g in groups)
        if cpu_only:
            code = "PlacementNeedsMoreAccelerators"
            detail += ("; none of its nodes has accelerators, so RLinf counts one resource per node "
                       "and GPU ranks such as 0-7 do not exist")
        else:
            code = "PlacementBeyondNodes"
    else:
        code = "PlacementNeedsMoreHardware"
        detail += f" (one per {what} entry in hardware.configs)"
    hint = capacity_hint or "give the nodes more resources, or use fewer resource ranks"
    if code == "PlacementNeedsMoreHardware":
        hint = f"describe one {what} per robot in hardware.configs, or use fewer resource ranks"
    elif code == "PlacementBeyondNodes":
        hint = "use resource ranks below the group's node count, or add nodes to the group"
    return _Problem(code, f"components {names}: placement {text!r} needs {what} ranks up to "
                          f"{need - 1} ({need} resources), but {detail}", hint)


def iter_strings(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """Every string leaf of a plain config with its key path (``a.b[0].c``)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from iter_strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from iter_strings(v, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


__all__ = [
    "ACCELERATOR", "DEFAULT_GROUP", "NODE_GROUP", "RESERVED_LABELS", "ClusterSpec",
    "ComponentLayout", "EnvConfig", "HardwareEntry", "NodeGroup", "PlacementEntry",
    "ResolvedGroup", "iter_strings", "node_group_findings", "parse_cluster",
    "resolve_groups", "resolve_placements", "robot_count",
]
