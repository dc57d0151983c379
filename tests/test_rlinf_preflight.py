"""Preflight on submit, ``POST /api/v1/check``, and the ``rlark plan`` / ``rlark check`` /
``rlark describe`` commands, with real RLinf configs on disk (written here) and a real store.

No Worker is started: the service tests call JobService alone; the CLI's submit goes to the
server ``rlark server`` builds (tests/server.py AppServer, its controller running), one for the
module with the machine held (tests/test_cli.py's ``serve_held``), so an accepted Job waits in
the admission queue, Pending, each test in a project of its own.
"""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from sqlalchemy import func, select

from rlark import runtimes
from rlark.server import create_app
from rlark.services.errors import Invalid
from rlark.services.jobs import JobService
from rlark.spec import load_job, resolve_relative_paths
from rlark.store import JobRow, Store
from tests.access import admin_token, api_client
from tests.test_cli import LiveServer, serve_held

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart" / "job.yaml"

# CPU-only (no accelerators needed), like the quickstart: 3 nodes, 2 node groups.
CONFIG = """\
cluster:
  num_nodes: 3
  node_groups:
    - {label: head, node_ranks: 0, ignore_hardware: true}
    - {label: pool, node_ranks: 1-2, ignore_hardware: true}
  component_placement:
    actor: {node_group: head, placement: 0}
    rollout: {node_group: pool, placement: 0-1}
runner:
  output_dir: /results/run1
"""


def job_yaml(name: str, *, pool: int = 2, config_dir: str | None = "config",
             config_name: str = "train", working_dir: str | None = None) -> str:
    spec: dict = {"headRole": "head", "runScript": "python train.py", "roles": [
        {"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0"},
        {"name": "pool", "workers": pool, "image": "docker.io/rlinf/rlinf:0.3.0"}]}
    if working_dir:
        spec["workingDir"] = working_dir
    spec["rlinf"] = {"configName": config_name, **({"configDir": config_dir} if config_dir else {})}
    return yaml.safe_dump({"apiVersion": "rlark.io/v1", "kind": "Job",
                           "metadata": {"name": name}, "spec": spec}, sort_keys=False)


@pytest.fixture
def public() -> Iterator[Path]:
    """A directory every user of the machine may read (pytest's own are private): a root
    server composes a Job's RLinf config as an unprivileged uid that reads what the Workers
    could (tests/test_composer_jail.py), so a config the server is to read lies here."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rlark-preflight-", dir="/tmp"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def project(public) -> Path:
    """A directory with config/train.yaml (CONFIG) and config/broken.yaml (a YAML error)."""
    (public / "config").mkdir()
    (public / "config" / "train.yaml").write_text(CONFIG)
    (public / "config" / "broken.yaml").write_text("cluster: [1, 2\n")
    (public / "config" / "partial.yaml").write_text(
        "defaults:\n  - model: only_in_the_image\n  - _self_\n" + CONFIG)
    return public


@pytest.fixture
def store(rlark_home):
    st = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    yield st
    st.dispose()


@pytest.fixture
def svc(store):
    return JobService(store)


def n_jobs(store: Store) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(JobRow))


def codes(findings) -> list[str]:
    return [f["code"] if isinstance(f, dict) else f.code for f in findings]


# --- JobService.create --------------------------------------------------------------------------


def test_submit_refuses_workers_that_do_not_match_num_nodes(svc, store, project):
    with pytest.raises(Invalid) as exc:
        svc.create(job_yaml("short", pool=1, working_dir=str(project)))
    found = {f.code: f for f in exc.value.findings}
    assert "WorkersMismatch" in found
    assert "num_nodes = 3" in found["WorkersMismatch"].message
    assert n_jobs(store) == 0


def test_warnings_are_kept_on_the_job_and_as_events(svc, project):
    created = svc.create(job_yaml("ok", working_dir=str(project)))
    assert codes(created["findings"]) == ["PathNotMounted"]
    assert created["findings"][0]["severity"] == "warning"
    assert "runner.output_dir" in created["findings"][0]["message"]
    assert svc.get("ok")["findings"] == created["findings"]
    assert any(e["reason"] == "PathNotMounted" and e["type"] == "Warning" for e in svc.events("ok"))


def rlinf_findings(findings) -> list[tuple[str, str]]:
    return [(f.code, f.severity.value) for f in findings if f.code.startswith("RLinf")]


def test_a_config_that_is_not_here_is_a_warning_where_workers_have_an_image(project):
    from rlark.rlinf_config import preflight_job

    job = load_job(job_yaml("elsewhere", config_dir="image-only/config",
                            working_dir=str(project)).encode())[0]
    findings = preflight_job(job, filesystem=runtimes.profile("kubernetes").filesystem,
                             roots=[str(project)])
    assert rlinf_findings(findings) == [("RLinfConfigNotFound", "warning")]
    assert "only inside the image" in findings[0].message


def test_a_config_that_is_not_here_is_an_error_on_the_local_runtime(svc, store, project):
    """Issue 19 item 14: the local runtime uses no image, so a config that is not on this
    machine is not anywhere the Run could load it."""
    with pytest.raises(Invalid) as exc:
        svc.create(job_yaml("elsewhere", config_dir="image-only/config", working_dir=str(project)))
    [found] = exc.value.findings
    assert (found.code, found.severity.value) == ("RLinfConfigNotFound", "error")
    assert "the Workers run on this machine, with its files (no image)" in found.message
    assert "image-only/config" in found.message and "image" not in found.hint
    assert n_jobs(store) == 0


def test_a_config_outside_the_working_dir_is_not_read(svc, project):
    """Outside spec.workingDir and the server's config roots nothing is read: one warning."""
    created = svc.create(job_yaml("elsewhere", config_dir="/opt/only-in-image/config"))
    assert codes(created["findings"]) == ["RLinfConfigNotChecked"]
    assert created["findings"][0]["severity"] == "warning"
    assert "did not read it" in created["findings"][0]["message"]
    assert "inside the image" not in created["findings"][0]["message"]  # local: there is none


def test_config_needing_files_not_here_is_a_warning(svc, project):
    created = svc.create(job_yaml("partial", config_name="partial", working_dir=str(project)))
    assert codes(created["findings"]) == ["RLinfConfigIncomplete"]
    assert "only_in_the_image" in created["findings"][0]["message"]


def test_broken_config_is_refused(svc, store, project):
    with pytest.raises(Invalid) as exc:
        svc.create(job_yaml("broken", config_name="broken", working_dir=str(project)))
    assert codes(exc.value.findings) == ["RLinfConfigInvalid"]
    assert "broken.yaml" in exc.value.findings[0].message
    assert n_jobs(store) == 0


def test_relative_config_dir_needs_a_working_dir(svc):
    created = svc.create(job_yaml("nowd"))
    assert codes(created["findings"]) == ["RLinfConfigNotChecked"]


def test_job_without_rlinf_config_gets_no_rlinf_findings(svc):
    doc = yaml.safe_load(job_yaml("plain"))
    del doc["spec"]["rlinf"]
    assert svc.create(doc)["findings"] == []


def test_quickstart_passes(svc):
    job, findings = load_job(QUICKSTART.read_bytes())
    job = resolve_relative_paths(job, str(QUICKSTART.parent))
    created = svc.create(job.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert [f for f in created["findings"] if f["code"].startswith(("RLinf", "Workers", "Role",
                                                                    "Placement"))] == []


# --- REST --------------------------------------------------------------------------------------


@pytest.fixture
def client(store):
    with api_client(create_app(JobService(store)), admin_token(store)) as c:
        yield c


def test_api_refuses_with_422_and_findings(client, store, project):
    r = client.post("/api/v1/jobs", content=job_yaml("short", pool=1, working_dir=str(project)),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert "WorkersMismatch" in codes(r.json()["detail"]["findings"])
    assert n_jobs(store) == 0


def test_api_check_reports_without_storing(client, store, project):
    r = client.post("/api/v1/check", content=job_yaml("short", pool=1, working_dir=str(project)),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200
    assert r.json()["valid"] is False and "WorkersMismatch" in codes(r.json()["findings"])
    r = client.post("/api/v1/check", content=job_yaml("ok", working_dir=str(project)),
                    headers={"Content-Type": "application/yaml"})
    assert r.json() == {"valid": True, "findings": r.json()["findings"]}
    assert codes(r.json()["findings"]) == ["PathNotMounted"]
    assert client.post("/api/v1/check", content=b"").status_code == 422
    assert n_jobs(store) == 0


# --- CLI ---------------------------------------------------------------------------------------


def rlark(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "RLARK_SERVER"}
    base["COLUMNS"] = "200"
    proc = subprocess.run([sys.executable, "-m", "rlark.cli", *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def test_cli_plan_text_json_yaml(project):
    text = rlark("plan", "config/train.yaml", cwd=project)
    assert text.returncode == 0, text.stderr
    assert "Suggested roles" in text.stdout and "head  1" in text.stdout
    data = json.loads(rlark("plan", "config", "-c", "train", "-o", "json", cwd=project).stdout)
    assert data["num_nodes"] == 3 and data["node_groups"] == {"head": [0], "pool": [1, 2]}
    assert data["components"]["rollout"]["node_ranks"] == [1, 2]
    assert [(r["name"], r["workers"], r["node_ranks"]) for r in data["roles"]] == [
        ("head", 1, [0]), ("pool", 2, [1, 2])]
    assert data["job"]["spec"]["rlinf"] == {"configDir": "config", "configName": "train"}
    assert set(data) >= {"num_nodes", "node_groups", "components", "roles", "job", "findings"}
    as_yaml = yaml.safe_load(rlark("plan", "config/train.yaml", "-o", "yaml", cwd=project).stdout)
    assert as_yaml["roles"] == data["roles"]
    # -o job: only the Job, its run script a readable `|` block, the same Job as in the JSON
    job_text = rlark("plan", "config/train.yaml", "-o", "job", cwd=project).stdout
    assert "runScript: |" in job_text and yaml.safe_load(job_text) == data["job"]
    # the suggested Job, saved next to where plan ran, passes `rlark check`
    (project / "job.yaml").write_text(yaml.safe_dump(data["job"]))
    checked = rlark("check", "job.yaml", "-o", "json", cwd=project)
    assert checked.returncode == 0, checked.stdout
    # no server runs here: the check says which runtime checks it could not run
    assert codes(json.loads(checked.stdout)["findings"]) == ["PathNotMounted", "RuntimeNotChecked"]


def test_cli_plan_errors_exit_1(project):
    (project / "config" / "twice.yaml").write_text(
        "cluster: {num_nodes: 1, component_placement: {actor: all, 'actor,env': all}}\n")
    proc = rlark("plan", "config/twice.yaml", "-O", "cluster.num_nodes=1", cwd=project)
    assert proc.returncode == 1 and "ComponentPlacedTwice" in proc.stdout
    proc = rlark("plan", "config/nothing.yaml", "-o", "json", cwd=project)
    assert proc.returncode == 1
    assert codes(json.loads(proc.stdout)["findings"]) == ["RLinfConfigNotFound"]
    proc = rlark("plan", "config", cwd=project)
    assert proc.returncode == 1 and "--config-name" in proc.stderr
    proc = rlark("plan", "config/train.yaml", "-o", "xml", cwd=project)
    assert proc.returncode == 1 and "text, json, yaml or job" in proc.stderr


def test_cli_check(project):
    (project / "short.yaml").write_text(job_yaml("short", pool=1, working_dir="."))
    proc = rlark("check", "short.yaml", "-o", "json", cwd=project)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["valid"] is False and "WorkersMismatch" in codes(result["findings"])
    text = rlark("check", "short.yaml", cwd=project)
    assert text.returncode == 1 and "WorkersMismatch" in text.stdout and "invalid" in text.stdout
    # an explicit config that is not there is an error; overrides apply
    proc = rlark("check", "short.yaml", "--rlinf-config", "config/none.yaml", "-o", "json", cwd=project)
    assert proc.returncode == 1
    assert [(f["code"], f["severity"]) for f in json.loads(proc.stdout)["findings"]] == [
        ("RLinfConfigNotFound", "error"), ("RuntimeNotChecked", "info")]
    fixed = rlark("check", "short.yaml", "-O", "cluster.num_nodes=2", "-O",
                  "cluster.node_groups.1.node_ranks=1", "-O",
                  "cluster.component_placement.rollout.placement=0", "-o", "json", cwd=project)
    assert fixed.returncode == 0, fixed.stdout


def test_cli_check_quickstart():
    proc = rlark("check", str(QUICKSTART))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout


def test_cli_help_teaches():
    plan_help = rlark("plan", "--help").stdout
    for needle in ("--gpus-per-node", "--override", "node_groups", "head role", "Role names"):
        assert needle in plan_help, needle
    check_help = rlark("check", "--help").stdout
    for needle in ("--rlinf-config", "cluster.num_nodes", "placeholders", "status 1"):
        assert needle in check_help, needle


@pytest.fixture(scope="module")
def held_server(tmp_path_factory):
    """The module's server (tests/test_cli.py's :func:`~tests.test_cli.serve_held`)."""
    yield from serve_held(tmp_path_factory, "preflight-server")


@pytest.fixture
def server(held_server) -> LiveServer:
    return LiveServer.in_new_project(held_server)


def cli_on(server: LiveServer) -> dict:
    """The CLI's environment for ``server``: its URL, the test's project, and the
    ``$RLARK_HOME`` whose credentials hold the administrator's token for it."""
    return {"RLARK_SERVER": server.url, "RLARK_PROJECT": server.project,
            "RLARK_HOME": str(server.app.home)}


def test_cli_submit_refuses_and_describe_shows_warnings(server, project):
    (project / "short.yaml").write_text(job_yaml("short", pool=1, working_dir="."))
    # a CPU for each pool Worker: with the machine held the Run then waits, and no Worker starts
    ok = yaml.safe_load(job_yaml("ok", working_dir="."))
    ok["spec"]["roles"][1]["resources"] = {"cpu": 1}
    (project / "ok.yaml").write_text(yaml.safe_dump(ok))
    env = cli_on(server)
    refused = rlark("submit", "short.yaml", cwd=project, env=env)
    assert refused.returncode == 1 and "WorkersMismatch" in refused.stderr
    submitted = rlark("submit", "ok.yaml", cwd=project, env=env)
    assert submitted.returncode == 0, submitted.stderr
    assert "PathNotMounted" in submitted.stderr  # the server's warning is shown at once
    described = rlark("describe", "job", "ok", cwd=project, env=env)
    assert described.returncode == 0, described.stderr
    assert "PathNotMounted" in described.stdout and "runner.output_dir" in described.stdout
    assert server.names() == ["ok"]
    server.waiting("ok")  # queued behind the held machine: no Worker of it starts


def test_faq_examples_say_what_the_faq_shows():
    """docs/faq.md: one role per component is warned about; one role per node group is clean."""
    from rlark.rlinf_config import preflight_job

    docs = REPO / "docs" / "examples"
    for name, expected in (("job-per-component.yaml", ["RoleNamedLikeComponent"] * 2),
                           ("job-per-node-group.yaml", [])):
        job, findings = load_job((docs / name).read_bytes())
        assert job is not None and findings == []
        job = resolve_relative_paths(job, str(docs))
        assert codes(preflight_job(job)) == expected, name


@pytest.mark.parametrize("working_dir", ["/", "/etc", "/etc/ssl", "/tmp/../etc", "/usr/../etc/ssl"])
def test_a_working_dir_of_the_system_is_no_config_root(svc, working_dir):
    """The attack: ``workingDir: /`` (or /etc, or a path that resolves there) with a configDir
    pointing at any server file; the composer reads nothing there, one warning as for any path
    outside the roots (the answer never shows the file's values)."""
    created = svc.create(job_yaml("probe", config_dir="tmp/probe", working_dir=working_dir))
    assert codes(created["findings"]) == ["RLinfConfigNotChecked"]


# --- spec.rlinf.configName against the run script (issue 19 item 14) ----------------------------


@pytest.mark.parametrize("script,names", [
    ("python train.py --config-name ppo", ["ppo"]),
    ("python train.py --config-name=ppo.yaml --config-path conf", ["ppo.yaml"]),
    ("python train.py -cn ppo; python eval.py -cn=eval", ["ppo", "eval"]),
    ("python train.py \\\n    --config-name 'ppo' \\\n    algorithm.lr=1e-5", ["ppo"]),
    ("# python train.py --config-name old\npython train.py --config-name new", ["new"]),
    ("python train.py --config-name $CONFIG_NAME", []),  # the shell's, not known before
    ('python train.py --config-name "$(cat name)"', []),
    ("python train.py --config-name", []),
    ('echo "unbalanced', []),
])
def test_the_config_names_a_run_script_gives_hydra(script, names):
    from rlark.rlinf_config.script import hydra_config_names

    assert hydra_config_names(script) == names


def quickstart_with(config_name: str | None = None, script_name: str | None = None) -> str:
    """The quickstart Job with ``spec.rlinf.configName`` and/or the run script's
    ``--config-name`` changed."""
    text = QUICKSTART.read_text()
    if config_name is not None:
        text = text.replace("configName: quickstart", f"configName: {config_name}")
    if script_name is not None:
        text = text.replace("--config-name quickstart", f"--config-name {script_name}")
    return text


@pytest.mark.parametrize("config_name,script_name,mismatch", [
    ("quickstart", "quickstart", False),
    ("quickstart.yaml", "quickstart", False),
    ("quickstart", "groups/quickstart", False),  # a config group's path
    ("quickstrt", "quickstart", True),
    ("quickstart", "quickstrt", True),
])
def test_config_name_and_run_script_are_compared(config_name, script_name, mismatch):
    from rlark.preflight.job import validate_document

    _, findings = validate_document(quickstart_with(config_name, script_name))
    found = [f for f in findings if f.code == "RLinfConfigNameMismatch"]
    assert bool(found) == mismatch, findings
    if mismatch:
        [f] = found
        assert f.severity.value == "error" and f.path == "spec.rlinf.configName"
        assert f"spec.rlinf.configName = {config_name!r}" in f.message
        assert f"--config-name {script_name}" in f.message
        assert f.hint == (f"name the same config in both: spec.rlinf.configName: {script_name}, "
                          f"or --config-name {config_name} in spec.runScript")


def test_the_issues_typo_is_refused_by_validate_check_and_submit_on_the_local_runtime(server, public):
    """`configName: quickstrt` with the script's `--config-name quickstart`: was one warning ("may
    exist only inside the image") and a Run that trained with another config than its record
    names; now two errors, from every path that checks a Job (one list of checks)."""
    example = public / "quickstart"
    shutil.copytree(QUICKSTART.parent, example)
    (example / "typo.yaml").write_text(quickstart_with(config_name="quickstrt"))
    env = cli_on(server)
    for command in ("validate", "check"):
        proc = rlark(command, "typo.yaml", "-o", "json", cwd=example, env=env)
        assert proc.returncode == 1, proc.stdout
        errors = [(f["code"], f["path"]) for f in json.loads(proc.stdout)["findings"]
                  if f["severity"] == "error"]
        assert errors == [("RLinfConfigNameMismatch", "spec.rlinf.configName"),
                          ("RLinfConfigNotFound", "spec.rlinf")], (command, proc.stdout)
    submitted = rlark("submit", "typo.yaml", cwd=example, env=env)
    assert submitted.returncode == 1
    assert "spec.rlinf.configName = 'quickstrt' but spec.runScript starts RLinf with " \
           "--config-name quickstart" in submitted.stderr
    assert "quickstrt.yaml does not exist: the Workers run on this machine" in submitted.stderr
    assert server.names() == []
