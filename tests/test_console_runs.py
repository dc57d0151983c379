"""Earlier Runs in the console (issue 19, item 1) and the console's error pages: every tab of
any Run of a restarted Job answers with that Run's own data, the Logs and Record tabs choose the
Run, and an error on a console page is a page (HTML, the console's layout, the reader's
language), while the API keeps answering JSON.

A real app on a real SQLite store, driven over HTTP as tests/test_console.py does (no
controller runs: the Runs are put in the states a controller would leave them in).
"""

from __future__ import annotations

import html
import re

import pytest
import yaml

from rlark.store import JobRow, RunRow, WorkerRow
from tests.test_console import client, finish, job_doc, service  # noqa: F401  (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _restarted(service, rlark_home) -> None:
    """Job ``again``: run 1 (roles head and pool, ended Failed with its own message, Workers
    with hosts and a log each), then run 2 from a replaced spec (roles head and extra, another
    run script, objectStore set)."""
    service.create(job_doc("again", run="echo first"))
    finish(service, "again", "Failed", "RunFailed", "the run script on again-head-0 exited with code 3")
    logs = rlark_home / "logs" / "again" / "1"
    logs.mkdir(parents=True)
    with service.store.session() as s:
        for w in s.query(WorkerRow).all():
            (logs / f"{w.name}.log").write_text(f"line of {w.name} in run one\n")
            w.log_path = str(logs / f"{w.name}.log")
            w.host, w.ip, w.phase, w.exit_code = "host-one", "10.0.0.1", "Failed", 3
    doc = yaml.safe_load(job_doc("again", run="echo second"))
    doc["spec"]["roles"][1]["name"] = "extra"
    doc["spec"]["roles"][0]["resources"] = {"cpu": 2, "memory": "4Gi", "objectStoreMemory": "1Gi"}
    service.replace("again", yaml.safe_dump(doc))
    with service.store.session() as s:
        job = s.query(JobRow).filter_by(name="again").one()
        assert s.get(RunRow, job.current_run_id).number == 2


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_every_tab_of_an_earlier_run_shows_that_run(client, service, rlark_home):
    _restarted(service, rlark_home)
    pages = {tab: client.get(f"/jobs/again?run=1&tab={tab}") for tab in
             ("overview", "events", "logs", "record", "spec")}
    for tab, r in pages.items():
        assert r.status_code == 200, (tab, r.text[:400])
        assert r.headers["content-type"].startswith("text/html")
        assert "You are looking at run 1, not the current Run." in r.text, tab
    overview = pages["overview"].text
    # run 1's Tasks with the Ray node each of its Workers started (run 2 has no pool role)
    tasks = re.search(r'<h2 id="h-tasks">.*?</table>', overview, re.S).group(0)
    assert re.findall(r'<tr data-role="([a-z]+)"', tasks) == ["head", "pool"]
    assert _text(tasks).count("512 MiB object store, 48 worker ports") == 2
    assert "2 CPU" not in _text(tasks)  # run 2's head asks for 2 CPUs
    workers = re.search(r'id="workers-table".*?</table>', overview, re.S).group(0)
    assert re.findall(r'data-worker="([a-z0-9-]+)"', workers) == ["again-head-0", "again-pool-0"]
    assert "host-one" in workers
    summary = re.search(r'<h2 id="h-summary">.*?</dl>', overview, re.S).group(0)
    assert "exited with code 3" in _text(summary)
    # the Run's Events only
    events = pages["events"].text
    shown = re.findall(r'<li class="event ev-\w+" data-reason="(\w+)"', events)
    assert shown and len(shown) == len(service.events("again", 1))
    timeline = _text(re.search(r'<ol class="timeline".*?</ol>', events, re.S).group(0))
    assert "run 2" not in timeline and "run 1" in timeline
    # its Workers' logs, its record, its spec
    logs = pages["logs"].text
    assert "line of again-head-0 in run one" in logs and "again-extra-0" not in logs
    assert re.search(r'<option value="again-pool-0"', logs)
    record = pages["record"].text
    assert 'href="/jobs/again/record.json?run=1"' in record
    spec = _text(pages["spec"].text)
    assert "echo first" in spec and "echo second" not in spec
    # and the current Run's tabs show run 2
    assert "echo second" in _text(client.get("/jobs/again?tab=spec").text)
    current = client.get("/jobs/again").text
    assert 'data-role="extra"' in current and "You are looking at run" not in current


def test_logs_and_record_tabs_choose_the_run(client, service, rlark_home):
    _restarted(service, rlark_home)
    for tab in ("logs", "record"):
        page = client.get(f"/jobs/again?tab={tab}&run=1").text
        form = re.search(r'<form class="filters run-select".*?</form>', page, re.S).group(0)
        assert 'name="tab" value="%s"' % tab in form
        options = re.findall(r'<option value="(\d+)"( selected)?>', form)
        assert options == [("2", ""), ("1", " selected")]
        chosen = client.get(f"/jobs/again?tab={tab}&run=2").text
        assert re.findall(r'<option value="(\d+)"( selected)?>',
                          re.search(r'<form class="filters run-select".*?</form>', chosen,
                                    re.S).group(0)) == [("2", " selected"), ("1", "")]
    # a Job of one Run has nothing to choose
    service.create(job_doc("single"))
    assert "run-select" not in client.get("/jobs/single?tab=logs").text


def test_console_errors_are_pages_and_api_errors_json(client, service):
    cases = [("get", "/no/such/page", 404), ("put", "/jobs", 405), ("get", "/jobs/missing", 404)]
    for method, path, status in cases:
        for lang, words in (("en", "Not found" if status == 404 else "Something went wrong"),
                            ("zh-CN", "未找到" if status == 404 else "出错了")):
            r = client.request(method, path, cookies={"rlark_lang": lang})
            assert r.status_code == status, (path, r.text[:200])
            assert r.headers["content-type"].startswith("text/html"), path
            assert f'<html lang="{lang}">' in r.text and words in r.text
            assert 'class="top"' in r.text  # the console's layout, its navigation
    assert client.get("/api/v1/no/such").headers["content-type"].startswith("application/json")
    assert client.get("/api/v1/jobs/missing").json()["detail"]["code"] == "NotFound"


def test_a_failing_console_page_is_a_page_with_the_security_headers(client, service, monkeypatch):
    """A failure of the server itself (an exception no handler expected) on a console page is
    a 500 page in the reader's language, with the headers every answer carries; on the API it
    is the JSON error."""
    from rlark.services.jobs import JobService

    service.create(job_doc("boom"))

    def broken(*args, **kwargs):
        raise RuntimeError("the store fell over")

    monkeypatch.setattr(JobService, "get", broken)
    r = client.get("/jobs/boom", cookies={"rlark_lang": "zh-CN"})
    assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
    assert '<html lang="zh-CN">' in r.text and "服务器在生成此页面时出错" in r.text
    assert "the store fell over" not in r.text  # nothing of the failure but its kind
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY"
    r = client.get("/api/v1/jobs/boom")
    assert r.status_code == 500 and r.json()["detail"]["code"] == "InternalError"
