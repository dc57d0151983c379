"""The Job page's timeline of a four-Worker Run in Debian's Chromium, without Ray: the API and
console served by uvicorn (no controller), the Workers' moments written into the Store as the
controller keeps them: a Worker whose Ray node came up 14 s after the others held the Run up, and
another failed. The chart has one row per Worker grouped by role, titled spans, the barrier and
the failure; its screenshot is the README's (artifacts/screenshots/job-timeline-4.png).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from rlark.services.jobs import JobService
from rlark.store import JobRow, RunRow, Store
from tests.server import ThreadedServer
from tests.test_console import HOST, job_doc
from tests.test_console_browser import (  # noqa: F401 (the browser's fixtures)
    SHOTS,
    browser_context_args,
    browser_type_launch_args,
    expect,
    ui,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: seconds after the Run's creation: the head, two quick Workers and one that held the Run up
MOMENTS = {
    "held-head-0": {"keeper": 1.0, "Preparing": 1.2, "Prepared": 6, "StartingRay": 6.1,
                    "RayStarted": 9, "Joining": 9.1, "AllJoined": 23.5, "running": 24,
                    "failed": 52, "exit": 54},
    "held-pool-0": {"keeper": 1.5, "Preparing": 1.6, "Prepared": 6.5, "WaitingForHead": 6.6,
                    "StartingRay": 6.7, "RayStarted": 10, "stopped": 52.5, "exit": 55},
    "held-pool-1": {"keeper": 1.4, "Preparing": 1.5, "Prepared": 7, "WaitingForHead": 7.1,
                    "StartingRay": 7.2, "RayStarted": 10.5, "failed": 51, "exit": 51.5},
    "held-pool-2": {"keeper": 4.0, "Preparing": 4.2, "Prepared": 19, "WaitingForHead": 19.1,
                    "StartingRay": 19.2, "RayStarted": 23, "stopped": 52.5, "exit": 56},
}


@pytest.fixture
def server(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store, host=HOST)
    srv = ThreadedServer(service).start()
    srv.service = service
    yield srv
    srv.stop()
    store.dispose()


def held_up_run(service: JobService) -> None:
    """Job ``held`` (head + 3 pool Workers), its Run failed after pool-1 lost its node."""
    service.create(job_doc("held", workers=3))
    t0 = time.time() - 120
    with service.store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == "held"))
        run = s.get(RunRow, job.current_run_id)
        run.created_at = datetime.fromtimestamp(t0, timezone.utc)
        run.finished_at = datetime.fromtimestamp(t0 + 57, timezone.utc)
        for row in (job, run):
            row.phase, row.reason = "Failed", "WorkerLost"
            row.message = "Worker held-pool-1 (rank 2) failed: its Ray node is gone"
        for w in run.workers:
            life: dict = {"times": {k: t0 + v for k, v in MOMENTS[w.name].items()}, "gone": True}
            if "failed" in MOMENTS[w.name]:
                life["failed"] = {"reason": "NodeLost" if "pool" in w.name else "RunFailed",
                                  "message": "`ray start --block` exited with code 1",
                                  "ts": t0 + MOMENTS[w.name]["failed"]}
            w.lifecycle = life
            w.finished_at = datetime.fromtimestamp(t0 + MOMENTS[w.name]["exit"], timezone.utc)


def test_the_timeline_shows_who_held_the_run_up_and_who_failed(ui, server):
    held_up_run(server.service)
    page = ui.go("/jobs/held")
    chart = page.locator("svg.timeline")
    expect(chart).to_be_visible()
    rows = chart.locator("g.tl-row")
    expect(rows).to_have_count(4)
    assert [rows.nth(i).get_attribute("data-worker") for i in range(4)] == [
        "held-head-0", "held-pool-0", "held-pool-1", "held-pool-2"]
    assert chart.locator("text.tl-role").all_text_contents() == ["head", "pool"]
    # every span has its title; the slow Worker's wait for Ray is the longest RayStarting bar
    spans = chart.locator("rect.tl-span")
    assert spans.count() == chart.locator("rect.tl-span title").count() > 16
    slow = chart.locator("g.tl-row[data-worker=held-pool-2] rect[data-phase=Preparing] title")
    assert slow.text_content().startswith("held-pool-2 (rank 3): Preparing ")
    assert slow.text_content().endswith("(15.1 s)")
    expect(chart.locator("path.tl-failure")).to_have_count(2)
    expect(page.locator(".tl-slowest")).to_have_text(
        "Slowest to join: held-pool-2 (rank 3, role pool): its Ray node came up 14.0 s after "
        "the first")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#timeline").screenshot(path=str(SHOTS / "job-timeline-4.png"))
