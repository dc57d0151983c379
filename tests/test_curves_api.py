"""A Run's training curves through the API, ``rlark metrics`` and the console (issue 25, item
2), without Ray: a local Job whose spec names a real Hydra config (``runner.logger.log_path:
results``, composed by RLark as for any live Run) and event files written by tensorboard's own
writer where RLinf's MetricLogger writes them; the API and console served by uvicorn."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from rlark.services.jobs import JobService
from rlark.store import Store
from tests.curves_data import POINTS, write_events
from tests.server import ThreadedServer
from tests.test_api import set_run_state
from tests.test_cli import cli_env, rlark
from tests.test_console import HOST
from tests.test_curves import expected

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def job_yaml(name: str, work) -> str:
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  workingDir: {work}
  rlinf: {{configDir: config, configName: train}}
  roles:
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0"}}
  runScript: "python train.py"
"""


@pytest.fixture
def work(tmp_path):
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "runner:\n  logger:\n    log_path: results\n    experiment_name: tiny\n")
    return work


@pytest.fixture
def server(rlark_home, work):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store, host=HOST)
    service.create(job_yaml("tiny", work))
    srv = ThreadedServer(service).start()
    srv.service = service
    yield srv
    srv.stop()
    store.dispose()


def get(server, path: str, **params):
    import httpx

    return httpx.get(server.url + path, params=params,
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
    shown = rlark("metrics", "tiny", env=cli_env(RLARK_SERVER=server.url))
    assert shown.returncode == 1 and data["why"] in shown.stderr.replace("\n", ""), shown.stderr


def test_rlark_metrics_prints_json_csv_and_a_summary(server, work):
    write_events(work / "results" / "tensorboard")
    env = cli_env(RLARK_SERVER=server.url)
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
    headers = {"Authorization": f"Bearer {server.token}"}
    import httpx

    page = httpx.get(f"{server.url}/jobs/tiny", params={"tab": "curves"}, headers=headers)
    assert page.status_code == 200
    html = page.text
    # the key metrics by default, rollout/rewards first; every point a dot with its step/value
    assert html.index('data-tag="rollout/rewards"') < html.index('data-tag="train/actor/policy_loss"')
    assert 'data-tag="time/step"' not in html
    for step, values in POINTS.items():
        assert f'data-step="{step}" data-value="{values["rollout/rewards"]}"' in html
    # the Run is under way: the section refreshes itself
    assert 'hx-get="/jobs/tiny/_curves?run=1"' in html
    chosen = httpx.get(f"{server.url}/jobs/tiny/_curves", params={"run": 1, "tag": "time/step"},
                       headers=headers).text
    assert 'data-tag="time/step"' in chosen and 'data-tag="rollout/rewards"' not in chosen
    set_run_state(server.service.store, "tiny", "Succeeded")
    assert "hx-get" not in httpx.get(f"{server.url}/jobs/tiny/_curves", params={"run": 1},
                                     headers=headers).text
    # a second Run of the Job with its own file: the comparison overlays the two
    server.service.restart("tiny")
    shutil.rmtree(work / "results")
    write_events(work / "results" / "tensorboard", {0: {"rollout/rewards": 9.0}})
    cmp = httpx.get(f"{server.url}/jobs/tiny/compare", params={"a": "tiny:1", "b": "tiny:2"},
                    headers=headers).text
    assert cmp.count('class="cv-series" data-run="tiny:') == 2
    assert 'data-step="0" data-value="9.0"' in cmp
