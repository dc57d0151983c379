"""The Webhooks page and a webhook's delivery log in Debian's Chromium (issue 25, items 4 and 6),
against the server ``rlark server`` builds (tests/server.py AppServer: local runtime, controller
and notifier running) and a real HTTP receiver (tests/test_webhooks_delivery.py's): two
webhooks registered through the page's form (a Slack one, and a signed one whose receiver always
answers 503), a Run that fails in its prepare script and one stopped while it prepares (no Ray
node starts); the list counts each webhook's deliveries, the log shows the failed one's
attempts, status and error, in English and in Chinese (no English left). Their screenshots are
the README's (artifacts/screenshots/webhooks.png, webhook-deliveries.png, zh-webhooks.png,
zh-webhook-deliveries.png; copied to docs/console/).
"""

from __future__ import annotations

import pytest

from tests.server import AppServer
from tests.test_console_browser import (  # noqa: F401 (the browser's fixtures)
    SHOTS,
    browser_context_args,
    browser_type_launch_args,
    expect,
    ui,
)
from tests.test_console_zh_browser import english_left
from tests.test_webhooks_delivery import Receiver, deliveries, job
from tests.waits import wait_until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SECRET = "whsec-browser-0123456789"


@pytest.fixture
def receiver():
    r = Receiver({"/audit": [503]})
    yield r
    r.stop()


@pytest.fixture
def server(rlark_home, monkeypatch):
    monkeypatch.setenv("RLARK_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("RLARK_WEBHOOK_POLL", "0.2")
    monkeypatch.setenv("RLARK_WEBHOOK_BACKOFF", "0.3")
    monkeypatch.setenv("RLARK_WEBHOOK_ATTEMPTS", "2")
    monkeypatch.setenv("RLARK_WEBHOOK_TIMEOUT", "5")
    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def register(page, name: str, url: str, fmt: str, secret: str = "") -> None:
    """Fill and send the page's form (every event checked, as it comes)."""
    page.fill("#w-name", name)
    page.fill("#w-url", url)
    page.select_option("#w-format", fmt)
    if secret:
        page.fill("#w-secret", secret)
    page.click("#webhook-submit")
    expect(page.locator(f'#webhooks-table tr[data-webhook="{name}"]')).to_be_visible()


@pytest.mark.timeout(300)
def test_the_webhooks_page_registers_and_its_log_shows_each_delivery(ui, server, receiver):
    page = ui.go("/webhooks")
    expect(page.locator("#webhooks-table")).to_have_count(0)
    register(page, "team-slack", receiver.url("/slack"), "slack")
    register(page, "audit-log", receiver.url("/audit"), "rlark", SECRET)
    assert SECRET not in page.content()
    rows = page.locator("#webhooks-table tbody tr")
    expect(rows).to_have_count(2)
    audit = page.locator('#webhooks-table tr[data-webhook="audit-log"]')
    assert audit.get_attribute("data-secret") == "set"  # said, never shown
    assert page.locator('tr[data-webhook="team-slack"]').get_attribute("data-secret") == "unset"

    for name, prepare in (("train-a", "exit 3"), ("train-b", "sleep 600")):
        r = server.http.post("/api/v1/jobs", content=job(name, 1, prepare).encode(),
                             headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text
    server.wait_for("train-a", "Failed", lambda j: j["phase"] == "Failed", timeout=120)
    server.wait_for("train-b", "its Worker preparing",
                    lambda j: [w["phase"] for w in j["currentRun"]["workers"]] == ["Preparing"],
                    timeout=120)
    assert server.http.post("/api/v1/jobs/train-b/stop").status_code == 200

    def settled():
        logs = {n: deliveries(server, n) for n in ("team-slack", "audit-log")}
        done = all(len(v) == 2 and all(d["state"] != "pending" for d in v) for v in logs.values())
        return done and logs
    logs = wait_until("both webhooks' two deliveries settled", settled, timeout=120)
    assert [(d["event"], d["state"]) for d in logs["team-slack"]] == [
        ("run.stopped", "succeeded"), ("run.failed", "succeeded")]
    assert [(d["event"], d["state"], d["attempts"], d["lastStatus"]) for d in logs["audit-log"]] \
        == [("run.stopped", "failed", 2, 503), ("run.failed", "failed", 2, 503)]

    page = ui.go("/webhooks")
    expect(page.locator('tr[data-webhook="team-slack"] a').nth(1)).to_have_text(
        "2 sent, 0 failed, 0 pending")
    expect(page.locator('tr[data-webhook="audit-log"] a').nth(1)).to_have_text(
        "0 sent, 2 failed, 0 pending")
    SHOTS.mkdir(parents=True, exist_ok=True)
    ui.shot("webhooks", full=False)
    page.click('tr[data-webhook="audit-log"] a >> nth=0')
    log = page.locator("#deliveries-table tbody tr")
    expect(log).to_have_count(2)
    assert log.first.get_attribute("data-state") == "failed"
    expect(log.first).to_contain_text("run.stopped")
    expect(log.first).to_contain_text("HTTP 503: refused")
    ui.shot("webhook-deliveries", full=False)

    names = {"team-slack", "audit-log", "train-a", "train-b", "slack", "rlark", "default", "admin"}
    ui.go("/lang/zh-CN?next=/webhooks")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("#webhooks-table tbody tr")).to_have_count(2)
    assert not english_left(page, names), english_left(page, names)
    ui.shot("zh-webhooks", full=False)
    page = ui.go("/webhooks/audit-log")
    expect(page.locator("#deliveries-table tbody tr")).to_have_count(2)
    left = english_left(page, names)
    # the receiver's own answer, quoted as it came ("HTTP 503: refused"), is the only English
    assert all("refused" in x for x in left), left
    ui.shot("zh-webhook-deliveries", full=False)
