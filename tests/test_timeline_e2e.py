"""A Run's timeline end to end (issue 25, item 1): a real ``rlark server`` on the local runtime
runs ONE one-Worker Job (one Ray node) to success; then its timeline through the API (spans in
order, ending at the Run's end), ``rlark describe --timeline`` (the text chart and ``-o json``)
and the Job page in Debian's Chromium (the SVG's one row, a span with its ``<title>``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime

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

NAME = "tl"
JOB = f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {NAME}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}", resources: {{cpu: 1}}, prepareScript: "sleep 1"}}
  runScript: sleep 2
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("timeline-home"))


@pytest.fixture(scope="module")
def finished(server) -> dict:
    """The Job once its one Run succeeded and its Worker ended."""
    server.submit(JOB)
    return server.succeeded(NAME)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_the_timeline_of_a_real_run_is_in_order_and_ends_at_the_runs_end(server, finished):
    r = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/timeline")
    assert r.status_code == 200, r.text
    tl = r.json()
    run = finished["currentRun"]
    assert tl["run"] == 1 and tl["phase"] == "Succeeded"
    assert tl["start"] == pytest.approx(epoch(run["createdAt"]), abs=1e-3)
    assert tl["end"] == pytest.approx(epoch(run["finishedAt"]), abs=1e-3)
    [worker] = tl["workers"]
    assert (worker["name"], worker["role"], worker["rank"]) == ("tl-head-0", "head", 0)
    assert worker["failure"] is None
    spans = worker["spans"]
    # every phase, from its own lifecycle lines, in order and contiguous
    assert [s["phase"] for s in spans] == ["Pending", "Preparing", "RayStarting", "Joined",
                                           "Running", "Exited"], spans
    for a, b in zip(spans, spans[1:]):
        assert a["start"] <= a["end"] == b["start"], spans
    # the prepare script slept 1 s, the run script 2 s
    preparing = next(s for s in spans if s["phase"] == "Preparing")
    running = next(s for s in spans if s["phase"] == "Running")
    assert preparing["end"] - preparing["start"] >= 1.0 and running["end"] - running["start"] >= 2.0
    # the barrier (one node: at once) before the run script; Running ends where the Run ends
    # (the run script's end), Exited lasts until the Worker's processes were gone
    assert tl["start"] <= tl["barrier"] <= tl["runStarted"] == running["start"]
    assert running["end"] == pytest.approx(tl["end"], abs=1e-3), (running, tl["end"])
    exited = spans[-1]
    assert tl["end"] <= exited["end"] <= epoch(run["workers"][0]["finishedAt"]) + 1e-3, \
        (exited, run["workers"][0])
    assert tl["slowest"] is None and tl["notJoined"] == []
    # the current Run's timeline is the same Run's
    assert server.http.get(f"/api/v1/jobs/{NAME}/timeline").json()["workers"] == tl["workers"]


def test_describe_timeline_draws_the_chart_and_gives_the_apis_json(server, finished):
    shown = server.cli("describe", NAME, "--timeline")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("Run 1 (Succeeded)") and "head" in lines
    [row] = [line for line in lines if "tl-head-0" in line]
    bars = row.split("tl-head-0", 1)[1]
    assert re.search(r"-+.*=+.*~*.*\|.*#+.*_*", bars), row  # Preparing .. barrier .. Running
    assert any(line.strip().startswith(".. Pending") for line in lines), lines
    as_json = server.cli("describe", NAME, "--timeline", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    api = server.http.get(f"/api/v1/jobs/{NAME}/timeline").json()
    assert {k: v for k, v in json.loads(as_json.stdout).items() if k != "now"} == \
        {k: v for k, v in api.items() if k != "now"}
    missing = server.cli("describe", NAME, "--timeline", "--run", "2")
    assert missing.returncode != 0 and "no run 2" in missing.stderr, missing.stderr


def test_the_job_page_draws_one_row_per_worker_with_titled_spans(ui, finished):
    page = ui.go(f"/jobs/{NAME}")
    chart = page.locator("svg.timeline")
    expect(chart).to_be_visible()
    expect(chart.locator("g.tl-row")).to_have_count(1)
    expect(chart.locator("g.tl-row")).to_have_attribute("data-worker", "tl-head-0")
    running = chart.locator("rect.tl-span[data-phase=Running]")
    expect(running).to_have_count(1)
    title = running.locator("title").text_content()
    assert re.fullmatch(r"tl-head-0 \(rank 0\): Running \d\d:\d\d:\d\d\.\d{3} UTC → "
                        r"\d\d:\d\d:\d\d\.\d{3} UTC \(\d+\.\d s\)", title or ""), title
    assert running.bounding_box()["width"] > 10  # drawn, at a visible size
    expect(chart.locator("line.tl-barrier")).to_have_count(1)
    # the chart is no Events list: none of that list's left rule (they once shared a class)
    assert chart.evaluate("e => getComputedStyle(e).borderLeftWidth") == "0px"
    expect(page.locator(".tl-legend li")).to_have_count(8)
    page.locator("#timeline").scroll_into_view_if_needed()
    ui.shot("job-timeline", full=False)
