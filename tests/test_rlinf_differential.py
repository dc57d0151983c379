"""Differential tests: RLark's own reading of the ``cluster:`` section against RLinf 0.3.0's code.

RLark re-implements RLinf's parsing (it must work where RLinf is not installed); here the same
inputs go to both, and the verdicts and results must agree:

* ``ClusterConfig.from_dict_cfg`` vs :func:`rlark.rlinf_config.cluster.parse_cluster` on every
  composed cluster section of the corpus and on a table of hand-written edge cases: accepted by
  both (with the same expanded node groups) or refused by both;
* ``parse_rank_config`` vs :func:`rlark.rlinf_config.ranks.parse_ranks` on a table and on
  random expressions;
* ``ComponentPlacement._parse_rank_map`` and the Node/Flexible placement strategies (with real
  ``NodeInfo``/``NodeGroupInfo`` objects) vs :func:`resolve_placements` on placement strings and
  node layouts: refused by both, or the same node for every process.

Skipped only when ``rlinf.scheduler`` cannot be imported.
"""

from __future__ import annotations

import copy
import json
import random
import sys

import pytest

from rlark.rlinf_config.cluster import ClusterSpec, PlacementEntry, parse_cluster, resolve_placements
from rlark.rlinf_config.ranks import RankError, parse_ranks
from tests.rlinf_corpus import corpus_or_skip, load_oracle, plan_corpus

pytestmark = [pytest.mark.rlinf, pytest.mark.filterwarnings("ignore")]

rlinf_scheduler = pytest.importorskip("rlinf.scheduler", reason="rlinf is not installed here")

from omegaconf import OmegaConf  # noqa: E402
from rlinf.scheduler.cluster.config import ClusterConfig  # noqa: E402
from rlinf.scheduler.cluster.node import NodeGroupInfo, NodeInfo  # noqa: E402
from rlinf.scheduler.cluster.utils import parse_rank_config  # noqa: E402
from rlinf.scheduler.hardware import HardwareInfo, HardwareResource  # noqa: E402
from rlinf.scheduler.placement.placement import ComponentPlacement, MultiNodeGroupResolver  # noqa: E402


def rlinf_verdict(section) -> tuple[bool, dict | None, str]:
    try:
        cfg = ClusterConfig.from_dict_cfg(OmegaConf.create(section))
    except Exception as exc:  # RLinf refuses with AssertionError, ValueError, TypeError...
        return False, None, f"{type(exc).__name__}: {exc}"
    groups: dict = {}
    for g in cfg.node_groups or []:
        groups.setdefault(g.label, list(g.node_ranks))
    return True, groups, ""


def rlark_verdict(section) -> tuple[bool, dict | None, list[str]]:
    spec, findings = parse_cluster(section)
    assert all(f.severity.value == "error" for f in findings)
    if findings:
        return False, None, [f.message for f in findings]
    groups: dict = {}
    for g in spec.node_groups:
        groups.setdefault(g.label, list(g.node_ranks))
    return True, groups, []


def assert_same(section) -> None:
    ok_rlinf, groups_rlinf, why_rlinf = rlinf_verdict(copy.deepcopy(section))
    ok_rlark, groups_rlark, why_rlark = rlark_verdict(copy.deepcopy(section))
    assert ok_rlark == ok_rlinf, (f"RLinf {'accepts' if ok_rlinf else 'refuses: ' + why_rlinf}; "
                                  f"RLark {'accepts' if ok_rlark else 'refuses: ' + str(why_rlark)}; "
                                  f"section {json.dumps(section, default=str)}")
    if ok_rlinf:
        assert groups_rlark == groups_rlinf, section


# --- the corpus ----------------------------------------------------------------------------------


def test_every_corpus_cluster_section_gets_the_same_verdict():
    corpus = corpus_or_skip()
    oracle = load_oracle(corpus)
    run = plan_corpus(str(corpus))
    compared = 0
    for rel, entry in oracle.items():
        plan = run.plans[rel]
        if plan.config is None:
            continue
        section = plan.config["cluster"]
        assert section == entry["cluster"], rel  # RLark composed what RLinf's oracle saw
        assert_same(section)
        assert rlinf_verdict(section)[0] == entry["rlinf_valid"], rel
        compared += 1
    assert compared == sum(1 for e in oracle.values() if e["composed"])


# --- hand-written edge cases ----------------------------------------------------------------------

BASE = {
    "num_nodes": 4,
    "component_placement": {"actor": "0-3"},
    "node_groups": [
        {"label": "gpu", "node_ranks": "0-1"},
        {"label": "sim", "node_ranks": "2-3", "ignore_hardware": True},
    ],
}


def with_(path: str, value, base=BASE):
    """BASE with ``path`` (``node_groups.0.node_ranks``) set; ``...`` deletes the key."""
    data = copy.deepcopy(base)
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = data
    for k in keys[:-1]:
        node = node[k]
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


FRANKA = {"type": "Franka", "configs": [{"node_rank": 2, "robot_ip": "10.0.0.2"}]}
CASES = {
    "base": BASE,
    "num_nodes 0": with_("num_nodes", 0),
    "num_nodes -1": with_("num_nodes", -1),
    "num_nodes text": with_("num_nodes", "4"),
    "num_nodes float": with_("num_nodes", 4.0),
    "num_nodes bool": with_("num_nodes", True),
    "num_nodes null": with_("num_nodes", None),
    "no num_nodes": with_("num_nodes", ...),
    "no component_placement": with_("component_placement", ...),
    "component_placement null": with_("component_placement", None),
    "node_groups null": with_("node_groups", None),
    "node_groups empty list": with_("node_groups", []),
    "node_groups empty map": with_("node_groups", {}),
    "node_groups empty text": with_("node_groups", ""),
    "node_groups text": with_("node_groups", "abc"),
    "node_groups number": with_("node_groups", 5),
    "node_groups map": with_("node_groups", {"gpu": {"node_ranks": 0}}),
    "node_group not a map": with_("node_groups", [5]),
    "no label": with_("node_groups.0.label", ...),
    "no node_ranks": with_("node_groups.0.node_ranks", ...),
    "unknown group field": with_("node_groups.0.nodes", "0-1"),
    "label cluster": with_("node_groups.0.label", "cluster"),
    "label node": with_("node_groups.0.label", "node"),
    "label Node": with_("node_groups.0.label", "Node"),
    "label number": with_("node_groups.0.label", 4090),
    "duplicate labels (checked later)": with_("node_groups.1.label", "gpu"),
    "ranks all": with_("node_groups.0.node_ranks", "all"),
    "ranks ALL": with_("node_groups.0.node_ranks", "ALL"),
    "ranks int": with_("node_groups.0.node_ranks", 1),
    "ranks spaced": with_("node_groups.0.node_ranks", " 0 - 1 "),
    "ranks reversed": with_("node_groups.0.node_ranks", "1-0"),
    "ranks beyond num_nodes": with_("node_groups.0.node_ranks", "0-4"),
    "ranks negative": with_("node_groups.0.node_ranks", "-1"),
    "ranks empty parts": with_("node_groups.0.node_ranks", "0,,1"),
    "ranks empty": with_("node_groups.0.node_ranks", ""),
    "ranks comma": with_("node_groups.0.node_ranks", ","),
    "ranks yaml list": with_("node_groups.0.node_ranks", [0, 1]),
    "ranks three parts": with_("node_groups.0.node_ranks", "0-1-2"),
    "ranks word": with_("node_groups.0.node_ranks", "a"),
    "ranks underscore": with_("node_groups.0.node_ranks", "0_1"),
    "ranks float": with_("node_groups.0.node_ranks", 1.0),
    "ranks bool": with_("node_groups.0.node_ranks", True),
    "ranks null": with_("node_groups.0.node_ranks", None),
    "ranks overlap other group": with_("node_groups.1.node_ranks", "1-3"),
    "env not a list": with_("node_groups.0.env_configs", {"node_ranks": 0}),
    "env item not a map": with_("node_groups.0.env_configs", [5]),
    "env no node_ranks": with_("node_groups.0.env_configs", [{}]),
    "env ok": with_("node_groups.0.env_configs",
                    [{"node_ranks": "0", "env_vars": [{"A": "1"}], "python_interpreter_path": "/p"}]),
    "env all": with_("node_groups.0.env_configs", [{"node_ranks": "all"}]),
    "env outside group": with_("node_groups.0.env_configs", [{"node_ranks": "2"}]),
    "env overlapping": with_("node_groups.0.env_configs", [{"node_ranks": "0"}, {"node_ranks": "0-1"}]),
    "env vars not a list": with_("node_groups.0.env_configs", [{"node_ranks": 0, "env_vars": {"A": 1}}]),
    "env var two keys": with_("node_groups.0.env_configs",
                              [{"node_ranks": 0, "env_vars": [{"A": 1, "B": 2}]}]),
    "env var text": with_("node_groups.0.env_configs", [{"node_ranks": 0, "env_vars": ["A=1"]}]),
    "env var repeated across entries": with_("node_groups.0.env_configs", [
        {"node_ranks": "0", "env_vars": [{"A": "1"}]}, {"node_ranks": "1", "env_vars": [{"A": "2"}]}]),
    "env python number": with_("node_groups.0.env_configs",
                               [{"node_ranks": 0, "python_interpreter_path": 5}]),
    "env unknown field": with_("node_groups.0.env_configs", [{"node_ranks": 0, "python": "/p"}]),
    "env gap in group": with_("node_groups.0", {"label": "gpu", "node_ranks": "0,2",
                                                "env_configs": [{"node_ranks": "1"}]}),
    "hardware ok": with_("node_groups.1", {"label": "sim", "node_ranks": "2-3", "hardware": FRANKA}),
    "hardware not a map": with_("node_groups.1.hardware", "Franka"),
    "hardware with ignore_hardware": with_("node_groups.1.hardware", FRANKA),
    "hardware no configs": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                   "hardware": {"type": "Franka"}}),
    "hardware unknown type": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                     "hardware": {"type": "franka", "configs": []}}),
    "hardware configs null": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                     "hardware": {"type": "Franka", "configs": None}}),
    "hardware configs empty map": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                          "hardware": {"type": "Franka", "configs": {}}}),
    "hardware configs text": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                     "hardware": {"type": "Franka", "configs": "ab"}}),
    "robot ip placeholder": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2, "robot_ip": "ROBOT_IP"}]}}),
    "robot ip number": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2, "robot_ip": 167772162}]}}),
    "robot ip v6": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2, "robot_ip": "::1"}]}}),
    "robot node_rank text": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": "2"}]}}),
    "robot outside group": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 0}]}}),
    "robot duplicate config": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2}, {"node_rank": 2}]}}),
    "two robots one node": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2, "robot_ip": "10.0.0.1"},
                                      {"node_rank": 2, "robot_ip": "10.0.0.2"}]}}),
    "robot unknown field": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Franka", "configs": [{"node_rank": 2, "ip": "10.0.0.1"}]}}),
    "robot camera_serials number": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                           "hardware": {"type": "Franka", "configs": [
                                                               {"node_rank": 2, "camera_serials": 5}]}}),
    "robot camera_serials text": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                         "hardware": {"type": "Franka", "configs": [
                                                             {"node_rank": 2, "camera_serials": "ab"}]}}),
    "hardware and hardware_type": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                          "hardware": FRANKA, "hardware_type": "Franka"}),
    "hardware_type alone": with_("node_groups.1", {"label": "s", "node_ranks": "2-3",
                                                   "hardware_type": "Accelerator"}),
    "ignore_hardware text": with_("node_groups.1.ignore_hardware", "false"),
    "same robot in two groups": {**BASE, "node_groups": [
        {"label": "a", "node_ranks": "2", "hardware": FRANKA},
        {"label": "b", "node_ranks": "2-3", "hardware": FRANKA}]},
    "dual franka bad ip": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "DualFranka", "configs": [{"node_rank": 2, "left_robot_ip": "LEFT_ROBOT_IP"}]}}),
    "dual franka ok": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "DualFranka", "configs": [{"node_rank": 2, "left_robot_ip": "10.0.0.1",
                                           "right_robot_ip": "10.0.0.2"}]}}),
    "gim arm bad variant": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "GimArm", "configs": [{"node_rank": 2, "arm_variant": "x"}]}}),
    "turtle2": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "Turtle2", "configs": [{"node_rank": 3}]}}),
    "dosw1 serials number": with_("node_groups.1", {"label": "s", "node_ranks": "2-3", "hardware": {
        "type": "DOSW1", "configs": [{"node_rank": 3, "camera_serials": 5}]}}),
    "profiling nsight": with_("profiling", {"backend": "nsight", "worker_groups": "ActorGroup",
                                            "steps": [1, 2], "flags": "--stats",
                                            "options": {"t": "cuda"}}),
    "profiling not a map": with_("profiling", "nsight"),
    "profiling no backend": with_("profiling", {"enabled": True}),
    "profiling unknown backend": with_("profiling", {"backend": "perf"}),
    "profiling unknown field": with_("profiling", {"backend": "nsight", "bogus": 1}),
    "profiling negative step": with_("profiling", {"backend": "nsight", "steps": [-1]}),
    "profiling steps text": with_("profiling", {"backend": "nsight", "steps": "1"}),
    "profiling worker_groups number": with_("profiling", {"backend": "nsight", "worker_groups": 5}),
    "profiling empty flag": with_("profiling", {"backend": "nsight", "flags": [""]}),
    "profiling options list": with_("profiling", {"backend": "nsight", "options": [1]}),
    "profiling rocprof args": with_("profiling", {"backend": "rocprof_sys", "args": {"x": 1}}),
    "profiling rocprof env text": with_("profiling", {"backend": "rocprof_sys", "env": "A=1"}),
    "extra cluster keys are ignored": with_("auto_scheduler", True),
    "num_nodes 1 group all": {"num_nodes": 1, "component_placement": {"x": 0},
                              "node_groups": [{"label": "r", "node_ranks": "all",
                                               "env_configs": [{"node_ranks": "all",
                                                                "env_vars": [{"OMP": 32}]}]}]},
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_case_gets_the_same_verdict(name):
    assert_same(CASES[name])


def test_the_table_has_both_verdicts():
    verdicts = [rlinf_verdict(copy.deepcopy(c))[0] for c in CASES.values()]
    assert sum(verdicts) >= 20 and len(verdicts) - sum(verdicts) >= 50


# --- rank expressions -----------------------------------------------------------------------------

RANK_CASES = ["all", "ALL", "0", "0-3", " 1 - 2 ", "3-1", "0,2,4-5", ",", "", "a", "-1", "1-", "-",
              "0-1-2", "[0, 1]", "1.0", "True", "None", "0_1", "+1", "0--1", "  ", "1,1,1", "5-9"]


@pytest.mark.parametrize("available", [None, [0, 1, 2, 3], [0, 2], [], [5, 6, 7]])
@pytest.mark.parametrize("text", RANK_CASES)
def test_rank_expressions_agree(text, available):
    compare_ranks(text, available)


def compare_ranks(text, available) -> None:
    try:
        expected = parse_rank_config(text, available, "node")
    except (AssertionError, ValueError, IndexError):
        expected = None
    try:
        got = parse_ranks(text, available, "node")
    except RankError:
        got = None
    assert got == expected, (text, available)


def test_random_rank_expressions_agree():
    rng = random.Random(1234)
    alphabet = "0123456789-, aAlL"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
        available = rng.choice([None, [0, 1, 2, 3], list(range(8)), [2, 5]])
        compare_ranks(text, available)


# --- placements -------------------------------------------------------------------------------------


def rlinf_nodes(gpus: list[int]) -> list:
    return [
        NodeInfo(node_labels=[], node_rank=r, ray_id=f"node{r}", node_ip="127.0.0.1", num_cpus=1,
                 python_interpreter_path=sys.executable, default_env_vars={}, env_vars={},
                 hardware_resources=[HardwareResource(
                     type="Accelerator", infos=[HardwareInfo(type="Accelerator", model="H100")] * g)]
                 if g else [])
        for r, g in enumerate(gpus)
    ]


def rlinf_placement(text: str, gpus: list[int]) -> list[int] | None:
    """Node rank of every process, sorted, as RLinf's own placement code decides; None when RLinf
    refuses the placement."""
    group = NodeGroupInfo(label="cluster", nodes=rlinf_nodes(gpus))
    resolver = MultiNodeGroupResolver([group])
    parser = ComponentPlacement.__new__(ComponentPlacement)  # its parsing methods need no Cluster
    try:
        rank_map = parser._parse_rank_map(text, resolver)
        if resolver.hardware_types is None:
            strategy = parser._gen_node_placement(rank_map, [group], ["x"])
            flat = [n.node_rank for n in group.nodes]
            return sorted(flat[i] for i in strategy._node_ranks)  # IndexError as in get_placement
        strategy = parser._gen_resource_placement(rank_map, [group], ["x"])
        nodes = []
        for hw in strategy._hardware_ranks_list:
            strategy._verify_hw_ranks_for_process(hw, resolver)
            nodes.append(resolver.get_node_by_hardware_rank(sorted(hw)[0]).node_rank)
        assert resolver.hardware_resource_count > 0
        return sorted(nodes)
    except (AssertionError, ValueError, IndexError):
        return None


def rlark_placement(text: str, gpus: list[int]) -> list[int] | None:
    spec = ClusterSpec(num_nodes=len(gpus),
                       placements=(PlacementEntry("x", ("x",), text, "cluster.component_placement.x"),))
    layouts, findings = resolve_placements(spec, gpus)
    if findings:
        return None
    return sorted(layouts["x"].process_nodes)


PLACEMENTS = ["all", "0", "0-3", "0-7", "4-7", "0-1:0-3", "0-3:0-1", "0-1,2-3", "2-3,0-1",
              "0-1:0-3,2-3:4-7", "0-1:0-3,2-3", "0-1:0,2-3:1", "0-1:1-2", "0-3:0-2",
              "0-1:0-1,2-3:3-4", "0:0-3", "a", "0-1:all", "0-1:0:1", "", "0-1:0-3,1-2:4-5",
              " 0 - 1 ", "0-15:0-1", "0-7:0", "0-3:0-7,4-7:8-15", "0-2:0", "1:0", "0-1:0-1,2:2",
              "all:0-3", "0-5:0-2"]
LAYOUTS = [[8], [4, 4], [0, 0], [2], [1, 1, 1, 1], [0], [8, 0], [3, 5], [0, 0, 0, 0]]


@pytest.mark.parametrize("gpus", LAYOUTS, ids=lambda g: "gpus" + "-".join(map(str, g)))
def test_placements_agree(gpus):
    for text in PLACEMENTS:
        assert rlark_placement(text, gpus) == rlinf_placement(text, gpus), (text, gpus)


def test_random_placements_agree():
    rng = random.Random(99)
    alphabet = "0123456789-,:"
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        gpus = rng.choice(LAYOUTS)
        assert rlark_placement(text, gpus) == rlinf_placement(text, gpus), (text, gpus)
