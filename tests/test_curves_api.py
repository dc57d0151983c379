"""A Run's training curves through the API, ``rlark metrics`` and the console (issue 25, item
2), without Ray: a local Job whose spec names a real Hydra config (``runner.logger.log_path:
results``, composed by RLark as for any live Run) and event files written by tensorboard's own
writer where RLinf's MetricLogger writes them. The server is the one ``rlark server`` builds
(tests/server.py AppServer, its controller running), one for the module with the machine held
(tests/test_cli.py's ``serve_held``): each test's Job waits in the admission queue, its Run
under way, until the controller stops it; each test in a project of its own."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.curves_data import POINTS, write_events
from tests.test_cli import LiveServer, rlark, serve_held
from tests.test_curves import expected

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def job_yaml(name: str, work) -> str:
    # a CPU asked: with the machine held, the Run waits for capacity and starts no Worker
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  workingDir: {work}
  rlinf: {{configDir: config, configName: train}}
  roles:
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1}}}}
  runScript: "python train.py"
"""


@pytest.fixture
def work() -> Iterator[Path]:
    """The Job's working directory, where every user of the machine may read (pytest's own are
    private): a root server composes the config as an unprivileged uid that reads what the
    Workers could (tests/test_composer_jail.py)."""
    top = Path(tempfile.mkdtemp(prefix="rlark-curves-", dir="/tmp"))
    top.chmod(0o755)
    work = top / "work"
    (work / "config").mkdir(parents=True)
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "runner:\n  logger:\n    log_path: results\n    experiment_name: tiny\n")
    yield work
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def held_server(tmp_path_factory):
    """The module's server (tests/test_cli.py's :func:`~tests.test_cli.serve_held`)."""
    yield from serve_held(tmp_path_factory, "curves-server")


@pytest.fixture
def server(held_server, work) -> LiveServer:
    """The test's project on the module's server, with the Job ``tiny`` submitted there."""
    srv = LiveServer.in_new_project(held_server)
    r = held_server.http.post("/api/v1/jobs", params={"project": srv.project},
                              content=job_yaml("tiny", work).encode(),
                              headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return srv


def get(server: LiveServer, path: str, **params):
    """``GET path`` in the test's project, with the administrator's token."""
    import httpx

    return httpx.get(server.url + path, params={"project": server.project, **params},
                     headers={"Authorization": f"Bearer {server.token}"}, timeout=30)


def test_the_api_gives_the_points_of_the_event_files_where_rlinf_writes_them(server, work):
    f = write_events(work / "results" / "tensorboard", tensors=["time/step"])
    r = get(server, "/api/v1/jobs/tiny/runs/1/scalars")
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["scalars"] == expected() and data["why"] is None
    assert data["path"] == str(work / "results" / "tensorboard") == data["at"]
    assert data["files"] == [f.name] and data["tags"] == sorted(expected())
    assert get(server, "/api/v1/jobs/tiny/scalars").json()["scalars"] == expected()
    only = get(server, "/api/v1/jobs/tiny/scalars", tag=["rollout/rewards", "nope"]).json()
    assert only["scalars"] == {"rollout/rewards": expected()["rollout/rewards"]}
    assert get(server, "/api/v1/jobs/tiny/runs/9/scalars").status_code == 404
    assert get(server, "/api/v1/jobs/nope/scalars").status_code == 404


def test_a_run_without_event_files_says_so_with_the_path_looked_at(server, work):
    data = get(server, "/api/v1/jobs/tiny/scalars").json()
    assert data["scalars"] == {} and str(work / "results" / "tensorboard") in data["why"]
    (work / "results" / "tensorboard").mkdir(parents=True)
    data = get(server, "/api/v1/jobs/tiny/scalars").json()
    assert data["why"] == (f"no event files for this Run in {work}/results/tensorboard "
                           f"(this machine's file system, {work}/results/tensorboard)")
    shown = rlark("metrics", "tiny", env=server.env())
    assert shown.returncode == 1 and data["why"] in shown.stderr.replace("\n", ""), shown.stderr


def test_rlark_metrics_prints_json_csv_and_a_summary(server, work):
    write_events(work / "results" / "tensorboard")
    env = server.env()
    as_json = rlark("metrics", "tiny:1", "-o", "json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["scalars"] == expected()
    as_csv = rlark("metrics", "tiny", "--tag", "rollout/rewards", "-o", "csv", env=env)
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows == [["tag", "step", "value"]] + [
        ["rollout/rewards", str(s), json.dumps(v["rollout/rewards"])] for s, v in POINTS.items()]
    text = rlark("metrics", "tiny", env=env)
    assert text.returncode == 0, text.stderr
    [row] = [line.split() for line in text.stdout.splitlines() if line.startswith("rollout/rewards")]
    assert row == ["rollout/rewards", "3", "0..2", "1.5", "0.5", "1.5"]
    bad = rlark("metrics", "tiny:x", env=env)
    assert bad.returncode != 0 and "is not JOB or JOB:RUN" in bad.stderr
    missing = rlark("metrics", "tiny", "--tag", "nope", env=env)
    assert missing.returncode == 1 and "no such tag in tiny run 1: nope" in missing.stderr


def test_the_job_pages_curves_tab_and_the_comparison_draw_the_points(server, work):
    write_events(work / "results" / "tensorboard")
    project = server.project
    page = get(server, "/jobs/tiny", tab="curves")
    assert page.status_code == 200
    html = page.text
    # the key metrics by default, rollout/rewards first; every point a dot with its step/value
    assert html.index('data-tag="rollout/rewards"') < html.index('data-tag="train/actor/policy_loss"')
    assert 'data-tag="time/step"' not in html
    for step, values in POINTS.items():
        assert f'data-step="{step}" data-value="{values["rollout/rewards"]}"' in html
    # the Run is under way (waiting for capacity): the section refreshes itself
    assert f'hx-get="/jobs/tiny/_curves?run=1&amp;project={project}"' in html
    chosen = get(server, "/jobs/tiny/_curves", run=1, tag="time/step").text
    assert 'data-tag="time/step"' in chosen and 'data-tag="rollout/rewards"' not in chosen
    r = server.app.http.post("/api/v1/jobs/tiny/stop", params={"project": project})
    assert r.status_code == 200, r.text
    server.stopped("tiny")  # ended by the controller
    assert "hx-get" not in get(server, "/jobs/tiny/_curves", run=1).text
    # a second Run of the Job with its own file: the comparison overlays the two
    r = server.app.http.post("/api/v1/jobs/tiny/restart", params={"project": project})
    assert r.status_code == 200, r.text
    shutil.rmtree(work / "results")
    write_events(work / "results" / "tensorboard", {0: {"rollout/rewards": 9.0}})
    cmp = get(server, "/jobs/tiny/compare", a="tiny:1", b="tiny:2").text
    assert cmp.count('class="cv-series" data-run="tiny:') == 2
    assert 'data-step="0" data-value="9.0"' in cmp
