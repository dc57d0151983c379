"""Run record v2 (issue 14, items 2-5): locations and the mounts backing them, the preflight
warning for outputs on no persistent mount, configs (original, overrides, resolved), the
automatic checks, and the RecordVerified condition. Pure: rows are plain objects; the CLI's
test runs against the server ``rlark server`` builds (tests/server.py AppServer)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlark import runtimes
from rlark.record.build import RECORD_VERSION, build_record, run_script_overrides
from rlark.record.export import render
from rlark.record.checks import ITEMS, run_checks
from rlark.rlinf_config.locations import back, find_locations, location_findings
from rlark.record.finish import record_condition
from rlark.spec import job_to_dict, load_job
from rlark.status import ConditionType, Reason

#: what backs a path under no mount, as each runtime says
LOCAL_FS = runtimes.profile("local").filesystem
K8S_FS = runtimes.profile("kubernetes").filesystem

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
    k8s = {x.key: x.to_dict() for x in back(find_locations(RESOLVED, "/w"), roles(), K8S_FS)}
    assert k8s["runner.logger.log_path"]["byRole"]["head"]["mount"] == "ckpt"
    assert k8s["runner.logger.log_path"]["persistent"] is True
    assert k8s["runner.output_dir"]["byRole"]["pool"] == {
        "mount": None, "persistent": False, "why": "under no mount: the container's own filesystem"}
    assert k8s["data.train_data_paths[0]"]["byRole"]["head"]["readOnly"] is True
    assert k8s["data.train_data_paths[0]"]["byRole"]["pool"]["persistent"] is False
    local = {x.key: x.to_dict() for x in back(find_locations(RESOLVED, "/w"), roles(), LOCAL_FS)}
    assert local["runner.output_dir"]["persistent"] is True
    # the local runtime does not bind mounts: a hostPath backs what is under its *source*
    assert local["data.train_data_paths[0]"]["byRole"]["head"]["why"].startswith("local runtime")


def test_output_not_persistent_is_a_preflight_warning_on_kubernetes_only():
    found = location_findings(RESOLVED, roles(), K8S_FS, "/w")
    assert [(f.code, f.severity.value, f.path) for f in found] == [
        ("OutputNotPersistent", "warning", "runner.output_dir"),
        ("OutputNotPersistent", "warning", "env.eval.video_cfg.video_base_dir")]
    assert "lost when its Workers go" in found[0].message
    assert "override runner.output_dir" in found[0].hint
    assert location_findings(RESOLVED, roles(), LOCAL_FS, "/w") == []
    ro = location_findings({"runner": {"output_dir": "/data/out"}}, roles(), K8S_FS, "/w")
    assert [f.message for f in ro] == [
        "output path /data/out (runner.output_dir) is not on a persistent mount for role(s) pool; "
        "what the Run writes there is lost when its Workers go",
        "output path /data/out (runner.output_dir) is on a read-only mount for role(s) head; "
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
        "keeper": {"protected": True, "uid": 1879048200, "sandbox": True},
        "ray_auth": {"mode": "token"},
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
            "overrides": ["runner.max_steps=3"],
            # the server's hashes of the files it composed from: those the head saw (rows())
            "inputs": {"files": {"train.yaml": "aa" * 32}, "cut": False}}
PROBES = {"outputs": {"/w/out/run1": {"exists": True, "readable": True, "entries": 4}},
          "logs": {"rec-head-0": True, "rec-pool-0": True, "rec-pool-1": True}}


def test_a_good_record_passes_every_check_and_holds_every_item():
    rec = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    assert rec["recordVersion"] == RECORD_VERSION == 2
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert list(checks) == list(ITEMS)
    bad = {k: c["evidence"] for k, c in checks.items() if c["status"] != "pass"}
    # RLinf wrote no Hydra output (as RLinf's own configs, hydra.output_subdir: null): RLark's
    # composition from the very files the head saw, with the run script's overrides, is it
    assert bad == {}
    assert "resolved: RLark's composition of train from the 1 Hydra file(s) the head saw (same " \
           "sha256), with the overrides the run script passes (runner.max_steps=3); RLinf wrote " \
           "no Hydra output directory of its own" in checks["configs"]["evidence"]
    assert rec["checks"]["status"] == "pass" and rec["provisional"] is False
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
    rec = build_record(*rows(facts={2: other}), composed=COMPOSED, probes=PROBES, final=True)
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
                       probes=PROBES, final=True)
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
    rec = build_record(job, run, workers, composed=COMPOSED, probes=probes, final=True)
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
    rec = build_record(*rows(facts={0: head}), composed=COMPOSED, probes=PROBES, final=True)
    resolved = rec["configs"]["resolved"]
    assert (resolved["source"], resolved["dir"], resolved["overrides"]) == (
        "hydra-output", "/w/outputs/1", ["runner.max_steps=4"])
    assert resolved["data"]["runner"]["max_steps"] == 4
    assert "hydra_output" not in rec["workers"]["items"][0]["facts"]


def test_the_isolation_check_says_what_each_worker_ran_as():
    rows_ = rows()
    workers = rows_[2]
    workers[1].facts = {**workers[1].facts, "ray_auth": {"mode": "none", "why": "Ray 2.47 has no "
                                                                               "token authentication"}}
    workers[2].facts = {**workers[2].facts, "keeper": {"protected": False, "uid": 1000,
                                                       "unprotected": "prctl failed"}}
    check = {c["id"]: c for c in build_record(*rows_, composed=COMPOSED, probes=PROBES, final=True)
             ["checks"]["items"]}["isolation"]
    assert check["status"] == "warn"
    assert any("rank 1" in e and "without token authentication" in e for e in check["evidence"])
    assert any("rank 2" in e and "prctl failed" in e for e in check["evidence"])
    workers[0].facts = {k: v for k, v in workers[0].facts.items() if k != "keeper"}
    check = {c["id"]: c for c in build_record(*rows_, composed=COMPOSED, probes=PROBES, final=True)
             ["checks"]["items"]}["isolation"]
    assert check["status"] == "fail" and "rank 0" in check["evidence"][0]


def test_run_checks_on_an_empty_record_say_what_is_missing():
    out = run_checks({"workers": {"expected": 1, "actual": 0, "items": []}})
    assert [c["id"] for c in out["items"]] == list(ITEMS) and out["status"] == "fail"


# --- diff, versions, schema ---------------------------------------------------------------------

V1 = {"recordVersion": 1, "job": "old", "run": 1, "runUid": "u0", "cause": "Submitted",
      "runtime": "local", "result": {"phase": "Succeeded", "reason": "Completed", "message": "",
                                     "exitCode": 0},
      "times": {"created": None, "started": None, "running": None, "finished": None,
                "durationSeconds": None},
      "runtimeNotes": [], "headRole": "head", "images": {"head": "docker.io/rlinf/rlinf:0.3.0"},
      "imageDigests": {}, "imageDigestMismatch": [], "rlinf": None, "workingDir": None,
      "mounts": [], "workers": {"expected": 1, "actual": 1, "items": [
          {"name": "old-head-0", "role": "head", "nodeRank": 0, "isHead": True, "host": "box",
           "ip": None, "rayNodeId": "n", "joined": True, "phase": "Succeeded", "reason": None,
           "exitCode": 0, "startedAt": None, "finishedAt": None, "log": None,
           "rayVersion": "2.60.0", "rayNode": {"numCpus": 1, "numGpus": 0, "memoryBytes": None,
                                               "objectStoreBytes": 1, "workerPorts": None},
           "facts": {}}]},
      "versions": {"python": ["3.11.7"], "ray": ["2.60.0"], "rlinf": [], "torch": []},
      "logs": {"root": None, "workers": {"old-head-0": None}}, "spec": {}}


def two_runs(override_b: str) -> tuple[dict, dict]:
    job, run, workers = rows()
    a = build_record(job, run, workers, composed=COMPOSED, probes=PROBES, final=True)
    run_b = copy.deepcopy(run)
    run_b.number, run_b.uid = 2, "u2"
    run_b.started_at = T0 + timedelta(hours=1)
    run_b.spec["spec"]["rlinf"]["overrides"] = [override_b]
    run_b.spec["spec"]["runScript"] = f"python train.py {override_b}"
    composed_b = copy.deepcopy(COMPOSED)
    composed_b["data"]["runner"]["max_steps"] = int(override_b.split("=")[1])
    b = build_record(job, run_b, workers, composed=composed_b, probes=PROBES, final=True)
    return a, b


def test_diff_of_two_runs_differing_in_one_override_shows_that_key():
    from rlark.record.diff import diff_records

    a, b = two_runs("runner.max_steps=5")
    d = diff_records(a, b)
    assert (d["a"], d["b"]) == ({"job": "rec", "run": 1, "recordVersion": 2, "provisional": False},
                                {"job": "rec", "run": 2, "recordVersion": 2, "provisional": False})
    # what the user changed first (the spec's override and run script), then what it caused
    assert [(c["section"], c["key"], c["a"], c["b"], c["display"]) for c in d["changes"]] == [
        ("spec", "spec.rlinf.overrides", ["runner.max_steps=3"], ["runner.max_steps=5"],
         {"a": "runner.max_steps=3", "b": "runner.max_steps=5"}),
        ("spec", "spec.runScript", "python train.py runner.max_steps=3",
         "python train.py runner.max_steps=5", {"a": "python train.py runner.max_steps=3",
                                                "b": "python train.py runner.max_steps=5"}),
        ("config", "runner.max_steps", 3, 5, {"a": "3", "b": "5"})]
    assert diff_records(a, a) == {"a": d["a"], "b": d["a"], "changes": [], "same": True}


def test_diff_sees_code_versions_images_workers_and_result():
    from rlark.record.diff import diff_records

    other = facts(2, "pool", packages=("ray==2.60.0", "rlinf==0.3.1"))
    other["torch"] = "2.14.0"
    a = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    b = build_record(*rows(facts={2: other}), composed=COMPOSED, probes=PROBES, final=True)
    keys = {(c["section"], c["key"]) for c in diff_records(a, b)["changes"]}
    assert ("versions", "torch") in keys and ("versions", "packageLists") in keys
    assert ("result", "check.packages") in keys and ("result", "check.versions") in keys


def test_version_1_records_still_render_and_diff():
    from rlark.record.diff import diff_records

    md = render(V1, "md")
    assert md.startswith("# Run record: old run 1") and "## Checks" not in md
    current = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    d = diff_records(V1, current)
    assert d["a"]["recordVersion"] == 1 and d["b"]["recordVersion"] == 2
    assert {"section": "workers", "key": "expected", "a": 1, "b": 3,
            "display": {"a": "1", "b": "3"}} in d["changes"]


def test_the_json_schema_accepts_records_of_both_versions():
    import jsonschema

    from rlark.record.schema import RecordV2, record_schema

    schema = record_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rec = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    assert list(validator.iter_errors(rec)) == []
    assert list(validator.iter_errors(V1)) == []
    RecordV2.model_validate(rec)
    broken = {**rec, "checks": {"status": "maybe", "items": []}}
    assert list(validator.iter_errors(broken))


def test_output_not_persistent_has_chinese_text():
    from rlark.console.messages import localize_finding

    [f] = location_findings({"runner": {"output_dir": "/out"}}, roles(False)[:1], K8S_FS, "/w")
    message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
    assert "持久挂载" in message and "/out" in message and "runner.output_dir" in hint


# --- API and console ------------------------------------------------------------------------------


@pytest.fixture
def api(rlark_home):
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests.access import admin_token, api_client

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store)
    with api_client(create_app(service), admin_token(store)) as c:
        yield c, service, store
    store.dispose()


def store_records(store, name: str, records: list[dict]) -> None:
    from sqlalchemy import select

    from rlark.store import JobRow

    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        for run, rec in zip(sorted(job.runs, key=lambda r: r.number), records):
            run.record = {**rec, "job": name, "run": run.number}


def test_api_diff_and_schema(api):
    from tests.test_api import job_yaml

    client, service, store = api
    service.create(job_yaml("demo"))
    service.restart("demo")
    a, b = two_runs("runner.max_steps=7")
    store_records(store, "demo", [a, b])
    r = client.get("/api/v1/record/diff", params={"a": "demo:1", "b": "demo:2"})
    assert r.status_code == 200, r.text
    assert [c["key"] for c in r.json()["changes"]] == [
        "spec.rlinf.overrides", "spec.runScript", "runner.max_steps"]
    bad = client.get("/api/v1/record/diff", params={"a": "demo:x", "b": "demo"})
    assert bad.status_code == 422
    assert bad.json()["detail"]["message"] == (
        "a = 'demo:x' is not JOB or JOB:RUN; give a Job name and optionally a run number, "
        "e.g. quickstart:2")
    assert client.get("/api/v1/record/diff", params={"a": "demo:9", "b": "demo"}).status_code == 404
    assert client.get("/api/v1/record/diff", params={"a": "demo"}).status_code == 422
    schema = client.get("/api/v1/record/schema").json()
    assert schema["$defs"]["RecordV2"]["properties"]["recordVersion"]["const"] == 2
    # the console's compare view: the same service
    page = client.get("/jobs/demo/compare", params={"a": "demo:1", "b": "demo:2"})
    assert page.status_code == 200 and 'data-key="runner.max_steps"' in page.text
    assert 'data-key="spec.rlinf.overrides"' in page.text and page.text.count("data-key=") == 3
    previous = client.get("/jobs/demo/compare")  # the current Run against the one before it
    assert previous.status_code == 200 and 'data-key="runner.max_steps"' in previous.text
    tab = client.get("/jobs/demo", params={"tab": "record", "run": "2"}).text
    assert 'id="record-checks"' in tab and 'data-check="packages" data-status="pass"' in tab
    assert 'action="/jobs/demo/compare"' in tab


# --- CLI: rlark record diff, rlark schema record, rlark describe -------------------------------------


@pytest.fixture
def live(rlark_home):
    """The server ``rlark server`` builds (tests/server.py AppServer, its controller running)."""
    from tests.server import AppServer

    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def failed_for_real(app, runs: int) -> None:
    """Job ``demo`` (one Worker, whose prepare script exits 4: no Ray node starts) failed by
    the controller ``runs`` times (submitted, then restarted), each Run's record stored by it."""
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "demo"},
           "spec": {"headRole": "head", "runScript": "true",
                    "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                               "resources": {"cpu": 1}, "prepareScript": "exit 4"}]}}
    r = app.http.post("/api/v1/jobs", content=json.dumps(doc).encode(),
                      headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    def ended(number: int) -> None:
        job = app.wait_for("demo", f"run {number} Failed, its record stored",
                           lambda j: j["currentRun"]["number"] == number and j["phase"] == "Failed"
                           and any(c["type"] == "RecordVerified" for c in j["currentRun"]["conditions"]))
        assert job["reason"] == "PrepareFailed", (job["reason"], job["message"])

    ended(1)
    for number in range(2, runs + 1):
        assert app.http.post("/api/v1/jobs/demo/restart").status_code == 200
        ended(number)


def test_cli_record_diff_schema_and_describe(live):
    """Two Runs ended by the controller; their records are then replaced by two that differ as
    no Run on this machine can (one Worker's rlinf version, a composed config's value): written
    into the ended Runs' rows, which the controller no longer touches."""
    from tests.test_cli import cli_env, error_line, rlark

    failed_for_real(live, 2)
    a, b = two_runs("runner.max_steps=7")
    other = facts(2, "pool", packages=("ray==2.60.0", "rlinf==0.3.1"))
    b = build_record(*rows(facts={2: other}), composed=COMPOSED, probes=PROBES, final=True) | {
        "configs": b["configs"], "rlinf": b["rlinf"]}
    store_records(live.store, "demo", [a, b])

    def cli(*args: str):
        return rlark(*args, env=cli_env(RLARK_SERVER=live.url))

    table = cli("record", "diff", "demo:1", "demo:2")
    assert table.returncode == 0, table.stderr
    assert "runner.max_steps" in table.stdout and "check.packages" in table.stdout
    data = json.loads(cli("record", "diff", "demo:1", "demo:2", "-o", "json").stdout)
    assert {"section": "config", "key": "runner.max_steps", "a": 3, "b": 7,
            "display": {"a": "3", "b": "7"}} in data["changes"]
    one = cli("record", "diff", "demo:1")
    assert one.returncode == 1 and "takes two runs" in error_line(one)
    bad = cli("record", "diff", "demo:one", "demo")
    assert bad.returncode == 1 and "a = 'demo:one' is not JOB or JOB:RUN" in error_line(bad)

    described = cli("describe", "job", "demo")
    assert described.returncode == 0, described.stderr
    assert "Record checks (run 2: fail)" in described.stdout
    assert "packages" in described.stdout and "rlinf 0.3.0 vs 0.3.1" in described.stdout

    schema = rlark("schema", "record")
    assert schema.returncode == 0 and json.loads(schema.stdout)["oneOf"]
    assert json.loads(rlark("schema").stdout)["title"] == "RLark Job"
    wrong = rlark("schema", "recrd")
    assert wrong.returncode == 1 and "rlark schema record" in error_line(wrong)


def test_output_not_persistent_comes_with_every_submissions_findings(rlark_home, tmp_path,
                                                                      monkeypatch):
    """The one set of checks (JobService.preflight: submit, rlark check/validate, the API's
    check, the console's review step): on Kubernetes an output path under no mount is a
    warning; on the local runtime (this machine's own filesystem) it is not."""
    from rlark.services.jobs import JobService
    from rlark.store import Store

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train.yaml").write_text(
        "cluster: {num_nodes: 1, component_placement: {actor: all}}\n"
        "runner: {output_dir: /results/run1, logger: {log_path: /ckpt/logs}}\n")
    monkeypatch.setenv("RLARK_CONFIG_ROOTS", str(tmp_path))
    doc = yaml.safe_dump({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "out"},
        "spec": {"headRole": "head", "workingDir": str(tmp_path), "runScript": "python train.py",
                 "rlinf": {"configDir": "config", "configName": "train"},
                 "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                            "mounts": [{"name": "ckpt", "type": "pvc", "source": "claim",
                                        "mountPath": "/ckpt"}]}]}})
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        _, k8s = JobService(store, runtime="kubernetes").preflight(doc)
        _, local = JobService(store).preflight(doc)
    finally:
        store.dispose()
    lost = [f for f in k8s if f.code == "OutputNotPersistent"]
    assert [(f.path, f.severity.value) for f in lost] == [("runner.output_dir", "warning")]
    assert lost[0].message.startswith("output path /results/run1 (runner.output_dir) is not on a "
                                      "persistent mount for role(s) head")
    assert not [f for f in local if f.code == "OutputNotPersistent"]


def test_node_grouping_checks_rlinfs_node_groups_against_the_workers():
    cluster = {"num_nodes": 3, "component_placement": {"actor": {"node_group": "head", "placement": 0}},
               "node_groups": [{"label": "head", "node_ranks": 0, "ignore_hardware": True},
                               {"label": "pool", "node_ranks": "1-2", "ignore_hardware": True}]}
    rec = build_record(*rows(), composed={**COMPOSED, "data": {**COMPOSED["data"], "cluster": cluster}},
                       probes=PROBES, final=True)
    check = next(c for c in rec["checks"]["items"] if c["id"] == "node-grouping")
    assert check["status"] == "pass"
    assert check["evidence"][-2:] == ["node group head: ranks 0 on role head",
                                      "node group pool: ranks 1, 2 on role pool"]
    wide = {**cluster, "num_nodes": 4, "node_groups": [{"label": "pool", "node_ranks": "1-3",
                                                        "ignore_hardware": True}]}
    rec = build_record(*rows(), composed={**COMPOSED, "data": {**COMPOSED["data"], "cluster": wide}},
                       probes=PROBES, final=True)
    check = next(c for c in rec["checks"]["items"] if c["id"] == "node-grouping")
    assert check["status"] == "fail" and check["evidence"] == [
        "cluster.num_nodes is 4, the roles have 3 Workers",
        "node group pool names rank 3, which no Worker has"]
