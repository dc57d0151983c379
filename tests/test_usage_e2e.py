"""A Run's resource use end to end (issue 25, items 3 and 6): a real ``rlark server`` on the
local runtime runs ONE two-Worker Job (two Ray nodes: the fewest that show one series per
Worker) whose run script, on the head, burns CPU and holds memory for a few seconds while the
other Worker only keeps its Ray node; then the Workers' samples through the API (two or more
each, CPU and memory above 0, no GPU on this machine: shown as absent), ``rlark top`` (the table
and ``-o json``), the Job page's Resources tab over plain HTTP (an SVG chart per metric) and in
Debian's Chromium: one chart group per Worker, each line with exactly the samples the API gives,
in English and in Chinese (no English left), whose screenshots are the README's
(artifacts/screenshots/job-resources.png, zh-job-resources.png; copied to docs/console/); and
the overview's timeline of the same Run, a row per Worker.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.server import serve
from tests.test_console_browser import (  # noqa: F401 (the browser's fixtures)
    IMAGE,
    SHOTS,
    browser_context_args,
    browser_type_launch_args,
    expect,
    ui,
)
from tests.test_console_zh_browser import english_left

# Every test takes the browser's session-scoped parameter (pytest-playwright's browser_name), not
# only the browser tests: pytest moves the tests of such a parameter next to each other across
# modules, which split this module in two and set its Job up twice (once per part).
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("browser_name")]

NAME = "use"
# the keeper samples every 5 s (its default): 12 s of work span two samples or more
BURN = ("import time; x = bytearray(200 << 20); x[::4096] = b'1' * len(x[::4096]); "
        "end = time.time() + 12; [0 for _ in iter(lambda: time.time() < end, False)]")
JOB = f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {NAME}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - name: head
      workers: 1
      image: "{IMAGE}"
      resources: {{cpu: 1}}
    - name: idle
      workers: 1
      image: "{IMAGE}"
      resources: {{cpu: 0.5}}
  runScript: |
    {sys.executable} -c "{BURN}"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("usage-home"))


@pytest.fixture(scope="module")
def finished(server) -> dict:
    """The Job once its one Run succeeded and its Worker ended."""
    server.submit(JOB)
    return server.succeeded(NAME)


def test_the_api_has_the_workers_samples_with_cpu_and_memory_and_no_gpu(server, finished):
    r = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/usage")
    assert r.status_code == 200, r.text
    usage = r.json()
    head, idle = usage["workers"]
    assert (head["name"], head["role"], head["rank"], usage["run"]) == ("use-head-0", "head", 0, 1)
    assert (idle["name"], idle["role"], idle["rank"]) == ("use-idle-0", "idle", 1)
    for w in (head, idle):
        points = w["points"]
        assert len(points) >= 2, usage
        assert all(p[1] >= 0 for p in points) and all(p[2] > 0 for p in points), points
        assert all(p[3] is None for p in points) and w["gpus"] == 0 and w["latest"]["gpu"] is None
        assert w["peak"]["cpu"] == max(p[1] for p in points)
    # the run script burnt a core and held 200 MiB on the head (the other Worker's Ray node
    # alone may take as much CPU while it starts: no comparison of the two)
    assert max(p[1] for p in head["points"]) > 0.3, head["points"]
    assert max(p[2] for p in head["points"]) > 200 << 20, head["points"]
    assert usage["idleGpus"] == []
    assert server.http.get(f"/api/v1/jobs/{NAME}/usage").json() == usage
    assert server.http.get(f"/api/v1/jobs/{NAME}/runs/2/usage").status_code == 404


def test_rlark_top_prints_the_latest_sample_and_the_peak(server, finished):
    shown = server.cli("top", NAME)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()[:3]
    assert header.split()[:4] == ["WORKER", "ROLE", "RANK", "CPU(cores)"], header
    assert [r.split()[:3] for r in rows] == [["use-head-0", "head", "0"],
                                             ["use-idle-0", "idle", "1"]], rows
    assert all("iB" in r for r in rows), rows
    as_json = server.cli("top", f"{NAME}:1", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == server.http.get(f"/api/v1/jobs/{NAME}/usage").json()


def test_the_job_page_charts_the_workers_cpu_and_memory(server, finished):
    r = server.http.get(f"/jobs/{NAME}", params={"tab": "resources"})
    assert r.status_code == 200, r.text
    html = r.text
    assert 'aria-current="page" data-tab="resources"' in html
    for worker in ("use-head-0", "use-idle-0"):
        assert f'data-worker="{worker}"' in html
    for metric in ("cpu", "memory"):
        assert html.count(f'data-metric="{metric}"') == 2
    assert 'data-metric="gpu-util"' not in html  # no GPU: absent, not zeros
    assert html.count("<polyline") == 4 and 'class="cv-dot' in html


def test_the_resources_tab_draws_each_workers_samples_in_the_browser(ui, server, finished):
    usage = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/usage").json()
    page = ui.go(f"/jobs/{NAME}?tab=resources")
    groups = page.locator("#usage .us-worker")
    expect(groups).to_have_count(2)
    for i, w in enumerate(usage["workers"]):
        group = groups.nth(i)
        assert group.get_attribute("data-worker") == w["name"]
        assert group.get_attribute("data-samples") == str(len(w["points"]))
        cpu = group.locator('figure[data-metric="cpu"] svg.curve')
        expect(cpu.locator("polyline.cv-line")).to_have_count(1)  # one series: this Worker's
        assert cpu.locator("polyline.cv-line").bounding_box()["width"] > 100  # drawn, visibly
        dots = cpu.locator("circle.cv-dot")
        expect(dots).to_have_count(len(w["points"]))
        t0 = w["points"][0][0]
        got = [(float(d.get_attribute("data-t")), float(d.get_attribute("data-value")))
               for d in dots.all()]
        assert got == [(round(p[0] - t0, 1), p[1]) for p in w["points"]], (got, w["points"])
        memory = group.locator('figure[data-metric="memory"] circle.cv-dot')
        expect(memory).to_have_count(len(w["points"]))
        assert group.locator('figure[data-metric^="gpu"]').count() == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#usage").screenshot(path=str(SHOTS / "job-resources.png"))

    ui.go(f"/lang/zh-CN?next=/jobs/{NAME}%3Ftab%3Dresources")
    expect(page.locator("#h-usage")).to_have_text("资源使用")
    expect(page.locator("#usage .us-worker")).to_have_count(2)
    names = {NAME, "head", "idle", "use-head-0", "use-idle-0", "default", "admin"}
    assert not english_left(page, names), english_left(page, names)
    page.locator("#usage").screenshot(path=str(SHOTS / "zh-job-resources.png"))


def test_the_job_pages_timeline_has_one_row_per_worker_of_the_real_run(ui, finished):
    """Issue 25, item 6 on this module's two-Worker Run: the overview's timeline draws a row per
    Worker, grouped by role, each with its Running or Joined span titled with its times."""
    page = ui.go(f"/jobs/{NAME}")
    rows = page.locator("svg.timeline g.tl-row")
    expect(rows).to_have_count(2)
    assert [rows.nth(i).get_attribute("data-worker") for i in range(2)] == ["use-head-0",
                                                                           "use-idle-0"]
    assert page.locator("svg.timeline text.tl-role").all_text_contents() == ["head", "idle"]
    running = rows.nth(0).locator("rect.tl-span[data-phase=Running] title").text_content()
    assert running.startswith("use-head-0 (rank 0): Running "), running
    joined = rows.nth(1).locator("rect.tl-span[data-phase=Joined] title").text_content()
    assert joined.startswith("use-idle-0 (rank 1): Joined "), joined
