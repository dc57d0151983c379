"""The console's polish (issue 19, item 3), server side: the compare page (one title, its rows
named for what they are, values rather than JSON text, the earlier run first), the Logs tab of
an ended Run (no Follow, no empty log box), a phase and a reason that say the same thing shown
once, the YAML preview with its file's comments and long lines, and the review step showing
where RLinf will place its components.

A real app on a real SQLite store over HTTP (tests/test_console.py's fixtures); the browser
side (tables that scroll on a phone, badges on one line, long YAML lines) is in
tests/test_console_browser.py.
"""

from __future__ import annotations

import copy
import html
import re

import pytest

from rlark.store import WorkerRow
from tests.test_console import client, finish, job_doc, service  # noqa: F401  (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _two_runs(service):
    """Job ``demo`` with two Runs whose records differ in an override, the role of a Worker,
    what the head saw (a mapping) and the result."""
    from tests.test_api import job_yaml
    from tests.test_record_v2 import store_records, two_runs

    service.create(job_yaml("demo"))
    service.restart("demo")
    a, b = two_runs("runner.max_steps=7")
    b = copy.deepcopy(b)
    b["workers"]["items"][1]["host"] = "other-box"
    b["workers"]["items"][0]["resources"]["seen"]["ray"] = {"CPU": 4.0, "memory": 3 << 30}
    b["result"] = {**b["result"], "phase": "Failed", "reason": "RunFailed", "exitCode": 3}
    store_records(service.store, "demo", [a, b])


def test_the_compare_page(client, service):
    _two_runs(service)
    for a, b in (("demo:1", "demo:2"), ("demo:2", "demo:1")):
        page = client.get("/jobs/demo/compare", params={"a": a, "b": b}).text
        assert page.count("demo:1 compared with demo:2") == 2  # <title> and the one heading
        assert '<h2 id="h-diff">Differences</h2>' in page
        # the earlier run first, whichever the form named first (as `rlark record diff`)
        assert re.findall(r'data-side="(a|b)">([^<]+)<', page) == [("a", "demo:1"), ("b", "demo:2")]
        assert "Config key" not in page and ">Field</th>" in page
        rows = dict(re.findall(r'<tr data-section="(\w+)" data-key="([^"]+)">', page)[::-1])
        assert rows  # sections named per row: Workers, Resources, Result, Config
        for section, label in (("workers", "Workers"), ("resources", "Resources"),
                               ("result", "Result"), ("config", "Config")):
            assert re.search(rf'<tr data-section="{section}" [^>]*><td>{label}</td>', page), section
        # what Ray counts, key by key, in units (record_diff flattens mappings), never JSON text
        memory = re.search(r'data-key="rank 0.ray.memory">(.*?)</tr>', page, re.S).group(1)
        cpus = re.search(r'data-key="rank 0.ray.CPU">(.*?)</tr>', page, re.S).group(1)
        assert "{" not in html.unescape(memory + cpus)
        assert "<code>3 GiB</code>" in memory and "<code>4</code>" in cpus
        result = re.search(r'data-key="phase">(.*?)</tr>', page, re.S).group(1)
        assert re.findall(r"<code>(\w+)</code>", result) == ["phase", "Succeeded", "Failed"]
    zh = client.get("/jobs/demo/compare", params={"a": "demo:2", "b": "demo:1"},
                    cookies={"rlark_lang": "zh-CN"}).text
    assert "<h2 id=\"h-diff\">差异</h2>" in zh and ">字段</th>" in zh and "<td>资源</td>" in zh


def test_an_ended_runs_logs_offer_no_follow_and_no_empty_box(client, service, rlark_home):
    service.create(job_doc("quiet"))
    logs = rlark_home / "logs" / "quiet" / "1"
    logs.mkdir(parents=True)
    (logs / "empty.log").write_text("")
    with service.store.session() as s:
        for w in s.query(WorkerRow).all():
            w.log_path = str(logs / "empty.log")
    live = client.get("/jobs/quiet?tab=logs").text  # Pending: lines may still come
    assert 'id="log-follow"' in live
    assert re.search(r'<pre id="log-lines"[^>]* hidden>', live)  # shown once following brings lines
    assert 'id="log-empty"' in live
    finish(service, "quiet", "Succeeded", "Completed", "the run script on quiet-head-0 exited with code 0")
    ended = client.get("/jobs/quiet?tab=logs").text
    assert 'id="log-follow"' not in ended and "Follow live" not in ended
    assert re.search(r'<pre id="log-lines"[^>]* hidden>', ended) and 'id="log-empty"' in ended


def test_a_reason_that_repeats_the_phase_is_not_shown_twice(client, service):
    service.create(job_doc("halt"))
    finish(service, "halt", "Stopped", "Stopped", "all Workers have stopped")
    for lang in ("en", "zh-CN"):
        page = client.get("/jobs/halt", cookies={"rlark_lang": lang}).text
        status = re.search(r'<div class="status-phase">(.*?)</div>', page, re.S).group(1)
        assert 'data-phase="Stopped"' in status and "data-reason" not in status
        assert _text(status).split() == (["Stopped"] if lang == "en" else ["已停止"])
        row = re.search(r'<tr data-run="1".*?</tr>', page, re.S).group(0)
        assert "data-reason" not in row
    listed = re.search(r'<tr data-job="halt".*?</tr>', client.get("/jobs").text, re.S).group(0)
    assert "Stopped Stopped" not in " ".join(_text(listed).split())
    # a reason that says more than the phase still shows
    service.create(job_doc("waits"))
    assert 'data-reason="Submitted"' in client.get("/jobs/waits").text


def _review_form(page: str) -> dict[str, str]:
    """The wizard form's fields as the browser would post them (inputs and text areas)."""
    fields = {}
    for name, value in re.findall(r'<input[^>]* name="([^"]+)" value="([^"]*)"', page):
        fields.setdefault(name, html.unescape(value))
    for name, value in re.findall(r'<textarea[^>]* name="([^"]+)"[^>]*>(.*?)</textarea>', page, re.S):
        fields.setdefault(name, html.unescape(value).removeprefix("\n"))
    for name, value in re.findall(r'<select[^>]* name="([^"]+)"[^>]*>.*?<option value="([^"]*)" selected',
                                  page, re.S):
        fields.setdefault(name, value)
    return fields


def test_the_review_shows_the_job_file_as_written_and_where_rlinf_places_components(client):
    from pathlib import Path
    from urllib.parse import urlencode

    quickstart = Path(__file__).resolve().parent.parent / "examples" / "quickstart"
    text = (quickstart / "job.yaml").read_text()
    r = client.post("/create/yaml", data={"yaml": text, "base": str(quickstart)})
    assert r.status_code == 200, r.text[:500]
    preview = html.unescape(re.search(r'<pre class="code-block" id="yaml-preview"[^>]*>(.*?)</pre>',
                                      r.text, re.S).group(1))
    assert preview == text  # comments, order and long lines as the file has them
    assert "# RLark quickstart: 3 CPU-only Ray nodes" in preview
    assert "The Job file as you wrote it, comments included." in r.text
    # where RLinf puts actor, rollout and env: `rlark plan`'s answer, on this Job's roles
    rows = re.findall(r'<tr data-component="(\w+)"><td[^>]*><code>\w+</code></td><td[^>]*><code>(\w+)'
                      r'</code></td><td class="num">([0-9,-]+)</td><td[^>]*>([^<]*)</td>', r.text)
    assert rows == [("actor", "head", "0", "head"), ("rollout", "pool", "1-2", "pool"),
                    ("env", "pool", "1-2", "pool")], rows
    # changed in the wizard: what the Job sets, and it says the comments are not carried
    form = {**_review_form(r.text), "runScript": "python placement_check.py " + "--x " * 40}
    r = client.post("/create", content=urlencode({**form, "action": "goto:4"}),
                    headers={"Content-Type": "application/x-www-form-urlencoded", "HX-Request": "true"})
    assert 'data-step="4"' in r.text, r.text[:300]
    preview = html.unescape(re.search(r'<pre class="code-block" id="yaml-preview"[^>]*>(.*?)</pre>',
                                      r.text, re.S).group(1))
    assert "# RLark quickstart" not in preview
    assert "Changed in the wizard: what the Job sets, without the file&#39;s comments." in r.text
    # a long line stays one line (no folding at 80 columns)
    assert any(line.startswith("  runScript:") and line.rstrip("' ").endswith("--x --x")
               for line in preview.splitlines()), preview


def test_a_job_without_an_rlinf_config_says_there_is_no_placement(client):
    from tests.test_console import post_wizard, wizard_form

    r = post_wizard(client, wizard_form(step="4"), "next")
    assert 'id="no-placement"' in r.text and 'id="placement-table"' not in r.text
    assert "What the Job sets" in r.text
