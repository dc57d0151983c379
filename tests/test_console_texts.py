"""What the console says and how (issue 10, item 12): each error once, the head-role choice
labelled per role, previews with only what differs from the defaults, no Python booleans, the
Job's warnings on its overview, and the server's own texts (Finding messages and hints, reasons,
event texts) in Chinese through the message catalog (codes + parameters, English the fallback).

A real app on a real SQLite store, driven over HTTP with the site administrator's token, as
tests/test_console.py does (no controller runs).
"""

from __future__ import annotations

import html
import re

import pytest
import yaml

from rlark.console.messages import catalog as messages, localize_event, localize_finding
from rlark.findings import Finding
from tests.test_console import (  # noqa: F401  (fixtures)
    client,
    codes,
    current_step,
    finish,
    job_doc,
    post_wizard,
    service,
    wizard_form,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_each_error_is_shown_once(client):
    r = post_wizard(client, wizard_form(name="Bad_Name", **{"role-1-name": "Pool"}), "next")
    assert current_step(r.text) == 1
    assert codes(r.text).count("InvalidName") == 2  # one for the Job name, one for the role
    text = html.unescape(r.text)
    assert text.count("'Bad_Name' is not a DNS-1123 label") == 1
    assert text.count("'Pool' is not a DNS-1123 label") == 1
    # the notice above the form counts them and lists none of those shown next to a field
    notice = re.search(r'<div class="notice notice-error" role="alert" id="step-errors">(.*?)</div>',
                       r.text, re.S).group(1)
    assert "data-code" not in notice and "2" in notice
    # step 4 lists every Finding once (the hidden steps carry none of them)
    r = post_wizard(client, wizard_form(step="4", **{"role-0-gpu": "64"}), "next")
    assert current_step(r.text) == 4 and codes(r.text).count("ExceedsHostGpu") == 1


def test_a_refused_submit_says_it_once(client, service):
    service.create(job_doc("taken"))
    r = post_wizard(client, wizard_form(step="4", name="taken"), "submit")
    assert current_step(r.text) == 4 and codes(r.text).count("NameTaken") == 1
    assert 'id="submit-error"' not in r.text and "already exists" not in r.text


def test_the_head_role_choice_is_labelled_per_role(client):
    r = post_wizard(client, wizard_form(), "add-role")
    labels = re.findall(r'<label for="head-(\d)"><span aria-hidden="true">[^<]*</span>'
                        r'<span class="sr-only">([^<]*)</span></label>', r.text)
    assert labels == [("0", "Role 1 (head) is the head role"), ("1", "Role 2 (pool) is the head role"),
                      ("2", "Role 3 (role1) is the head role")]


def test_previews_show_only_what_differs_from_the_defaults(client, service):
    r = post_wizard(client, wizard_form(step="3"), "next")
    preview = re.search(r'id="yaml-preview"[^>]*>(.*?)</pre>', r.text, re.S).group(1)
    doc = yaml.safe_load(preview.replace("&#34;", '"').replace("&#39;", "'"))
    spec = doc["spec"]
    assert spec["failurePolicy"] == {"joinTimeoutSeconds": 60, "prepareTimeoutSeconds": 120}
    assert spec["terminationGracePeriodSeconds"] == 5
    assert spec["roles"][0] == {"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                                "resources": {"cpu": 1, "memory": "1Gi"},
                                "env": [{"name": "GREETING", "value": "hello"}]}
    assert spec["roles"][1] == {"name": "pool", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0"}
    assert not re.search(r":\s+\d+\.0\n", preview)  # whole numbers as integers
    assert "gpu: 0" not in preview and "maxRestarts" not in preview
    post_wizard(client, wizard_form(step="4"), "submit")
    page = client.get("/jobs/wiz?tab=spec").text
    shown = re.search(r'<h2 id="h-yaml">.*?<pre class="code-block"[^>]*>(.*?)</pre>', page, re.S).group(1)
    assert yaml.safe_load(shown.replace("&#34;", '"').replace("&#39;", "'"))["spec"] == spec
    # the stored spec keeps every field (the API's view); only the preview is trimmed
    assert service.get("wiz")["spec"]["spec"]["roles"][0]["resources"]["gpu"] == 0


def test_mounts_say_yes_or_no_not_python_booleans(client, service):
    doc = yaml.safe_load(job_doc("mounted"))
    doc["spec"]["roles"][0]["mounts"] = [
        {"name": "ro", "type": "pvc", "source": "data", "mountPath": "/ro", "readOnly": True},
        {"name": "rw", "type": "pvc", "source": "out", "mountPath": "/rw"}]
    service.create(yaml.safe_dump(doc))
    page = client.get("/jobs/mounted?tab=record").text
    table = re.search(r'<h2 id="h-mounts">.*?</table>', page, re.S).group(0)
    assert "True" not in table and "False" not in table
    cells = re.findall(r"<td>(yes|no)</td>", table)
    assert cells == ["yes", "no"]


def test_the_overview_shows_the_jobs_warnings(client, service):
    doc = yaml.safe_load(job_doc("warned"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    page = client.get("/jobs/warned").text
    card = re.search(r'<section class="card" aria-labelledby="h-job-findings" id="job-findings">(.*?)</section>',
                     page, re.S).group(1)
    assert 'data-code="DuplicateEnv"' in card and "the last value wins" in card
    assert 'id="job-findings"' not in client.get(f"/jobs/{service.create(job_doc('clean'))['name']}").text


def test_an_unchanged_edit_starts_nothing_and_says_so(client, service):
    service.create(job_doc("same"))
    form = wizard_form(step="4", mode="edit", original="same", name="same", runScript="echo hi",
                       joinTimeout="300", prepareTimeout="1800", grace="10")
    form.update({"role-0-cpu": "", "role-0-memory": "", "role-0-env-0-name": "",
                 "role-0-env-0-value": "", "role-1-workers": "1"})
    r = post_wizard(client, form, "submit")
    assert r.headers["HX-Redirect"] == "/jobs/same"
    assert [x["number"] for x in service.get("same")["runs"]] == [1]
    assert "is unchanged: its spec is the same, so no Run was started" in client.get("/jobs/same").text


# --- the server's texts in Chinese --------------------------------------------------------------------


def test_every_preflight_finding_is_in_the_catalog_in_both_languages():
    """Every Finding the spec and value rules produce (all rows of tests/test_preflight.py) is
    known to the catalog: its message and hint come out in Chinese, the parameters (paths,
    values) as they were."""
    from tests.test_preflight import ROWS, base, findings_of

    seen = 0
    for row in ROWS:
        data = base()
        row.mutate(data)
        for f in findings_of(data):
            message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
            assert CJK.search(message) and message != f.message, (f.code, f.message)
            assert CJK.search(hint) and hint != f.hint, (f.code, f.hint)
            assert f.path in message, (f.code, message)
            seen += 1
    assert seen > 80


def test_local_runtime_findings_are_translated():
    from rlark.preflight import check_for_local_runtime
    from rlark.spec import load_job

    doc = yaml.safe_load(job_doc("local"))
    doc["spec"]["workingDir"] = "/nonexistent/work"
    role = doc["spec"]["roles"][0]
    role["resources"] = {"gpu": 2, "cpu": 999, "memory": "9999Gi"}
    role["local"] = {"python": "/nonexistent/python"}
    role["nodeSelector"] = {"pool": "a"}
    role["mounts"] = [{"name": "p", "type": "pvc", "source": "x", "mountPath": "/p"},
                      {"name": "h", "type": "hostPath", "source": "/nonexistent/h", "mountPath": "/h"},
                      {"name": "t", "type": "hostPath", "source": "/tmp", "mountPath": "/data"}]
    job, _ = load_job(yaml.safe_dump(doc))
    findings = check_for_local_runtime(job, {"cpu": 2, "memory": 2**30, "gpu": 0})
    assert {f.code for f in findings} >= {"ExceedsHostGpu", "ExceedsHostCpu", "ExceedsHostMemory",
                                          "WorkingDirMissing", "MountNotAppliedLocally",
                                          "MountSourceMissing", "PythonNotFound",
                                          "NodeSelectorIgnoredLocally"}
    for f in findings:
        message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
        assert CJK.search(message) and CJK.search(hint), (f.code, f.message, f.hint)


def test_unknown_texts_stay_english_and_console_hints_fit_the_console():
    assert localize_finding("SomethingNew", "a new message", "a new hint", "zh-CN") == (
        "a new message", "a new hint")
    # a known code whose text changed: English, not a broken translation
    assert localize_finding("InvalidGpu", "reworded entirely", "h", "zh-CN") == ("reworded entirely", "h")
    f = Finding(code="RelativePath", path="spec.workingDir",
                message="spec.workingDir = '.' is not an absolute path",
                hint="write an absolute path (a Job sent without its file has nothing to resolve a "
                     "relative one against; `rlark submit FILE` resolves it against FILE's directory)")
    for locale in ("en", "zh-CN"):
        message, hint = localize_finding(f.code, f.message, f.hint, locale)
        assert "rlark submit" not in hint and "'.'" in message
    assert localize_finding(f.code, f.message, f.hint, "en", where="api") == (f.message, f.hint)


def test_catalog_entries_are_well_formed():
    import string

    for kind in ("finding", "event"):
        for code, entry in messages()[kind].items():
            groups = [entry["message"], entry["hint"]] if kind == "finding" else [entry]
            for templates in groups:
                for tpl in templates:
                    fields = {f for _, f, _, _ in string.Formatter().parse(tpl.en) if f}
                    other = {f for _, f, _, _ in string.Formatter().parse(tpl.other) if f}
                    assert other <= fields, (code, tpl.en, tpl.other)
                    assert CJK.search(tpl.other), (code, tpl.other)
    assert all(CJK.search(v) for v in messages()["reason"].values())


def test_chinese_pages_translate_findings_reasons_and_events(client, service):
    doc = yaml.safe_load(job_doc("zhtexts"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    finish(service, "zhtexts")  # RunFailed: the run script on x-head-0 exited with code 3
    client.cookies.set("rlark_lang", "zh-CN")
    page = client.get("/jobs/zhtexts").text
    assert "spec.roles[0].env[1].name = &#39;A&#39; 设置了多次；以最后一个为准" in page
    assert "每个变量只保留一项" in page
    assert "x-head-0 上的运行脚本以退出码 3 结束" in page
    assert 'data-reason="RunFailed"' in page and "运行脚本失败" in page
    events = client.get("/jobs/zhtexts?tab=events").text
    assert "Job 已接受：2 个 Worker，2 个角色" in events
    assert "设置了多次" in events  # the warning events carry the Finding's message
    review = post_wizard(client, wizard_form(step="4", **{"role-0-gpu": "64"}), "next").text
    assert "这些 Worker 共需要 64 个 GPU" in review and "请减少 resources.gpu" in review
    client.cookies.set("rlark_lang", "en")
    assert "the last value wins" in client.get("/jobs/zhtexts").text


def test_event_texts_translate_by_reason_with_english_fallback():
    assert localize_event("Submitted", "Job accepted: 1 Worker in 1 role by alice", "zh-CN") == \
        "Job 已接受：1 个 Worker，1 个角色（alice）"
    assert localize_event("NodeJoined", "rank 2 (j-pool-1) joined as Ray node abcdef012345 at "
                          "127.0.0.3", "zh-CN") == \
        "序号 2（j-pool-1）已作为 Ray 节点 abcdef012345 加入，地址 127.0.0.3"
    assert localize_event("Whatever", "unchanged text", "zh-CN") == "unchanged text"
    assert localize_event("Submitted", "Job accepted: 1 Worker in 1 role", "en") == \
        "Job accepted: 1 Worker in 1 role"
    # a failure message followed by the Worker's last lines: the lines stay as written
    text = "the run script on j-head-0 exited with code 2\nTraceback (most recent call last):"
    assert localize_event("RunFailed", text, "zh-CN") == \
        "j-head-0 上的运行脚本以退出码 2 结束\nTraceback (most recent call last):"
