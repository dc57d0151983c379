"""``--wait`` returns when the Run's record is final, bounded and named when the bound runs out
(issue 19, item 6); a provisional record says so on every read. The CLI's wait against the real
API (no controller: the test moves the Run as the controller would)."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select

from rlark.cli import jobs as cli
from rlark.controller.rows import set_conditions
from rlark.controller.phases import ConditionUpdate
from rlark.record.build import build_record
from rlark.services.jobs import JobService
from rlark.record.finish import record_condition
from rlark.store import JobRow, RunRow
from tests.test_api import job_yaml, set_run_state
from tests.test_cli import serve_api_only


@pytest.fixture
def live(rlark_home):
    yield from serve_api_only(rlark_home)


def store_final_record(store, name: str) -> None:
    """What the controller does once every Worker of the Run ended: store the record and set
    RecordVerified in the same transaction."""
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        run = s.get(RunRow, job.current_run_id)
        run.record = build_record(job, run, run.workers, final=True)
        set_conditions(run, [ConditionUpdate(*record_condition(run.record))])


def test_wait_names_a_record_still_provisional_and_returns_once_it_is_final(
        live, monkeypatch, capsys):
    JobService(live.store).create(job_yaml("demo"))
    set_run_state(live.store, "demo", "Succeeded", released=True)
    client = cli._job_client(live.url, None)
    # the Run ended, its record is not stored yet: --wait waits for it, bounded
    monkeypatch.setattr(cli, "_record_wait_seconds", lambda job: 1.0)
    assert cli._wait(client, "demo") == 0
    captured = capsys.readouterr()
    said = " ".join(captured.err.split())  # Rich wraps lines at the console's width
    assert "finishing the run record" in said
    assert "note: run 1's record is still provisional after 1 s (its Workers have not all " \
           "ended: `rlark describe job demo` shows them); `rlark record demo` says so until it " \
           "is final" in said
    assert captured.out.startswith("Succeeded")
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

    store_final_record(live.store, "demo")
    assert cli._wait(client, "demo") == 0
    captured = capsys.readouterr()
    assert "provisional" not in captured.err and "finishing" not in captured.err
    assert client.get("/api/v1/jobs/demo/record")["provisional"] is False


def test_the_bound_follows_the_jobs_grace_period():
    assert cli._record_wait_seconds({"spec": {"spec": {"terminationGracePeriodSeconds": 30}}}) \
        == 30 + cli.RECORD_FINAL_SLACK_SECONDS
    assert cli._record_wait_seconds({}) == 10 + cli.RECORD_FINAL_SLACK_SECONDS
