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

# Every test takes the browser's session-scoped parameter (pytest-playwright's browser_name), not
# only the browser tests: pytest moves the tests of such a parameter next to each other across
# modules, which split this module in two and set its Job up twice (once per part).
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("browser_name")]

NAME = "curves"
#: what the run script logs: step -> {tag: value}
LOGGED = {0: {"rollout/rewards": 0.25, "env/success_once": 0.0},
          1: {"rollout/rewards": 0.5, "env/success_once": 0.5},
          2: {"rollout/rewards": 1.0, "env/success_once": 1.0}}


def train(log: str) -> str:
    """A run script's program that logs :data:`LOGGED` with tensorboard's own writer into
    ``<log>/tensorboard``, where RLinf's MetricLogger writes for ``log_path: <log>``."""
    return f"""
import time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

w = EventFileWriter({log + "/tensorboard"!r})
for step, values in {LOGGED!r}.items():
    s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v)
                                   for t, v in values.items()])
    w.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=s))
w.close()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("curves-home"))


def working_dir(tmp_path_factory, name: str, script: str, program: str):
    """A Job's working directory: a minimal RLinf-style config (``config/train.yaml``, the
    logger under ``results``) and the run script's ``program``, readable by the Worker's uid."""
    work = tmp_path_factory.mktemp(name)
    work.chmod(0o755)
    (work / "config").mkdir()
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        f"runner:\n  logger:\n    log_path: results\n    experiment_name: {name}\n")
    (work / script).write_text(program)
    return work


@pytest.fixture(scope="module")
def finished(server, tmp_path_factory) -> dict:
    """The Job once its one Run succeeded and its Worker ended."""
    work = working_dir(tmp_path_factory, "curves-work", "train.py", train("results"))
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


#: a run script that logs step 0, flushes, waits for the test's go (a file in a directory both
#: share), then logs steps 1 and 2 and waits for the test's end
LIVE = """
import os, sys, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

share = sys.argv[1]
w = EventFileWriter("results/tensorboard")

def log(step, value):
    s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="rollout/rewards",
                                                             simple_value=value)])
    w.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=s))
    w.flush()

log(0, 0.1)
end = time.monotonic() + 240
while not os.path.exists(os.path.join(share, "go")) and time.monotonic() < end:
    time.sleep(0.2)
log(1, 0.2)
log(2, 0.4)
while not os.path.exists(os.path.join(share, "end")) and time.monotonic() < end:
    time.sleep(0.2)
w.close()
"""


def test_the_curves_tab_of_a_live_run_grows_without_a_reload(server, ui, tmp_path_factory):
    """The Curves tab of a Running Run polls (htmx, every 5 s): the points the run script logs
    after the page was opened appear on it, the page never reloaded."""
    work = working_dir(tmp_path_factory, "curves-live", "live.py", LIVE)
    share = tmp_path_factory.mktemp("curves-share")
    share.chmod(0o1777)  # the Worker runs under a uid of its own
    server.submit(f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: live-curves}}
spec:
  headRole: head
  workingDir: {work}
  rlinf: {{configDir: config, configName: train}}
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - name: head
      workers: 1
      image: "{IMAGE}"
      resources: {{cpu: 1}}
      mounts: [{{name: share, type: hostPath, source: "{share}", mountPath: "{share}"}}]
  runScript: {sys.executable} live.py {share}
""")
    try:
        server.wait_phase("live-curves", {"Running"}, timeout=120)
        page = ui.go("/jobs/live-curves?tab=curves")
        dots = page.locator('figure.cv-chart[data-tag="rollout/rewards"] circle.cv-dot')
        expect(dots).to_have_count(1, timeout=30_000)  # step 0, once the tab's read found it
        page.evaluate("window.__notReloaded = true")
        (share / "go").write_text("")
        expect(dots).to_have_count(3, timeout=30_000)
        assert page.evaluate("window.__notReloaded === true")  # the same document, updated
        assert [int(d.get_attribute("data-step")) for d in dots.all()] == [0, 1, 2]
    finally:
        (share / "end").write_text("")
    assert server.succeeded("live-curves")["phase"] == "Succeeded"
