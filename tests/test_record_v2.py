"""Run record v2 (issue 14, items 2-5): locations and the mounts backing them, the preflight
warning for outputs on no persistent mount, configs (original, overrides, resolved), the
automatic checks, and the RecordVerified condition. Pure: rows are plain objects."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlark.record import RECORD_VERSION, build_record, render, run_script_overrides
from rlark.record_checks import ITEMS, run_checks
from rlark.rlinf_config.locations import back, find_locations, location_findings
from rlark.services.records import record_condition
from rlark.spec import job_to_dict, load_job
from rlark.status import ConditionType, Reason

CORPUS = Path("/work/shared/corpus/rlinf/examples")
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)

RESOLVED = {
    "cluster": {"num_nodes": 2},
    "runner": {"logger": {"log_path": "/ckpt/logs", "experiment_name": "e"},
               "resume_dir": None, "output_dir": "results"},
    "actor": {"model": {"model_path": "/models/qwen"}},
    "data": {"train_data_paths": ["/data/a.parquet", "/data/b.parquet"]},
    "env": {"eval": {"video_cfg": {"video_base_dir": "/tmp/videos"}}},
}


def roles(runtime_mounts: bool = True) -> list[dict]:
    mounts = [{"name": "ckpt", "type": "pvc", "source": "claim", "mountPath": "/ckpt"},
              {"name": "data", "type": "hostPath", "source": "/srv/data", "mountPath": "/data",
               "readOnly": True}] if runtime_mounts else []
    return [{"name": "head", "workers": 1, "mounts": mounts},
            {"name": "pool", "workers": 1, "mounts": mounts[:1]}]


# --- locations ---------------------------------------------------------------------------------------


def test_locations_found_with_kind_and_rlinf_source():
    found = find_locations(RESOLVED, working_dir="/w")
    assert [(x.key, x.kind, x.path) for x in found] == [
        ("runner.logger.log_path", "output", "/ckpt/logs"),
        ("runner.output_dir", "output", "/w/results"),
        ("actor.model.model_path", "model", "/models/qwen"),
        ("data.train_data_paths[0]", "dataset", "/data/a.parquet"),
        ("data.train_data_paths[1]", "dataset", "/data/b.parquet"),
        ("env.eval.video_cfg.video_base_dir", "output", "/tmp/videos")]
    assert all(x.source.startswith("rlinf/") for x in found)
    assert find_locations(RESOLVED)[1].path is None  # relative, no working dir


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the RLinf corpus is not on this machine")
def test_locations_of_real_rlinf_configs():
    """Every location key of the table occurs in RLinf's own example configs."""
    seen: set[str] = set()
    for f in CORPUS.rglob("*.yaml"):
        try:
            data = yaml.safe_load(f.read_text())
        except yaml.YAMLError:
            continue
        seen |= {loc.kind + ":" + loc.key.split("[")[0] for loc in find_locations(data, "/w")}
    assert {"output:runner.logger.log_path", "model:actor.model.model_path",
            "model:rollout.model.model_path", "dataset:data.train_data_paths",
            "output:runner.output_dir"} <= seen


def test_backing_on_kubernetes_and_local():
    k8s = {x.key: x.to_dict() for x in back(find_locations(RESOLVED, "/w"), roles(), "kubernetes")}
    assert k8s["runner.logger.log_path"]["byRole"]["head"]["mount"] == "ckpt"
    assert k8s["runner.logger.log_path"]["persistent"] is True
    assert k8s["runner.output_dir"]["byRole"]["pool"] == {
        "mount": None, "persistent": False, "why": "under no mount: the container's own filesystem"}
    assert k8s["data.train_data_paths[0]"]["byRole"]["head"]["readOnly"] is True
    assert k8s["data.train_data_paths[0]"]["byRole"]["pool"]["persistent"] is False
    local = {x.key: x.to_dict() for x in back(find_locations(RESOLVED, "/w"), roles(), "local")}
    assert local["runner.output_dir"]["persistent"] is True
    # the local runtime does not bind mounts: a hostPath backs what is under its *source*
    assert local["data.train_data_paths[0]"]["byRole"]["head"]["why"].startswith("local runtime")


def test_output_not_persistent_is_a_preflight_warning_on_kubernetes_only():
    found = location_findings(RESOLVED, roles(), "kubernetes", "/w")
    assert [(f.code, f.severity.value, f.path) for f in found] == [
        ("OutputNotPersistent", "warning", "runner.output_dir"),
        ("OutputNotPersistent", "warning", "env.eval.video_cfg.video_base_dir")]
    assert "lost when its Workers go" in found[0].message
    assert "override runner.output_dir" in found[0].hint
    assert location_findings(RESOLVED, roles(), "local", "/w") == []
    ro = location_findings({"runner": {"output_dir": "/data/out"}}, roles(), "kubernetes", "/w")
    assert [f.message for f in ro] == [
        "output path /data/out (runner.output_dir) is not on a persistent mount on role pool; "
        "what the Run writes there is lost when its Workers go",
        "output path /data/out (runner.output_dir) is on a read-only mount on role head; "
        "the Run cannot write there"]


def test_run_script_overrides():
    script = ("cd x && RAY_DEDUP=0 python train.py --config-name q runner.max_steps=3 \\\n"
              "  +algo.extra=1 ++a.b=2 '~env.eval' 'actor.model.model_path=/m p'\n"
              "echo a=b # runner.x=1\n")
    assert run_script_overrides(script) == [
        "runner.max_steps=3", "+algo.extra=1", "++a.b=2", "~env.eval",
        "actor.model.model_path=/m p"]


# --- the record ------------------------------------------------------------------------------------

JOB = """\
apiVersion: rlark.io/v1
kind: Job
metadata: {name: rec}
spec:
  headRole: head
  workingDir: /w
  rlinf: {configDir: config, configName: train, overrides: [runner.max_steps=3]}
  runScript: python train.py runner.max_steps=3
  roles:
    - name: head
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {cpu: 1, memory: 1Gi, gpu: 1}
      mounts: [{name: out, type: hostPath, source: /w/out, mountPath: /w/out}]
    - name: pool
      workers: 2
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {cpu: 1}
"""


def facts(rank: int, role: str, *, gpus: int = 0, packages=("ray==2.60.0", "rlinf==0.3.0")) -> dict:
    import hashlib

    lines = sorted(packages)
    return {
        "hostname": "box", "python": "3.11.7", "ray": "2.60.0", "rlinf": "0.3.0", "torch": "2.13.0",
        "visible_cpus": 2, "visible_gpus": [str(i) for i in range(gpus)],
        "visible_memory_bytes": 8 << 30, "tok": "secret-token",
        "ray_resources": {"num_cpus": 1, "num_gpus": 0, "memory_bytes": None,
                          "object_store_bytes": 1, "custom": {}, "worker_ports": None},
        "code": {"workingDir": {"path": "/w", "root": "/w", "commit": "c0ffee" * 6 + "abcd",
                                "branch": "exp", "dirty": True, "changed": 1, "untracked": 0,
                                "remote": "https://github.com/me/p.git", "diffSha256": "d1" * 32,
                                "diff": "+print(2)\n", "diffCut": False},
                 "rlinf": {"version": "0.3.0", "directUrl": {"absent": "index"},
                           "git": {"absent": "installed copy"}}},
        "versions_extra": {"torchCuda": None, "torchHip": None, "nccl": None, "deviceLibs": {}},
        "devices": {"gpus": None, "driver": None, "deviceFiles": []},
        "packages": {"sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                     "count": len(lines), "list": lines},
        "ray_node_rank": {"rayletPid": 10 + rank, "rayletEnv": str(rank)},
        "ray_node_table": {"labels": {"rlark.io/node-rank": str(rank), "rlark.io/role": role},
                           "resources": {"CPU": 1.0, "GPU": float(gpus)}},
        "factsSeconds": 0.2,
    }


def rows(**changes):
    job, _ = load_job(JOB)
    spec = job_to_dict(job)
    run = SimpleNamespace(spec=spec, number=1, uid="u1", cause="Submitted", runtime="local",
                          phase="Succeeded", reason="Completed", message="", exit_code=0,
                          created_at=T0, started_at=T0, running_at=T0 + timedelta(seconds=5),
                          finished_at=T0 + timedelta(seconds=30))
    head = facts(0, "head", gpus=1)
    head["config"] = {"dir": "/w/config", "name": "train", "files": [
        {"path": "train.yaml", "sha256": "aa" * 32, "bytes": 10, "text": "cluster: {}\n"}]}
    all_facts = [head, facts(1, "pool"), facts(2, "pool")]
    for rank, f in changes.get("facts", {}).items():
        all_facts[rank] = f
    names = ["rec-head-0", "rec-pool-0", "rec-pool-1"]
    workers = [SimpleNamespace(name=names[r], role="head" if r == 0 else "pool", node_rank=r,
                               is_head=r == 0, host="box", ip="127.0.0.1", node_ip=None,
                               ray_node_id=f"{r}" * 40, lifecycle={"joined": True},
                               phase="Succeeded", reason=None, exit_code=0, started_at=T0,
                               finished_at=T0, log_path=f"/logs/{names[r]}.log", facts=all_facts[r])
               for r in range(3)]
    return SimpleNamespace(name="rec"), run, workers


COMPOSED = {"data": {"cluster": {"num_nodes": 3}, "runner": {"max_steps": 3,
                                                            "output_dir": "/w/out/run1"}},
            "overrides": ["runner.max_steps=3"]}
PROBES = {"outputs": {"/w/out/run1": {"exists": True, "readable": True, "entries": 4}},
          "logs": {"rec-head-0": True, "rec-pool-0": True, "rec-pool-1": True}}


def test_a_good_record_passes_every_check_and_holds_every_item():
    rec = build_record(*rows(), composed=COMPOSED, probes=PROBES)
    assert rec["recordVersion"] == RECORD_VERSION == 2
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert list(checks) == list(ITEMS)
    bad = {k: c["evidence"] for k, c in checks.items() if c["status"] != "pass"}
    # the only warning: RLark composed the config (RLinf wrote no Hydra output directory)
    assert bad == {"configs": ["resolved config is RLark's own composition (RLinf wrote no Hydra "
                               "output directory: hydra.output_subdir is null or the run script "
                               "composed itself)"]}
    assert rec["checks"]["status"] == "warn"
    assert rec["code"]["workingDir"]["commit"].startswith("c0ffee") and "diff" not in rec["code"]["workingDir"]
    assert rec["diffs"] == {"d1" * 32: "+print(2)\n"}  # the diff, once for three Workers
    assert len(rec["packageLists"]) == 1 and "list" not in rec["workers"]["items"][1]["facts"]["packages"]
    assert rec["configs"]["original"]["files"][0]["sha256"] == "aa" * 32
    assert rec["configs"]["overrides"] == {"spec": ["runner.max_steps=3"],
                                           "runScript": ["runner.max_steps=3"], "notInRunScript": []}
    assert rec["configs"]["resolved"]["source"] == "rlark-composition"
    assert rec["locations"][0]["byRole"]["head"]["mount"] == "out"
    w0 = rec["workers"]["items"][0]
    assert w0["rayReportedRank"] == {"label": "0", "rayletEnv": "0"}
    assert w0["resources"]["asked"]["gpu"] == 1 and w0["resources"]["seen"]["gpus"] == 1
    assert "secret-token" not in render(rec, "json")
    assert record_condition(rec)[:3] == (ConditionType.RecordVerified, True, Reason.ChecksPassed)


def test_a_worker_with_another_package_version_fails_the_packages_check():
    other = facts(2, "pool", packages=("ray==2.60.0", "rlinf==0.3.1"))
    rec = build_record(*rows(facts={2: other}), composed=COMPOSED, probes=PROBES)
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert checks["packages"]["status"] == "fail"
    assert checks["packages"]["evidence"] == [
        "role pool: Workers have 2 different package lists; rank 1 (rec-pool-0) vs rank 2 "
        "(rec-pool-1): rlinf 0.3.0 vs 0.3.1"]
    kind, ok, reason, message = record_condition(rec)
    assert (ok, reason) == (False, Reason.ChecksFailed) and message.startswith("packages: role pool")


def test_checks_fail_with_evidence():
    no_gpu = facts(0, "head", gpus=0)
    wrong_rank = facts(2, "pool")
    wrong_rank["ray_node_rank"]["rayletEnv"] = "1"
    other_commit = facts(1, "pool")
    other_commit["code"]["workingDir"]["commit"] = "beef" * 10
    rec = build_record(*rows(facts={0: no_gpu, 1: other_commit, 2: wrong_rank}),
                       composed={**COMPOSED, "data": {**COMPOSED["data"], "runner": {
                           "output_dir": "/w/out/run1", "logger": {"log_path": "/w/out/gone"}}}},
                       probes=PROBES)
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert "rank 0 (rec-head-0) saw 0 GPUs, role head asked for 1" in checks["resources"]["evidence"]
    assert checks["node-rank"]["evidence"] == [
        "rank 2 (rec-pool-1): RLINF_NODE_RANK in its raylet's environment is 1, RLark gave rank 2"]
    assert checks["code"]["evidence"][0].startswith("Workers run 2 different working-directory commits")
    assert checks["outputs-readable"]["status"] == "warn"  # /w/out/gone was not looked at
    assert [c for c in checks if checks[c]["status"] == "fail"] == ["code", "resources", "node-rank"]


def test_images_and_outputs_and_logs_checks():
    job, run, workers = rows()
    run.spec = copy.deepcopy(run.spec)
    run.spec["spec"]["roles"][1]["image"] = "docker.io/rlinf/rlinf"
    probes = {"outputs": {"/w/out/run1": {"exists": False, "readable": False, "entries": None}},
              "logs": {"rec-head-0": True, "rec-pool-0": False, "rec-pool-1": True}}
    rec = build_record(job, run, workers, composed=COMPOSED, probes=probes)
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert checks["images"]["evidence"][0] == "role pool: image 'docker.io/rlinf/rlinf' has no explicit version"
    assert checks["outputs-readable"]["evidence"] == [
        "output path /w/out/run1 (runner.output_dir) does not exist after the Run"]
    assert checks["logs"]["evidence"] == ["rank 1 (rec-pool-0): log /logs/rec-pool-0.log is gone"]


def test_the_resolved_config_rlinf_wrote_wins():
    head = facts(0, "head", gpus=1)
    head["hydra_output"] = {"dir": "/w/outputs/1", "files": {
        "config.yaml": {"sha256": "cc" * 32, "text": "cluster: {num_nodes: 3}\nrunner: {max_steps: 4}\n"},
        "overrides.yaml": {"text": "- runner.max_steps=4\n"}}}
    rec = build_record(*rows(facts={0: head}), composed=COMPOSED, probes=PROBES)
    resolved = rec["configs"]["resolved"]
    assert (resolved["source"], resolved["dir"], resolved["overrides"]) == (
        "hydra-output", "/w/outputs/1", ["runner.max_steps=4"])
    assert resolved["data"]["runner"]["max_steps"] == 4
    assert "hydra_output" not in rec["workers"]["items"][0]["facts"]


def test_run_checks_on_an_empty_record_say_what_is_missing():
    out = run_checks({"workers": {"expected": 1, "actual": 0, "items": []}})
    assert [c["id"] for c in out["items"]] == list(ITEMS) and out["status"] == "fail"
