"""``--wait`` returns when the Run's record is final, bounded and named when the bound runs out
(issue 19, item 6); a provisional record says so on every read. The CLI's wait against the
server ``rlark server`` builds (tests/server.py AppServer, its controller running), on a Run that
ended while one of its Workers lives on: no Ray node starts."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rlark.cli import jobs as cli
from tests.server import AppServer

#: seconds the Job gives its Workers between SIGTERM and SIGKILL: how long the pool Worker,
#: which ignores SIGTERM, outlives its Run (its bootstrap's own grace is 2 s less), i.e. how long
#: the ended Run's record stays provisional
GRACE = 15


def job_yaml(signal: Path) -> str:
    """Two Workers, no Ray node: the pool's prepare script ignores SIGTERM, says so in its log and
    waits; the head's waits for the test's word (file ``fail`` in the ``/signal`` mount; bounded)
    and exits 4, so the Run fails ``PrepareFailed`` while the pool Worker is alive and stays
    alive through the grace period."""
    image = "docker.io/rlinf/rlinf:0.3.0"
    signal_mount = {"name": "signal", "type": "hostPath", "source": str(signal),
                    "mountPath": "/signal", "readOnly": True}
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "demo"},
           "spec": {"headRole": "head", "runScript": "true", "terminationGracePeriodSeconds": GRACE,
                    "roles": [
                        {"name": "head", "image": image, "resources": {"cpu": 1},
                         "mounts": [signal_mount],
                         "prepareScript": "timeout 120 sh -c 'until [ -e /signal/fail ]; do "
                                          "sleep 0.1; done'; exit 4"},
                        {"name": "pool", "image": image, "resources": {"cpu": 1},
                         "prepareScript": "trap '' TERM; echo pool-ignores-sigterm; sleep 600"}]}}
    return json.dumps(doc)


@pytest.fixture
def live(rlark_home):
    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def pool_log(app: AppServer) -> list[str]:
    r = app.http.get("/api/v1/jobs/demo/logs", params={"rank": 1})
    return r.json()["workers"][0]["lines"] if r.status_code == 200 else []


def test_wait_names_a_record_still_provisional_and_returns_once_it_is_final(
        live, monkeypatch, capsys, tmp_path):
    signal = tmp_path / "signal"
    signal.mkdir()
    r = live.http.post("/api/v1/jobs", content=job_yaml(signal).encode(),
                       headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    live.wait_for("demo", "the pool Worker ignoring SIGTERM",
                  lambda j: "pool-ignores-sigterm" in pool_log(live), timeout=120)
    (signal / "fail").touch()
    job = live.wait_for("demo", "the Run Failed", lambda j: j["phase"] == "Failed")
    assert job["reason"] == "PrepareFailed", (job["reason"], job["message"])
    client = cli._job_client(live.url, None)
    # the Run ended, its pool Worker has not: its record is not stored yet, and --wait waits
    # for it, bounded
    monkeypatch.setattr(cli, "_record_wait_seconds", lambda job: 1.0)
    assert cli._wait(client, "demo") == 1
    captured = capsys.readouterr()
    said = " ".join(captured.err.split())  # Rich wraps lines at the console's width
    assert "finishing the run record" in said
    assert "note: run 1's record is still provisional after 1 s (its Workers have not all " \
           "ended: `rlark describe job demo` shows them); `rlark record demo` says so until it " \
           "is final" in said
    assert captured.out.startswith("Failed (PrepareFailed)")
    live_rec = client.get("/api/v1/jobs/demo/record")
    assert live_rec["provisional"] is True and live_rec["checks"]["status"] == "provisional"
    assert client.get_text("/api/v1/jobs/demo/record", format="md").splitlines()[2].startswith(
        "- **Provisional:**")
    # the console's record tab: the checks' badge says so, in either language
    for lang, word in (("en", ">provisional<"), ("zh-CN", ">临时<")):
        page = httpx.get(f"{live.url}/jobs/demo", params={"tab": "record", "run": "1"},
                         headers={"Authorization": f"Bearer {live.token}", "Accept-Language": lang})
        assert page.status_code == 200
        assert f'class="badge check-provisional"{word}' in page.text
    assert not live.job("demo")["currentRun"]["workers"][1]["finishedAt"], \
        f"the pool Worker ended within {GRACE} s: the reads above came too late to prove anything"

    # the controller stores the record once the grace period ended the pool Worker
    live.wait_for("demo", "its record final", cli._record_final, timeout=GRACE + 60)
    assert cli._wait(client, "demo") == 1
    captured = capsys.readouterr()
    assert "provisional" not in captured.err and "finishing" not in captured.err
    assert client.get("/api/v1/jobs/demo/record")["provisional"] is False


def test_the_bound_follows_the_jobs_grace_period():
    assert cli._record_wait_seconds({"spec": {"spec": {"terminationGracePeriodSeconds": 30}}}) \
        == 30 + cli.RECORD_FINAL_SLACK_SECONDS
    assert cli._record_wait_seconds({}) == 10 + cli.RECORD_FINAL_SLACK_SECONDS
