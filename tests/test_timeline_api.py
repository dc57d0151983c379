"""A Run's timeline through the REST API (issue 25, item 1), on SQLite and PostgreSQL through
TestClient, no controller: the Workers' moments are written into the Store as the controller
keeps them (``lifecycle["times"]``). Who may read it: tests/test_access_routes.py.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from rlark.store import JobRow, RunRow
from tests.test_api import app, client, create, rejected  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def give_moments(store, name: str, moments: dict[str, dict[str, float]]) -> None:
    """The current Run of ``name`` created at T0, its Workers' moments (seconds after T0) kept
    as the controller keeps them; pool-1 failed (NodeLost at 9 s)."""
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        run = s.get(RunRow, job.current_run_id)
        run.created_at = datetime.fromtimestamp(T0, timezone.utc)
        for w in run.workers:
            life = {"times": {k: T0 + v for k, v in moments.get(w.name, {}).items()}}
            if w.name == f"{name}-pool-1":
                life["failed"] = {"reason": "NodeLost", "ts": T0 + 9,
                                  "message": "the node is gone"}
            w.lifecycle = life


def test_a_runs_timeline_names_the_slowest_worker_and_404s_for_a_missing_run(client, store):
    create(client, "demo")
    give_moments(store, "demo", {
        "demo-head-0": {"keeper": 1, "StartingRay": 2, "RayStarted": 3, "AllJoined": 8,
                        "running": 8.5},
        "demo-pool-0": {"keeper": 1, "WaitingForHead": 1.5, "StartingRay": 2, "RayStarted": 7.5},
        "demo-pool-1": {"keeper": 1, "StartingRay": 2, "RayStarted": 4, "failed": 9},
    })
    r = client.get("/api/v1/jobs/demo/runs/1/timeline")
    assert r.status_code == 200, r.text
    tl = r.json()
    assert client.get("/api/v1/jobs/demo/timeline").json()["workers"] == tl["workers"]
    assert tl["run"] == 1 and tl["start"] == T0 and tl["end"] is None
    assert tl["barrier"] == T0 + 8 and tl["runStarted"] == T0 + 8.5
    assert [(w["name"], w["role"], w["rank"]) for w in tl["workers"]] == [
        ("demo-head-0", "head", 0), ("demo-pool-0", "pool", 1), ("demo-pool-1", "pool", 2)]
    assert tl["slowest"]["name"] == "demo-pool-0" and tl["slowest"]["after"] == 4.5
    head, pool0, pool1 = tl["workers"]
    assert [s["phase"] for s in head["spans"]] == ["Pending", "Preparing", "RayStarting",
                                                   "Joined", "Running"]
    assert head["spans"][-1] == {"phase": "Running", "start": T0 + 8.5, "end": None}
    assert pool1["failure"]["reason"] == "NodeLost" and pool1["failure"]["at"] == T0 + 9
    assert pool1["spans"][-1] == {"phase": "Exited", "start": T0 + 9, "end": None}

    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/runs/2/timeline", status=404)
    assert detail["code"] == "NotFound" and "run 2" in detail["message"]
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/runs/0/timeline", status=422)
    assert "number" in str(detail)


def test_the_job_page_draws_the_timeline_as_svg_and_its_live_part_redraws_it(client, store):
    import re

    create(client, "demo")
    give_moments(store, "demo", {
        "demo-head-0": {"keeper": 1, "StartingRay": 2, "RayStarted": 3, "AllJoined": 8,
                        "running": 8.5},
        "demo-pool-0": {"keeper": 1, "StartingRay": 2, "RayStarted": 7.5},
        "demo-pool-1": {"keeper": 1, "StartingRay": 2, "RayStarted": 4, "failed": 9},
    })
    for url in ("/jobs/demo", "/jobs/demo/_live?tab=overview"):
        r = client.get(url)
        assert r.status_code == 200, r.text[:500]
        svg = re.search(r'<svg class="timeline".*?</svg>', r.text, re.S).group(0)
        rows = re.findall(r'<g class="tl-row" data-worker="([^"]+)" data-rank="(\d+)"', svg)
        assert rows == [("demo-head-0", "0"), ("demo-pool-0", "1"), ("demo-pool-1", "2")]
        spans = re.findall(r'<rect class="tl-span tl-(\w+)"[^>]*><title>([^<]+)</title>', svg)
        # hovering a span shows its phase and times
        assert ("Joined", "demo-pool-0 (rank 1): Joined 22:13:27.500 UTC → 22:13:28.500 UTC "
                "(1.0 s)") in spans, spans
        head_running = [title for p, title in spans if p == "Running" and "demo-head-0" in title]
        assert re.fullmatch(r"demo-head-0 \(rank 0\): Running 22:13:28\.500 UTC → still going "
                            r"\(\d+\.\d s\)", head_running[0]), head_running
        assert '<line class="tl-barrier"' in svg
        assert 'class="tl-failure" data-reason="NodeLost"' in svg
        assert 'data-slowest="demo-pool-0"' in r.text
