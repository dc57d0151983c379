"""Table-driven tests for ``rlark check``'s RLinf checks (pure: a Job and a config, no I/O).

Every row is a minimal Job + RLinf config pair written here and the exact Findings (codes, with
repeats) it must give. Clean rows show the same check staying quiet when the Job is right.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from rlark.findings import Severity
from rlark.rlinf_config.check import check_config, is_placeholder
from rlark.spec import Job, RLinfRef, parse_job

SEVERITY = {
    "WorkersMismatch": "error", "RoleStraddlesNodeGroups": "warning",
    "RoleNamedLikeComponent": "warning", "PlacementNeedsMoreAccelerators": "error",
    "PlacementBeyondNodes": "error", "PlacementNeedsMoreHardware": "error",
    "PlacementInvalid": "error", "UnknownNodeGroup": "error", "ComponentPlacedTwice": "error",
    "NodeGroupLabelDuplicate": "error", "UnfilledPlaceholder": "error",
    "PathNotMounted": "warning", "ConfigEnvNotSet": "warning", "RLinfClusterMissing": "error",
    "NodeRanksInvalid": "error", "HardwareRankOutsideGroup": "error", "RobotIpInvalid": "error",
    "NumNodesInvalid": "error",
}


def job(*roles: tuple, head: str | None = None, mounts: list[str] = (),
        head_env: dict[str, str] | None = None) -> Job:
    """Roles as (name, workers, gpu); the first is the head role unless ``head`` says otherwise;
    ``mounts`` are mountPaths given to the first role."""
    doc: dict[str, Any] = {
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "t"},
        "spec": {"headRole": head or roles[0][0], "runScript": "python train.py", "roles": [
            {"name": n, "workers": w, "image": "docker.io/rlinf/rlinf:0.3.0",
             "resources": {"gpu": g}} for n, w, g in roles]},
    }
    doc["spec"]["roles"][0]["mounts"] = [
        {"name": f"m{i}", "type": "pvc", "source": f"claim{i}", "mountPath": p}
        for i, p in enumerate(mounts)]
    if head_env:
        head_role = next(r for r in doc["spec"]["roles"] if r["name"] == doc["spec"]["headRole"])
        head_role["env"] = [{"name": k, "value": v} for k, v in head_env.items()]
    parsed, problems = parse_job(doc)
    assert parsed is not None, problems
    return parsed


def cfg(num_nodes: int, placement: dict, groups: list | None = None, **extra) -> dict:
    cluster: dict[str, Any] = {"num_nodes": num_nodes, "component_placement": placement}
    if groups is not None:
        cluster["node_groups"] = groups
    return {"cluster": cluster, **extra}


GPU_SIM = [{"label": "gpu", "node_ranks": "0-1"},
           {"label": "sim", "node_ranks": "2-3", "ignore_hardware": True}]
GPU_SIM_PLACEMENT = {"actor,rollout": {"node_group": "gpu", "placement": "0-15"},
                     "env": {"node_group": "sim", "placement": "0-1:0-7"}}
THREE = [{"label": "gpu", "node_ranks": "0-1"}, {"label": "sim", "node_ranks": 2,
                                                 "ignore_hardware": True}]
THREE_PLACEMENT = {"actor": {"node_group": "gpu", "placement": "0-15"},
                   "rollout": {"node_group": "gpu", "placement": "0-15"},
                   "env": {"node_group": "sim", "placement": 0}}
FRANKA_GROUPS = [{"label": "train", "node_ranks": 0},
                 {"label": "franka", "node_ranks": "1-2", "hardware": {"type": "Franka", "configs": [
                     {"node_rank": 1, "robot_ip": "10.0.0.1"},
                     {"node_rank": 2, "robot_ip": "10.0.0.2"}]}}]
FRANKA_PLACEMENT = {"actor,rollout": {"node_group": "train", "placement": "0-7"},
                    "env": {"node_group": "franka", "placement": "0-1"}}
ENV_MISSING = ("InterpolationResolutionError: KeyError raised while resolving interpolation: "
               "\"Environment variable 'DATA_ROOT' not found\"")


@dataclass
class Row:
    id: str
    job: Job
    config: dict
    expect: list[str]  # codes, with repeats; [] = clean
    unresolved: dict = field(default_factory=dict)
    needles: tuple[str, ...] = ()  # text the first Finding's message + hint must contain


ROWS = [
    # --- Workers vs cluster.num_nodes
    Row("clean single node", job(("head", 1, 8)), cfg(1, {"actor,rollout": "0-7"}), []),
    Row("workers do not add up", job(("head", 1, 8), ("pool", 1, 8)),
        cfg(3, {"actor": "all"}), ["WorkersMismatch"],
        needles=("2 Workers", "head x1, pool x1", "num_nodes = 3", "add up to 3")),
    Row("too many workers", job(("head", 1, 0), ("pool", 4, 0)),
        cfg(2, {"actor": "all"}), ["WorkersMismatch"], needles=("5 Workers",)),
    # --- roles vs node groups
    Row("roles line up with node groups", job(("gpu", 2, 8), ("sim", 2, 0)),
        cfg(4, GPU_SIM_PLACEMENT, GPU_SIM), []),
    Row("role straddles two node groups", job(("head", 1, 8), ("pool", 3, 8)),
        cfg(4, GPU_SIM_PLACEMENT, GPU_SIM), ["RoleStraddlesNodeGroups"],
        needles=("pool", "ranks 1", "node group gpu", "ranks 2-3", "node group sim", "split")),
    Row("role straddles env_configs of one group", job(("head", 2, 1)),
        cfg(2, {"actor": {"node_group": "g", "placement": "0-1"}}, [
            {"label": "g", "node_ranks": "0-1", "env_configs": [
                {"node_ranks": 0, "env_vars": [{"NCCL_SOCKET_IFNAME": "eth0"}]},
                {"node_ranks": 1, "python_interpreter_path": "/opt/b/bin/python"}]}]),
        ["RoleStraddlesNodeGroups"], needles=("NCCL_SOCKET_IFNAME=eth0", "python /opt/b/bin/python")),
    Row("heterogeneous roles with robots", job(("train", 1, 8), ("franka", 2, 0)),
        cfg(3, FRANKA_PLACEMENT, FRANKA_GROUPS), []),
    Row("robot nodes in the GPU role", job(("train", 2, 8), ("franka", 1, 0)),
        cfg(3, FRANKA_PLACEMENT, FRANKA_GROUPS), ["RoleStraddlesNodeGroups"],
        needles=("1 Franka",)),
    # --- role names are not placements
    Row("one role per component", job(("actor", 1, 8), ("rollout", 1, 8), ("env", 1, 0)),
        cfg(3, THREE_PLACEMENT, THREE), ["RoleNamedLikeComponent", "RoleNamedLikeComponent"],
        needles=("role actor (node ranks 0)", "node ranks 0-1", "Role names place nothing")),
    Row("component-named roles where RLinf puts them", job(("actor", 2, 8), ("env", 1, 0)),
        cfg(3, THREE_PLACEMENT, THREE), []),
    # --- accelerators and ranks
    Row("placement needs more GPUs than the role has", job(("head", 1, 4)),
        cfg(1, {"actor,rollout": "0-7"}), ["PlacementNeedsMoreAccelerators"],
        needles=("0-7", "rank 0: 4", "spec.roles[0].resources.gpu = 4")),
    Row("GPU ranges on CPU-only Workers", job(("head", 1, 0)),
        cfg(1, {"actor": "0-7"}), ["PlacementNeedsMoreAccelerators"],
        needles=("none of its nodes has accelerators",)),
    Row("GPUs only on some roles", job(("head", 1, 8), ("pool", 1, 0)),
        cfg(2, {"actor": "0-15"}), ["PlacementNeedsMoreAccelerators"],
        needles=("rank 0: 8, rank 1: 0",)),
    Row("node group ranks beyond num_nodes", job(("head", 2, 0)),
        cfg(2, {"actor": "all"}, [{"label": "g", "node_ranks": "0-2"}]), ["NodeRanksInvalid"],
        needles=("0-2", "num_nodes is 2")),
    Row("node placement beyond the nodes", job(("head", 2, 0)),
        cfg(2, {"agent": {"node_group": "node", "placement": "0-2"}}), ["PlacementBeyondNodes"],
        needles=("node ranks 0-1", "2 node resources")),
    Row("robot ranks beyond hardware.configs", job(("train", 1, 8), ("franka", 2, 0)),
        cfg(3, {**FRANKA_PLACEMENT, "env": {"node_group": "franka", "placement": "0-2"}},
            FRANKA_GROUPS), ["PlacementNeedsMoreHardware"], needles=("2 Franka resources",)),
    Row("hardware rank outside its node group", job(("train", 1, 1), ("franka", 1, 0)),
        cfg(2, {"actor": {"node_group": "train", "placement": 0}}, [
            {"label": "train", "node_ranks": 0},
            {"label": "franka", "node_ranks": 1, "hardware": {"type": "Franka", "configs": [
                {"node_rank": 0, "robot_ip": "10.0.0.1"}]}}]), ["HardwareRankOutsideGroup"],
        needles=("node_rank 0", "'franka' (node ranks 1)")),
    # --- placeholders
    Row("robot IP placeholder", job(("train", 1, 8), ("franka", 2, 0)),
        cfg(3, FRANKA_PLACEMENT, [FRANKA_GROUPS[0], {**FRANKA_GROUPS[1], "hardware": {
            "type": "Franka", "configs": [{"node_rank": 1, "robot_ip": "ROBOT_IP"},
                                          {"node_rank": 2, "robot_ip": "10.0.0.2"}]}}]),
        ["RobotIpInvalid"], needles=("robot_ip", "ROBOT_IP", "not an IP address")),
    Row("placeholders elsewhere in the config", job(("head", 1, 8)),
        cfg(1, {"actor": "all"}, actor={"model": {"model_path": "/path/to/model",
                                                  "tokenizer_path": "/path/to/model"}},
            env={"target_ee_pose": "TARGET_EE_POSE", "camera_serials": ["ZED_SERIAL_1"]},
            runner={"experiment": "???"}),
        ["UnfilledPlaceholder"] * 4,
        needles=("actor.model.model_path", "/path/to/model", "also at actor.model.tokenizer_path")),
    Row("values that only look shouty", job(("head", 1, 8)),
        cfg(1, {"actor": "all"}, actor={"attention_backend": "FLASH_ATTN", "dtype": "BF16"},
            env={"camera": "D435", "scene": "OG", "robot": "DOSW1"}), []),
    # --- paths and mounts
    Row("absolute paths outside the mounts", job(("head", 1, 8)),
        cfg(1, {"actor": "all"}, actor={"checkpoint_load_path": "/ckpt/run1",
                                        "model": {"model_path": "/models/qwen"}},
            data={"train_data_paths": ["/datasets/a.jsonl"]}),
        ["PathNotMounted"] * 3, needles=("actor.checkpoint_load_path", "mountPaths: none")),
    Row("absolute paths inside the mounts", job(("head", 1, 8), mounts=["/ckpt", "/models", "/datasets"]),
        cfg(1, {"actor": "all"}, actor={"checkpoint_load_path": "/ckpt/run1",
                                        "model": {"model_path": "/models/qwen"}},
            data={"train_data_paths": ["/datasets/a.jsonl"]}, runner={"log_path": "../results"}),
        []),
    Row("paths in a mount of another role", job(("head", 1, 0), ("pool", 1, 8), mounts=["/data"]),
        cfg(2, {"actor": "all"}, runner={"output_dir": "/data/out"}), []),
    # --- placements RLinf cannot use
    Row("component placed twice", job(("head", 1, 8)),
        cfg(1, {"actor,reward": "all", "actor,rollout,reward": "all"}),
        ["ComponentPlacedTwice", "ComponentPlacedTwice"],
        needles=("'actor'", "multiple placements defined")),
    Row("unknown node group", job(("head", 1, 8)),
        cfg(1, {"actor": {"node_group": "gpus", "placement": 0}}, [{"label": "gpu", "node_ranks": 0}]),
        ["UnknownNodeGroup"], needles=("'gpus'", "gpu")),
    Row("node_group as a YAML list", job(("a", 1, 8), ("b", 1, 8)),
        cfg(2, {"actor": {"node_group": ["a", "b"], "placement": "0-15"}},
            [{"label": "a", "node_ranks": 0}, {"label": "b", "node_ranks": 1}]),
        ["UnknownNodeGroup"], needles=('node_group: "a,b"',)),
    Row("node_group as text with two labels", job(("a", 1, 8), ("b", 1, 8)),
        cfg(2, {"actor": {"node_group": "a,b", "placement": "0-15"}},
            [{"label": "a", "node_ranks": 0}, {"label": "b", "node_ranks": 1}]), []),
    Row("processes do not divide the resources", job(("head", 1, 8)),
        cfg(1, {"actor": "0-3:0-2"}), ["PlacementInvalid"], needles=("3 processes", "4 resources")),
    Row("one process across two nodes", job(("head", 2, 4)),
        cfg(2, {"actor": "0-7:0"}), ["PlacementInvalid"], needles=("one node",)),
    Row("duplicate node group labels", job(("head", 2, 1)),
        cfg(2, {"actor": "all"}, [{"label": "g", "node_ranks": 0}, {"label": "g", "node_ranks": 1}]),
        ["NodeGroupLabelDuplicate"]),
    Row("no cluster section", job(("head", 1, 1)), {"actor": {"x": 1}}, ["RLinfClusterMissing"]),
    Row("bad num_nodes", job(("head", 1, 1)), cfg(0, {"actor": "all"}), ["NumNodesInvalid"]),
    # --- environment variables the config reads
    Row("env var the head does not set", job(("head", 1, 1)), cfg(1, {"actor": "all"}),
        ["ConfigEnvNotSet"], unresolved={"data.root": ENV_MISSING}, needles=("DATA_ROOT",)),
    Row("env var the head sets", job(("head", 1, 1), head_env={"DATA_ROOT": "/d"}),
        cfg(1, {"actor": "all"}), [], unresolved={"data.root": ENV_MISSING}),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_check(row: Row):
    findings = check_config(row.job, row.config, source="cfg.yaml", unresolved=row.unresolved)
    assert Counter(f.code for f in findings) == Counter(row.expect), \
        [f"{f.code}: {f.message}" for f in findings]
    for f in findings:
        assert f.severity.value == SEVERITY[f.code], f
        assert f.hint and f.path and f.message
    if row.needles:
        text = findings[0].message + " " + findings[0].hint
        for needle in row.needles:
            assert needle in text, (needle, text)


def test_every_check_has_a_failing_row():
    covered = {code for r in ROWS for code in r.expect}
    assert covered == set(SEVERITY)


def test_workers_mismatch_points_at_the_roles_and_keeps_other_checks():
    findings = check_config(job(("head", 1, 8)), cfg(2, {"actor": "0-15"}))
    assert [f.code for f in findings] == ["WorkersMismatch"]  # no capacity noise for a wrong count
    assert findings[0].path == "spec.roles"


def test_role_paths_name_the_role():
    findings = check_config(job(("actor", 1, 8), ("rollout", 1, 8), ("env", 1, 0)),
                            cfg(3, THREE_PLACEMENT, THREE))
    assert [f.path for f in findings] == ["spec.roles[0].name", "spec.roles[1].name"]


def test_no_config_no_findings():
    assert check_config(job(("head", 1, 1)), None) == []


@pytest.mark.parametrize("value", [
    "ROBOT_IP", "LEFT_ROBOT_IP", "ROBOT_IP_FOR_RANK1", "MODEL_PATH", "ZED_SERIAL_1", "SERIAL1",
    "WANDB_ENTITY", "LLM_JUDGE_PORT", "TASK_DESCRIPTION", "/path/to/model", "/PATH/TO/MODEL",
    "path/to/x", "path_to_your_model", "<robot-ip>", "???", "SFT_DATASET_REPO_ID"])
def test_placeholders(value):
    assert is_placeholder(value)


@pytest.mark.parametrize("value", [
    "FLASH_ATTN", "D435", "OG", "VLA", "SDXL", "DOSW1", "Franka", "/data/path/model",
    "../results", "torch.bfloat16", "10.0.0.1", "eth0", "all", "", "NCCL"])
def test_not_placeholders(value):
    assert not is_placeholder(value)


def test_findings_severity_values_are_known():
    assert set(SEVERITY.values()) <= {s.value for s in Severity}


@pytest.mark.parametrize("run_script, overrides, expected", [
    ("python train.py --config-name x algorithm.lr=1e-5", ["algorithm.lr=1e-5"], []),
    ("python train.py --config-name x", ["algorithm.lr=1e-5"], ["spec.rlinf.overrides[0]"]),
    ("python train.py a=1", ["a=1", "b=2"], ["spec.rlinf.overrides[1]"]),
    ("python train.py", [], []),
], ids=["passed", "missing", "one-of-two-missing", "none"])
def test_overrides_must_reach_rlinf_through_the_run_script(run_script, overrides, expected):
    j = job(("node", 1, 0))
    j.spec.run_script = run_script
    j.spec.rlinf = RLinfRef(configDir="/cfg", configName="x", overrides=overrides)
    found = [f for f in check_config(j, cfg(1, {"actor": "all"}))
             if f.code == "OverrideNotInRunScript"]
    assert [f.path for f in found] == expected
    for f in found:
        assert f.severity == Severity.warning and overrides[int(f.path[-2])] in f.message


def test_a_placeholder_at_several_keys_names_an_override_for_each_key():
    """Keys holding the same placeholder are separate settings: the issue's example grouped
    ``actor.model.model_path`` and ``rollout.model.model_path`` under one override."""
    config = cfg(1, {"actor": "all"}, actor={"model": {"model_path": "/path/to/model"}},
                 rollout={"model": {"model_path": "/path/to/model"}})
    findings = [f for f in check_config(job(("head", 1, 8)), config)
                if f.code == "UnfilledPlaceholder"]
    assert len(findings) == 1
    f = findings[0]
    assert f.message == ("actor.model.model_path = '/path/to/model' is a placeholder that was "
                         "never filled in (also at rollout.model.model_path)")
    assert f.hint == (
        "put the real values in the config, or override each of the 2 keys: add "
        "actor.model.model_path=<value>, rollout.model.model_path=<value> to "
        "spec.rlinf.overrides and to the run script's RLinf command (rlark check: "
        "--override actor.model.model_path=<value> --override rollout.model.model_path=<value>)")
    one = check_config(job(("head", 1, 8)), cfg(1, {"actor": "all"}, runner={"experiment": "???"}))
    assert [x.hint for x in one if x.code == "UnfilledPlaceholder"] == [
        "put the real value in the config, or override it: add runner.experiment=<value> to "
        "spec.rlinf.overrides and to the run script's RLinf command (rlark check: --override "
        "runner.experiment=<value>)"]
