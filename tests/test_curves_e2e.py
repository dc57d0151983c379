"""A Run's training curves end to end (issue 25, item 2): a real ``rlark server`` on the local
runtime runs ONE one-Worker Job (one Ray node) whose spec names a minimal RLinf-style Hydra
config (``runner.logger.log_path: results``) and whose run script writes a small event file
where RLinf's MetricLogger would (``results/tensorboard``, below the working directory, as the
head Worker sees it), with tensorboard's own writer; then the API, ``rlark metrics -o json`` and
the Job page's Curves tab in Debian's Chromium show exactly those points.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.server import serve
from tests.test_console_browser import (  # noqa: F401 (the browser's fixtures)
    IMAGE,
    browser_context_args,
    browser_type_launch_args,
    expect,
    ui,
)

pytestmark = pytest.mark.ray

NAME = "curves"
#: what the run script logs: step -> {tag: value}
LOGGED = {0: {"rollout/rewards": 0.25, "env/success_once": 0.0},
          1: {"rollout/rewards": 0.5, "env/success_once": 0.5},
          2: {"rollout/rewards": 1.0, "env/success_once": 1.0}}
TRAIN = f"""
import time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

w = EventFileWriter("results/tensorboard")
for step, values in {LOGGED!r}.items():
    s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v)
                                   for t, v in values.items()])
    w.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=s))
w.close()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("curves-home"))


@pytest.fixture(scope="module")
def finished(server, tmp_path_factory) -> dict:
    """The Job once its one Run succeeded and its Worker ended."""
    work = tmp_path_factory.mktemp("curves-work")
    work.chmod(0o755)
    (work / "config").mkdir()
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "runner:\n  logger:\n    log_path: results\n    experiment_name: tiny\n")
    (work / "train.py").write_text(TRAIN)
    server.submit(f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {NAME}}}
spec:
  headRole: head
  workingDir: {work}
  rlinf: {{configDir: config, configName: train}}
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}", resources: {{cpu: 1}}}}
  runScript: {sys.executable} train.py
""")
    return server.succeeded(NAME)


def points() -> dict[str, list[list]]:
    out: dict[str, list[list]] = {}
    for step, values in LOGGED.items():
        for tag, value in values.items():
            out.setdefault(tag, []).append([step, value])
    return out


def test_the_api_and_rlark_metrics_give_the_points_the_run_wrote(server, finished):
    r = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/scalars")
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["why"] is None and data["scalars"] == points(), data
    assert data["path"].endswith("/results/tensorboard") and len(data["files"]) == 1
    shown = server.cli("metrics", f"{NAME}:1", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["scalars"] == points()


def test_the_job_pages_curves_tab_draws_those_points(ui, finished):
    page = ui.go(f"/jobs/{NAME}?tab=curves")
    chart = page.locator('figure.cv-chart[data-tag="rollout/rewards"] svg.curve')
    expect(chart).to_be_visible()
    dots = chart.locator("circle.cv-dot")
    expect(dots).to_have_count(3)
    got = [[int(d.get_attribute("data-step")), float(d.get_attribute("data-value"))]
           for d in dots.all()]
    assert got == points()["rollout/rewards"]
    assert chart.locator("polyline.cv-line").bounding_box()["width"] > 100  # drawn, visibly
    expect(page.locator('figure.cv-chart[data-tag="env/success_once"] circle.cv-dot')
           ).to_have_count(3)
    page.locator("#curves").scroll_into_view_if_needed()
    ui.shot("job-curves", full=False)
