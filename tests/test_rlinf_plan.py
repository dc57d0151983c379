"""``plan`` (pure): node ranks, components, suggested roles and Job for configs written here."""

from __future__ import annotations

import yaml

from rlark.findings import Severity, has_errors
from rlark.preflight import check_job
from rlark.ranks import plan_workers
from rlark.rlinf_config.check import check_config
from rlark.rlinf_config.cluster import parse_cluster, resolve_placements
from rlark.rlinf_config.plan import (
    RankConditions,
    job_name_from,
    launch_settings,
    plan,
    render_text,
    role_name,
    suggest_roles,
)
from rlark.rlinf_config.ranks import format_ranks
from rlark.spec import parse_job

# RLinf's own example from ClusterConfig's docstring (rlinf/scheduler/cluster/config.py):
# A800 training nodes, 4090 rollout nodes, two Franka robots, agents placed per node.
HETERO = {
    "cluster": {
        "num_nodes": 18,
        "component_placement": {
            "actor": {"node_group": "a800", "placement": "0-63"},
            "rollout": {"node_group": "4090", "placement": "0-63"},
            "env": {"node_group": "franka", "placement": "0-1"},
            "agent": {"node_group": "node", "placement": "0-1:0-199,2-3:200-399"},
        },
        "node_groups": [
            {"label": "a800", "node_ranks": "0-7", "env_configs": [
                {"node_ranks": "0-7", "python_interpreter_path": "/opt/venv/openpi/bin/python3",
                 "env_vars": [{"GLOO_SOCKET_IFNAME": "eth0"}]}]},
            {"label": "4090", "node_ranks": "8-15", "env_configs": [
                {"node_ranks": "8-15", "env_vars": [{"GLOO_SOCKET_IFNAME": "eth1"}]}]},
            {"label": "franka", "node_ranks": "16-17", "hardware": {"type": "Franka", "configs": [
                {"robot_ip": "10.10.10.1", "node_rank": 16, "camera_serials": ["3221"]},
                {"robot_ip": "10.10.10.2", "node_rank": 17, "camera_serials": ["3222"]}]}},
        ],
    }
}


def test_heterogeneous_cluster_plan():
    p = plan(HETERO, gpus_per_node=8, config_name="hetero")
    d = p.to_dict()
    assert not has_errors(p.findings), p.findings
    assert d["num_nodes"] == 18 and d["node_ranks"] == list(range(18))
    assert d["node_groups"] == {"a800": list(range(8)), "4090": list(range(8, 16)),
                                "franka": [16, 17]}
    comps = d["components"]
    assert comps["actor"] == {"node_group": "a800", "node_ranks": list(range(8)), "processes": 64,
                              "resource": "Accelerator", "placement_entry": "actor"}
    assert comps["rollout"]["node_ranks"] == list(range(8, 16))
    assert comps["env"]["node_ranks"] == [16, 17] and comps["env"]["resource"] == "Franka"
    assert comps["agent"]["node_ranks"] == [0, 1, 2, 3] and comps["agent"]["processes"] == 400
    assert [(r["name"], r["workers"], r["node_ranks"], r["gpu"]) for r in d["roles"]] == [
        ("a800", 8, list(range(8)), 8), ("4090", 8, list(range(8, 16)), 8),
        ("franka", 2, [16, 17], 0)]
    details = d["node_group_details"]
    assert details["a800"]["env_configs"][0]["env_vars"] == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert details["franka"]["hardware_type"] == "Franka"
    codes = {f.code for f in p.findings}
    assert {"HardwareNode", "PythonInImage"} <= codes


def test_suggested_job_gets_exactly_the_ranks_node_groups_expect():
    p = plan(HETERO, gpus_per_node=8, config_name="hetero")
    job, problems = parse_job(p.job)
    assert job is not None, problems
    assert [f for f in check_job(job) if f.severity == Severity.error] == []
    assert job.spec.head_role == "a800"
    rank_role = {w.node_rank: w.role for w in plan_workers(job)}
    for label, ranks in p.node_groups().items():
        assert {rank_role[r] for r in ranks} == {role_name([label])}
    assert [f.code for f in check_config(job, HETERO) if f.severity != Severity.info] == []


def test_head_role_is_first_even_when_rank_zero_is_a_robot():
    cfg = {"cluster": {"num_nodes": 2, "component_placement": {
        "env": {"node_group": "franka", "placement": 0},
        "actor": {"node_group": "gpu", "placement": "0-3"}},
        "node_groups": [
            {"label": "franka", "node_ranks": 0, "hardware": {"type": "Franka", "configs": [
                {"node_rank": 0, "robot_ip": "10.0.0.1"}]}},
            {"label": "gpu", "node_ranks": 1}]}}
    p = plan(cfg, gpus_per_node=4)
    assert [(r.name, r.first_rank, r.conditions.gpus) for r in p.roles] == [
        ("franka", 0, 0), ("gpu", 1, 4)]
    assert p.job["spec"]["headRole"] == "franka"


def test_gpus_per_node_is_assumed_from_the_placements():
    p = plan({"cluster": {"num_nodes": 8, "component_placement": {
        "actor": "24-63", "inference": "16-23", "rollout,reward": "0-15"}}})
    assert p.gpus_per_node == 8 and p.gpus_assumed
    assert [f.code for f in p.findings] == ["AssumedGpusPerNode"]
    assert p.components["actor"].node_ranks == [3, 4, 5, 6, 7]
    assert p.components["inference"].node_ranks == [2]


def test_process_with_several_gpus_makes_the_assumption_grow():
    p = plan({"cluster": {"num_nodes": 2, "component_placement": {"actor": "0-7:0-1"}}})
    assert p.gpus_per_node == 4 and p.components["actor"].node_ranks == [0, 1]


def test_cpu_only_config_plans_cpu_only_roles():
    cfg = {"cluster": {"num_nodes": 3, "component_placement": {
        "actor": {"node_group": "head", "placement": 0},
        "rollout": {"node_group": "pool", "placement": "0-1"},
        "env": {"node_group": "pool", "placement": "0-1:0-3"}},
        "node_groups": [{"label": "head", "node_ranks": 0, "ignore_hardware": True},
                        {"label": "pool", "node_ranks": "1-2", "ignore_hardware": True}]}}
    p = plan(cfg, config_name="quickstart")
    assert p.gpus_per_node == 0
    assert [(r["name"], r["workers"], r["gpu"]) for r in p.to_dict()["roles"]] == [
        ("head", 1, 0), ("pool", 2, 0)]
    assert p.components["env"].process_nodes == (1, 1, 2, 2)


def test_gpu_ranges_on_cpu_only_nodes_are_errors():
    p = plan({"cluster": {"num_nodes": 1, "component_placement": {"actor": "0-7"}}},
             gpus_per_node=0)
    assert [f.code for f in p.findings] == ["PlacementNeedsMoreAccelerators"]
    assert "--gpus-per-node" in p.findings[0].hint


def test_refused_config_still_plans_what_it_can():
    cfg = {"cluster": {"num_nodes": 2, "component_placement": {
        "env": {"node_group": "franka", "placement": 0}},
        "node_groups": [{"label": "franka", "node_ranks": 1, "hardware": {
            "type": "Franka", "configs": [{"node_rank": 1, "robot_ip": "ROBOT_IP"}]}}]}}
    p = plan(cfg)
    assert [f.code for f in p.findings if f.severity == Severity.error] == ["RobotIpInvalid"]
    assert p.node_groups() == {"franka": [1]} and p.job is not None


def test_unusable_cluster_gives_no_job():
    p = plan({"cluster": {"num_nodes": "two", "component_placement": {}}})
    assert p.job is None and p.num_nodes is None
    assert [f.code for f in p.findings] == ["NumNodesInvalid"]
    assert plan(None).findings == [] and plan(None).job is None
    assert [f.code for f in plan({"actor": {}}).findings] == ["RLinfClusterMissing"]


def test_suggest_roles_splits_on_conditions_and_renames_clashes():
    a, b = RankConditions(("gpu",), gpus=8), RankConditions(("gpu",), gpus=0)
    roles = suggest_roles([a, a, b, a])
    assert [(r.name, r.first_rank, r.last_rank) for r in roles] == [
        ("gpu", 0, 1), ("gpu-2", 2, 2), ("gpu-3", 3, 3)]
    assert [r.name for r in suggest_roles([RankConditions()] * 2)] == ["node"]


def test_role_named_like_a_misplaced_component_is_renamed():
    cfg = {"cluster": {"num_nodes": 2, "component_placement": {"actor": {"node_group": "actor",
                                                                         "placement": "0-15"}},
                       "node_groups": [{"label": "actor", "node_ranks": "0-1"},
                                       {"label": "b", "node_ranks": 1}]}}
    p = plan(cfg, gpus_per_node=8)
    assert [r.name for r in p.roles] == ["actor-nodes", "actor-b"]


def test_names():
    assert role_name(["A800", "Roll_out"]) == "a800-roll-out"
    assert role_name([]) == "node"
    assert job_name_from("qwen2.5-1.5b-grpo-megatron") == "qwen2-5-1-5b-grpo-megatron"
    assert job_name_from("4090_ppo") == "rlinf-4090-ppo"
    assert len(job_name_from("x" * 99)) == 40
    assert format_ranks([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_long_names_still_make_valid_worker_names():
    p = plan(HETERO, gpus_per_node=8, config_name="a" * 60, job_name="b" * 63)
    job, problems = parse_job(p.job)
    assert job is not None and [f for f in check_job(job) if f.severity == Severity.error] == []


def test_text_rendering_has_every_section_and_a_job_that_parses():
    p = plan(HETERO, gpus_per_node=8, config_name="hetero")
    text = render_text(p)
    for heading in ("Node groups", "Components", "Nodes", "Suggested roles", "Findings", "Job"):
        assert heading in text
    assert "0-3    a800    actor, agent" in text  # nodes table compresses rank runs
    job_yaml = text.split("\n---\n", 1)[1]
    assert yaml.safe_load(job_yaml) == p.job


def test_launch_settings_inside_an_rlinf_checkout(tmp_path):
    repo = tmp_path / "RLinf"
    (repo / "rlinf").mkdir(parents=True)
    config_dir = repo / "examples" / "embodiment" / "config"
    config_dir.mkdir(parents=True)
    s = launch_settings(str(config_dir), "maniskill_ppo", ["a.b=1"], str(tmp_path))
    assert s["working_dir"] == "RLinf" and s["entry_known"]
    assert s["rlinf"] == {"configDir": "examples/embodiment/config", "configName": "maniskill_ppo",
                          "overrides": ["a.b=1"]}
    assert 'EMBODIED_PATH="$PWD/examples/embodiment"' in s["run_script"]
    assert ("python examples/embodiment/train_embodied_agent.py --config-path "
            '"$PWD/examples/embodiment/config" --config-name maniskill_ppo a.b=1') in s["run_script"]


def test_launch_settings_elsewhere(tmp_path):
    (tmp_path / "cfg").mkdir()
    s = launch_settings(str(tmp_path / "cfg"), "mine", [], str(tmp_path))
    assert s["working_dir"] == "." and not s["entry_known"]
    assert s["rlinf"]["configDir"] == "cfg"
    outside = launch_settings("/etc", "mine", [], str(tmp_path))
    assert outside["rlinf"]["configDir"] == "/etc"


def test_resolve_placements_keeps_the_first_of_a_twice_placed_component():
    spec, _ = parse_cluster({"num_nodes": 2, "component_placement": {"actor": "0", "actor,x": "1"}})
    layouts, findings = resolve_placements(spec, [0, 0])
    assert layouts["actor"].node_ranks == [0] and layouts["x"].node_ranks == [1]
    assert [f.code for f in findings] == ["ComponentPlacedTwice"]


def test_huge_clusters_are_refused_or_planned():
    """10**12 nodes are refused before any node is looked at; 10,000 are planned whole. How long
    these take: bench/huge_plan.py."""
    p = plan({"cluster": {"num_nodes": 10**12, "component_placement": {"a": "all"},
                          "node_groups": [{"label": "x", "node_ranks": "all"}]}})
    assert [f.code for f in p.findings] == ["NumNodesInvalid"] and p.job is None
    p = plan({"cluster": {"num_nodes": 10_000, "component_placement": {"a": "0-1000", "b": "all"},
                          "node_groups": [{"label": "x", "node_ranks": "all"}]}})
    assert [r.workers for r in p.roles] == [10_000]


def test_any_value_anywhere_gives_findings_not_exceptions():
    """Random values at every place of a real-shaped cluster section: plan and check never raise."""
    import copy
    import random

    rng = random.Random(7)
    values = [None, 0, -1, 3, 2.5, True, "", "all", "0-1", "x", [0, 1], ["a"], {}, {"k": 1},
              "0-1:0-3", "ROBOT_IP", "10.0.0.1", [{"node_rank": 0}], "1-0"]
    paths = [("num_nodes",), ("component_placement",), ("component_placement", "actor"),
             ("component_placement", "env"), ("component_placement", "env", "node_group"),
             ("component_placement", "env", "placement"), ("node_groups",), ("node_groups", 0),
             ("node_groups", 0, "node_ranks"), ("node_groups", 1, "hardware"),
             ("node_groups", 1, "hardware", "configs"), ("node_groups", 1, "hardware", "type"),
             ("node_groups", 1, "hardware", "configs", 0, "node_rank"),
             ("node_groups", 0, "env_configs"), ("node_groups", 0, "env_configs", 0, "env_vars"),
             ("node_groups", 0, "ignore_hardware"), ("profiling",)]
    job_doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "f"},
               "spec": {"headRole": "train", "runScript": "x", "roles": [
                   {"name": "train", "workers": 2, "image": "a:1", "resources": {"gpu": 2}},
                   {"name": "franka", "workers": 1, "image": "a:1"}]}}
    job, _ = parse_job(job_doc)
    base = HETERO["cluster"] | {"num_nodes": 3, "node_groups": [
        {"label": "train", "node_ranks": "0-1", "env_configs": [{"node_ranks": 0, "env_vars": [{"A": 1}]}]},
        {"label": "franka", "node_ranks": 2, "hardware": {"type": "Franka", "configs": [
            {"node_rank": 2, "robot_ip": "10.0.0.1"}]}}],
        "component_placement": {"actor": {"node_group": "train", "placement": "0-3"},
                                "env": {"node_group": "franka", "placement": 0}}}
    for _ in range(600):
        section = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(paths)
            node = section
            try:
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = copy.deepcopy(rng.choice(values))
            except (KeyError, IndexError, TypeError):
                continue
        p = plan({"cluster": section}, gpus_per_node=rng.choice([None, 0, 2]))
        p.to_dict()
        render_text(p)
        check_config(job, {"cluster": section})
