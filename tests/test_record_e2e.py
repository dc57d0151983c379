"""The run record v2 end to end (issue 14, item 7): a real ``rlark server`` on the local runtime,
real Ray nodes, real RLinf, real git.

* the quickstart (3 Ray nodes, the fewest it has) from a git working directory with an
  uncommitted change and an output location on a mount: its record holds every item with real
  values and every check passes or only warns;
* two Workers of one role whose Python environments differ in one package version (2 nodes):
  the ``packages`` check fails naming the package, and the Run's RecordVerified condition says so;
* two runs of a one-Worker Job that differ in one override (1 node each): ``rlark record diff``
  shows exactly that key.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLES
from tests.test_local_runtime import exchange_dir
from tests.server import assert_nothing_left, serve

pytestmark = pytest.mark.ray


@pytest.fixture
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def wait_record(server, name: str, timeout: float = 120) -> dict:
    """The stored record of the current Run, once the controller wrote it (RecordVerified is set
    in the same transaction)."""
    deadline = time.monotonic() + timeout
    while True:
        job = server.wait_released(name, timeout=timeout)
        kinds = {c["type"] for c in job["currentRun"].get("conditions") or []}
        if "RecordVerified" in kinds:
            r = server.http.get(f"/api/v1/jobs/{name}/record")
            assert r.status_code == 200, r.text
            return r.json()
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def condition(job: dict, kind: str) -> dict:
    return next(c for c in job["currentRun"]["conditions"] if c["type"] == kind)


@pytest.mark.rlinf
def test_the_quickstarts_record_holds_every_item(server, tmp_path):
    pytest.importorskip("rlinf.scheduler", reason="RLinf is installed by scripts/test")
    work = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", work)
    git(work, "init", "-q", "-b", "experiment")
    git(work, "remote", "add", "origin", "https://x-access-token:ghp_NOTREAL@github.com/me/qs.git")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "quickstart as released")
    script = work / "placement_check.py"
    script.write_text(script.read_text() + "\n# an uncommitted change the record must keep\n")
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=work, check=True,
                          capture_output=True).stdout
    out = exchange_dir(tmp_path / "outputs")  # Workers run under a uid of their own: writable by others
    override = f"+runner.output_dir={out}/run1"
    doc = yaml.safe_load((work / "job.yaml").read_text())
    doc["spec"]["workingDir"] = str(work)
    doc["spec"]["rlinf"]["overrides"] = [override]
    doc["spec"]["runScript"] = doc["spec"]["runScript"].rstrip() + f" {override}\n"
    doc["spec"]["roles"][0]["mounts"] = [{"name": "outputs", "type": "hostPath",
                                          "source": str(out), "mountPath": str(out)}]
    server.submit(yaml.safe_dump(doc))
    job = server.wait_phase("quickstart", {"Succeeded", "Failed"}, timeout=400)
    assert job["phase"] == "Succeeded", job
    rec = wait_record(server, "quickstart")
    text = json.dumps(rec)
    assert rec["recordVersion"] == 2
    # code: the working directory's commit, branch, remote (no credentials), the dirty diff
    wd = rec["code"]["workingDir"]
    assert wd["commit"] == git(work, "rev-parse", "HEAD").strip() and wd["branch"] == "experiment"
    assert wd["remote"] == "https://github.com/me/qs.git" and "ghp_NOTREAL" not in text
    assert wd["dirty"] is True and wd["diffSha256"] == hashlib.sha256(diff).hexdigest()
    assert "an uncommitted change the record must keep" in rec["diffs"][wd["diffSha256"]]
    assert rec["code"]["rlinf"]["version"] == "0.3.0"
    # versions, and one package list for three Workers of one environment
    v = rec["versions"]
    assert v["rlinf"] == ["0.3.0"] and v["ray"] and v["python"] and v["torch"]
    # torch's CUDA runtime as its own version.py says (None: a CPU build, recorded as absent)
    import importlib.util

    from rlark.bootstrap.worker import parse_torch_version_py

    spec = importlib.util.find_spec("torch")
    cuda = parse_torch_version_py((Path(spec.origin).parent / "version.py").read_text()).get("cuda")
    assert v["cuda"] == ([cuda] if cuda else [])
    if not Path("/proc/driver/nvidia/version").exists() and not shutil.which("nvidia-smi"):
        assert v["nvidiaDriver"] == []  # no NVIDIA driver here: absent, recorded as absent
    [digest] = v["packageLists"]
    assert rec["packageLists"][digest]["count"] > 50
    assert any(p.startswith("rlinf==0.3.0") for p in rec["packageLists"][digest]["packages"])
    # configs: the original file with its hash, the override in spec and run script, the
    # resolved config (RLark's composition: the quickstart composes with hydra.compose)
    files = {f["path"]: f for f in rec["configs"]["original"]["files"]}
    source = (work / "config" / "quickstart.yaml").read_bytes()
    assert files["quickstart.yaml"]["sha256"] == hashlib.sha256(source).hexdigest()
    assert rec["configs"]["overrides"] == {"spec": [override], "runScript": [override],
                                           "notInRunScript": []}
    resolved = rec["configs"]["resolved"]
    assert resolved["source"] == "rlark-composition"
    assert resolved["data"]["cluster"]["num_nodes"] == 3
    assert resolved["data"]["runner"]["output_dir"] == f"{out}/run1"
    # the output location, mapped to the mount that backs it
    [loc] = rec["locations"]
    assert (loc["key"], loc["kind"], loc["path"]) == ("runner.output_dir", "output", f"{out}/run1")
    assert loc["byRole"]["head"]["mount"] == "outputs" and loc["persistent"] is True
    # Workers: RLINF_NODE_RANK as Ray reports it, resources asked and seen
    for w in rec["workers"]["items"]:
        assert w["rayReportedRank"] == {"label": str(w["nodeRank"]), "rayletEnv": str(w["nodeRank"])}
        assert w["resources"]["seen"]["cpus"] >= 1 and w["resources"]["seen"]["ray"]["CPU"] == 1.0
        assert w["factsSeconds"] < 20
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert {k: c["status"] for k, c in checks.items() if c["status"] != "pass"} == {
        "configs": "warn"}, {k: c["evidence"] for k, c in checks.items()}
    assert "node group pool: ranks 1, 2 on role pool" in checks["node-grouping"]["evidence"]
    assert checks["outputs-readable"]["evidence"] == [f"output path {out}/run1: readable, 1 entries"]
    assert json.loads((out / "run1" / "placement.json").read_text())["mismatches"] == 0
    assert condition(job := server.job("quickstart"), "RecordVerified")["status"] == "True"
    described = server.cli("describe", "job", "quickstart")
    assert "Record checks (run 1: warn)" in described.stdout
    assert_nothing_left(job)


def sitecustomize(root: Path) -> Path:
    """A directory for PYTHONPATH whose sitecustomize adds ``rank-<RLINF_NODE_RANK>`` to the
    path: each Worker of one role then sees its own extra distributions (rank 0:
    rlark-e2e-extra 1.0, rank 1: 2.0), the way two machines of a role can differ."""
    root.mkdir()
    (root / "sitecustomize.py").write_text(
        "import os, sys\n"
        "sys.path.append(os.path.join(os.path.dirname(__file__),"
        " 'rank-' + os.environ.get('RLINF_NODE_RANK', '')))\n")
    for rank, version in ((0, "1.0"), (1, "2.0")):
        info = root / f"rank-{rank}" / f"rlark_e2e_extra-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: rlark-e2e-extra\nVersion: {version}\n")
    return root


def test_a_worker_whose_environment_differs_fails_the_packages_check(server, tmp_path):
    extra = sitecustomize(tmp_path / "site")
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "envdiff"},
           "spec": {"headRole": "head", "runScript": "echo done",
                    "failurePolicy": {"joinTimeoutSeconds": 180},
                    "roles": [{"name": "head", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0",
                               "resources": {"cpu": 1, "memory": "1Gi"},
                               # Workers see the machine's files only as mounts give them
                               "mounts": [{"name": "site", "type": "hostPath", "source": str(extra),
                                           "mountPath": str(extra), "readOnly": True}],
                               "env": [{"name": "PYTHONPATH", "value": str(extra)}]}]}}
    server.submit(yaml.safe_dump(doc))
    job = server.wait_phase("envdiff", {"Succeeded", "Failed"}, timeout=180)
    assert job["phase"] == "Succeeded", job  # the Run itself is fine ...
    rec = wait_record(server, "envdiff")
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert checks["packages"]["status"] == "fail"  # ... its record is not
    assert checks["packages"]["evidence"] == [
        "role head: Workers have 2 different package lists; rank 0 (envdiff-head-0) vs rank 1 "
        "(envdiff-head-1): rlark-e2e-extra 1.0 vs 2.0"]
    assert [c for c, x in checks.items() if x["status"] == "fail"] == ["packages"]
    verified = condition(server.job("envdiff"), "RecordVerified")
    assert (verified["status"], verified["reason"]) == ("False", "ChecksFailed")
    assert verified["message"].startswith("packages: role head: Workers have 2 different")
    assert_nothing_left(job)


CONFIG = "cluster:\n  num_nodes: 1\n  component_placement: {actor: all}\nrunner:\n  max_steps: 1\n"


def one_worker_job(work: Path, override: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "sweep"},
        "spec": {"headRole": "head", "workingDir": str(work), "runScript": f"echo train {override}",
                 "rlinf": {"configDir": "config", "configName": "train", "overrides": [override]},
                 "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                            "resources": {"cpu": 1, "memory": "1Gi"}}]}})


def test_record_diff_of_two_runs_differing_in_one_override(server, tmp_path):
    work = tmp_path / "sweep"
    (work / "config").mkdir(parents=True)
    (work / "config" / "train.yaml").write_text(CONFIG)
    server.submit(one_worker_job(work, "runner.max_steps=3"))
    assert server.wait_phase("sweep", {"Succeeded", "Failed"}, timeout=120)["phase"] == "Succeeded"
    wait_record(server, "sweep")
    r = server.http.put("/api/v1/jobs/sweep", content=one_worker_job(work, "runner.max_steps=5"),
                        headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200, r.text
    job = server.wait_phase("sweep", {"Succeeded", "Failed"}, timeout=120)
    assert job["currentRun"]["number"] == 2 and job["phase"] == "Succeeded"
    wait_record(server, "sweep")
    res = server.cli("record", "diff", "sweep:1", "sweep:2", "-o", "json")
    assert res.returncode == 0, res.stderr
    changes = json.loads(res.stdout)["changes"]
    assert changes == [
        {"section": "config", "key": "runner.max_steps", "a": 3, "b": 5},
        {"section": "config", "key": "spec.rlinf.overrides", "a": '["runner.max_steps=3"]',
         "b": '["runner.max_steps=5"]'}]
    table = server.cli("record", "diff", "sweep:1", "sweep:2")
    assert "runner.max_steps" in table.stdout and "spec.rlinf.overrides" in table.stdout
    assert_nothing_left(job)
