"""The Job page's charts in Simplified Chinese, in Debian's Chromium (issue 25, item 6): the
timeline of a four-Worker Run and the Curves tab of a Run with event files show no English a
reader of Chinese would have to read (tests/english.py's rule, tests/test_console_zh_browser.py's
reading of a page), and their screenshots are the README's Chinese ones
(artifacts/screenshots/zh-job-timeline.png, zh-job-curves.png; copied to docs/console/); and
the comparison of two Runs overlays their curves, one line each with the points of its own
event file, in English and in Chinese (compare-curves.png, zh-compare-curves.png).

Without Ray: the API and console served by uvicorn (no controller), the Workers' moments and
the event files written as tests/test_timeline_browser.py and tests/test_curves_api.py write
them (tensorboard's own writer, where RLinf's MetricLogger writes).
"""

from __future__ import annotations

import pytest

from rlark.services.jobs import JobService
from rlark.store import Store
from tests.curves_data import POINTS, write_events
from tests.server import ThreadedServer
from tests.test_console import HOST
from tests.test_console_browser import (  # noqa: F401 (the browser's fixtures)
    SHOTS,
    browser_context_args,
    browser_type_launch_args,
    expect,
    ui,
)
from tests.test_console_zh_browser import english_left
from tests.test_curves_api import job_yaml
from tests.test_timeline_browser import MOMENTS, held_up_run

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: the second Job's metrics: rewards that grow faster
OTHER_POINTS = {step: {tag: (v * 1.5 if tag == "rollout/rewards" else v)
                       for tag, v in values.items()} for step, values in POINTS.items()}


@pytest.fixture
def server(rlark_home, tmp_path):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store, host=HOST)
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    work.chmod(0o755)
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "runner:\n  logger:\n    log_path: results\n    experiment_name: tiny\n")
    service.create(job_yaml("tiny", work))
    write_events(work / "results" / "tensorboard")
    # a second Job with its own event file: the comparison overlays the two Runs' curves
    other = tmp_path / "other"
    (other / "config").mkdir(parents=True)
    other.chmod(0o755)
    (other / "config" / "train.yaml").write_text((work / "config" / "train.yaml").read_text())
    service.create(job_yaml("tiny-b", other))
    write_events(other / "results" / "tensorboard", OTHER_POINTS)
    held_up_run(service)
    srv = ThreadedServer(service).start()
    yield srv
    srv.stop()
    store.dispose()


def test_the_timeline_and_the_curves_in_chinese_have_no_english_left(ui):
    names = {"held", "tiny", "head", "pool", *MOMENTS, "tiny-head-0", "default", "admin"}
    ui.go("/lang/zh-CN?next=/jobs")
    page = ui.go("/jobs/held")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    chart = page.locator("svg.timeline")
    expect(chart.locator("g.tl-row")).to_have_count(4)
    expect(page.locator("#h-timeline")).to_have_text("时间线")
    assert page.locator(".tl-legend li").first.text_content().strip() == "等待调度"
    left = english_left(page, names)
    # the Run's message is the fixture's own text (held_up_run), not one the server writes
    assert all("Worker held-pool-1 (rank 2) failed" in x for x in left), left
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#timeline").screenshot(path=str(SHOTS / "zh-job-timeline.png"))

    page = ui.go("/jobs/tiny?tab=curves")
    expect(page.locator("#h-curves")).to_have_text("训练曲线")
    charts = page.locator("figure.cv-chart")
    expect(charts).to_have_count(2)  # the key metrics the Run has
    rewards = charts.locator("circle.cv-dot").first
    assert rewards.get_attribute("data-value") == str(POINTS[0]["rollout/rewards"])
    assert not english_left(page, names), english_left(page, names)
    ui.shot("zh-job-curves", full=False)


def test_the_comparison_overlays_two_runs_curves_in_english_and_chinese(ui):
    page = ui.go("/jobs/tiny/compare?a=tiny&b=tiny-b")
    chart = page.locator('#curves figure.cv-chart[data-tag="rollout/rewards"] svg.curve')
    series = chart.locator("g.cv-series")
    expect(series).to_have_count(2)
    for i, (run, points) in enumerate((("tiny:1", POINTS), ("tiny-b:1", OTHER_POINTS))):
        assert series.nth(i).get_attribute("data-run") == run
        dots = series.nth(i).locator("circle.cv-dot")
        got = [(int(d.get_attribute("data-step")), float(d.get_attribute("data-value")))
               for d in dots.all()]
        assert got == [(s, v["rollout/rewards"]) for s, v in points.items()], (run, got)
        assert series.nth(i).locator("polyline").bounding_box()["width"] > 100
    expect(page.locator("#curves .tl-legend li")).to_have_count(2)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#curves").screenshot(path=str(SHOTS / "compare-curves.png"))

    ui.go("/lang/zh-CN?next=/jobs/tiny/compare%3Fa%3Dtiny%26b%3Dtiny-b")
    expect(page.locator("#h-curves")).to_have_text("训练曲线")
    expect(chart.locator("g.cv-series")).to_have_count(2)
    names = {"tiny", "tiny-b", "tiny:1", "tiny-b:1", "default", "admin"}
    assert not english_left(page, names), english_left(page, names)
    page.locator("#curves").screenshot(path=str(SHOTS / "zh-compare-curves.png"))
