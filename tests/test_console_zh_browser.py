"""The console in Simplified Chinese, in a real browser (issue 19, item 2): every page and tab,
for Jobs in every kind of state a person meets (Succeeded with its record, Failed with a reason
and its last log lines, Stopped, Pending with a reason, with Findings, restarted: an earlier
Run), shows no English a reader of Chinese would have to read.

What may stay in Latin letters is said once, in tests/english.py: code (here: code, pre and
monospace elements), identifiers (here: the names of the Jobs, roles, Workers, hosts, projects,
users and tokens the pages show, read from the API), units, and proper names. Everything else a
page shows (text, option labels, placeholders, aria labels) must be Chinese; tooltips (title
attributes) are not read.

Debian's Chromium through Playwright against a real ``rlark server`` on the local runtime (the
fixtures of tests/test_console_browser.py). Starts one Ray node (the Succeeded Job).
"""

from __future__ import annotations

import re

import pytest

from tests.english import english_words
from tests.test_console_browser import (  # noqa: F401  (fixtures)
    IMAGE,
    browser_context_args,
    browser_type_launch_args,
    expect,
    failing_job,
    server,
    ui,
)

#: the text a person reads on the page: visible text outside code (option labels count,
#: whether or not the list is open), placeholders and aria labels
_VISIBLE_TEXT = """() => {
  const out = [];
  const skip = 'code, pre, kbd, samp, .mono, script, style, noscript, [hidden]';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!el || el.closest(skip) || !node.textContent.trim()) continue;
    if (!el.closest('select') && !el.checkVisibility({visibilityProperty: true})) continue;
    out.push(node.textContent);
  }
  for (const el of document.querySelectorAll('[placeholder], [aria-label]')) {
    if (el.closest(skip)) continue;
    for (const a of ['placeholder', 'aria-label']) if (el.getAttribute(a)) out.push(el.getAttribute(a));
  }
  return out;
}"""


def english_left(page, names: set[str]) -> list[str]:
    """The words of ``page``'s visible text that :func:`tests.english.english_words` does not
    allow, each with the text it is in."""
    left = []
    for text in page.evaluate(_VISIBLE_TEXT):
        left += [f"{word!r} in {text.strip()[:120]!r}" for word in english_words(text, names)]
    return left


def _job(name: str, *, cpu: int = 1, prepare: str = "", run: str = "echo done",
         env: str = "") -> str:
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 90}}
  roles:
    - name: head
      workers: 1
      image: "{IMAGE}"
      resources: {{cpu: {cpu}, memory: 1Gi}}
      prepareScript: {prepare or "''"}
      env: [{env}]
  runScript: {run}
"""


def _identifiers(srv) -> set[str]:
    """The names the pages show, as the API gives them: Jobs, roles, Workers and their hosts,
    projects, users and API tokens."""
    names: set[str] = set()
    for job in srv.http.get("/api/v1/jobs").json()["items"]:
        detail = srv.job(job["name"])
        names |= {job["name"], job["project"], *(r["name"] for r in job["roles"])}
        for run in detail["runs"]:
            for w in srv.http.get(f"/api/v1/jobs/{job['name']}/workers",
                                  params={"run": run["number"]}).json():
                names |= {w["name"], w["host"] or ""}
    names |= {u["name"] for u in srv.http.get("/api/v1/users").json()}
    names |= {t["name"] for t in srv.http.get("/api/v1/tokens", params={"all": "true"}).json()}
    return names - {""}


def _pages(job: str, run: int | None = None) -> list[str]:
    q = f"&run={run}" if run else ""
    return [f"/jobs/{job}?tab={tab}{q}" for tab in ("overview", "events", "logs", "record", "spec")]


@pytest.mark.ray
def test_every_page_in_chinese_has_no_english_left(ui):
    srv = ui.server
    # Succeeded (a Ray node), with a Finding (a variable set twice) and its record
    srv.submit(_job("zh-ok", env="{name: A, value: '1'}, {name: A, value: '2'}"))
    # Failed with a reason and its last lines; then restarted: run 1 is an earlier Run
    srv.submit(failing_job("zh-fail"))
    srv.wait_phase("zh-fail", {"Failed"}, timeout=90)
    srv.cli("restart", "zh-fail")
    srv.wait_phase("zh-ok", {"Succeeded"}, timeout=240)
    srv.wait_phase("zh-fail", {"Failed"}, timeout=90)
    # Pending with a reason: a Job holding this machine's CPUs keeps the next one waiting
    cpus = srv.http.get("/api/v1/nodes").json()["items"][0]["allocatable"]["cpu"]
    srv.submit(_job("zh-hold", cpu=int(cpus), prepare="'sleep 300'"))
    srv.wait_phase("zh-hold", {"Starting"}, timeout=60)
    srv.submit(_job("zh-wait"))
    waiting = srv.wait_phase("zh-wait", {"Pending"}, timeout=30)
    names = _identifiers(srv) | {"A"}
    ui.go("/lang/zh-CN?next=/jobs")
    expect(ui.page.locator("html")).to_have_attribute("lang", "zh-CN")

    def visit(path: str) -> None:
        page = ui.go(path)
        expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
        left = english_left(page, names)
        assert not left, (path, left)

    expect(ui.go("/jobs/zh-wait").locator("#job-live")).to_have_attribute("data-phase", "Pending")
    assert waiting["reason"] == "Queued" or srv.job("zh-wait")["reason"]
    for path in ["/jobs", *_pages("zh-wait"), *_pages("zh-hold")]:
        visit(path)
    srv.cli("stop", "zh-hold")
    srv.cli("stop", "zh-wait")
    srv.wait_phase("zh-hold", {"Stopped"}, timeout=60)
    srv.wait_phase("zh-wait", {"Stopped"}, timeout=60)
    pages = ["/jobs", *_pages("zh-ok"), *_pages("zh-fail"), *_pages("zh-fail", run=1),
             *_pages("zh-hold"), *_pages("zh-wait"),
             "/jobs/zh-fail/compare?a=zh-fail:2&b=zh-fail:1",
             "/nodes", "/queue", "/secrets", "/tokens", "/admin/users", "/admin/projects",
             "/admin/audit"]
    for path in pages:
        visit(path)
    # a page that does not exist: the console's page, in Chinese (the browser logs its 404)
    visit("/jobs/zh-gone")
    assert ui.errors == ["console.error: Failed to load resource: the server responded with a "
                         "status of 404 (Not Found)"]
    ui.errors.clear()
    # the wizard, every step, from a Job file
    page = ui.go("/create")
    page.locator(".yaml-start summary").click()
    page.fill("#yaml-text", _job("zh-new", env="{name: A, value: '1'}, {name: A, value: '2'}"))
    page.locator(".yaml-start button[type=submit]").click()
    for step in (4, 3, 2, 1):
        expect(page.locator("#wizard")).to_have_attribute("data-step", str(step))
        left = english_left(page, names | {"zh-new"})
        assert not left, (f"wizard step {step}", left)
        if step > 1:
            page.locator("#wizard-form button[value=back]").click()
