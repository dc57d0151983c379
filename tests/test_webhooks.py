"""Webhooks (issue 25 item 4), without a Run: the pure builders (RLark's JSON, the Slack
message, the signature, the URL and address rules, the backoff) and ``/api/v1/webhooks`` (create,
list, get, delete, the delivery log; validation answered 422 with field, value and fix; project
admins only; the secret never answered; every change audited).

The API on a real FastAPI app and SQLite store (no controller). Delivery to a real receiver is
tests/test_webhooks_delivery.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json

import pytest
from sqlalchemy import select

from rlark.services import notifications as n
from rlark.services.errors import Invalid
from rlark.services.webhooks import check_create
from rlark.store.webhooks import WebhookEvent, WebhookFormat, WebhookRow
from tests.access import admin_token, api_client, make_user

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SECRET = "whsec-0123456789abcdef-not-echoed"
FACTS = {"project": "vision", "job": "ppo", "run": 3, "runUid": "abc123", "phase": "Failed",
         "previousPhase": "Running", "reason": "RunFailed", "message": "run script exited with 3",
         "at": "2026-12-01T10:00:00Z"}


# --- builders (pure) ------------------------------------------------------------------------------


def test_rlark_payload_carries_the_event_and_the_run():
    body = n.rlark_payload(17, WebhookEvent.failed, FACTS)
    assert body == {"apiVersion": "rlark.io/v1", "kind": "RunEvent", "id": 17,
                    "event": "run.failed", **FACTS}
    queued = n.rlark_payload(5, WebhookEvent.queued, {**FACTS, "phase": "Pending",
                                                      "queuedSeconds": 700, "extra": "dropped"})
    assert queued["queuedSeconds"] == 700 and "extra" not in queued
    assert n.payload(WebhookFormat.rlark, 17, WebhookEvent.failed, FACTS) == body


def test_slack_payload_is_one_escaped_line_and_a_section():
    facts = {**FACTS, "job": "a<b", "message": "exit 3 <@channel> & more"}
    body = n.payload(WebhookFormat.slack, 17, WebhookEvent.failed, facts)
    assert set(body) == {"text", "blocks"}
    assert body["text"] == (":x: Run 3 of Job a&lt;b (project vision) failed: RunFailed: "
                            "exit 3 &lt;@channel&gt; &amp; more")
    [section] = body["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "<" not in section["text"]["text"] and "*Run 3 of Job a&lt;b" in section["text"]["text"]
    ok = n.slack_payload(WebhookEvent.succeeded, {**FACTS, "phase": "Succeeded", "reason": None,
                                                  "message": ""})
    assert ok["text"] == ":white_check_mark: Run 3 of Job ppo (project vision) succeeded"
    queued = n.slack_payload(WebhookEvent.queued, {**FACTS, "queuedSeconds": 660,
                                                   "reason": "Queued", "message": ""})
    assert queued["text"].endswith("is still queued after 11 min: Queued")


def test_signature_is_hmac_sha256_of_timestamp_dot_body():
    body = n.encode(n.rlark_payload(1, WebhookEvent.succeeded, FACTS))
    sig = n.signature(SECRET, 1700000000, body)
    expected = hmac.new(SECRET.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sig == "sha256=" + expected
    assert n.verify(SECRET, "1700000000", body, sig)
    assert not n.verify(SECRET, "1700000001", body, sig)  # another timestamp
    assert not n.verify(SECRET, "1700000000", body + b" ", sig)  # another body
    assert not n.verify("another-secret-entirely", "1700000000", body, sig)
    heads = n.headers(WebhookEvent.succeeded, 9, body, SECRET, 1700000000)
    assert heads[n.SIGNATURE_HEADER] == sig and heads[n.TIMESTAMP_HEADER] == "1700000000"
    assert heads[n.EVENT_HEADER] == "run.succeeded" and heads[n.DELIVERY_HEADER] == "9"
    assert SECRET not in json.dumps(heads)
    assert n.SIGNATURE_HEADER not in n.headers(WebhookEvent.succeeded, 9, body, None, 1)
    assert json.loads(body) == n.rlark_payload(1, WebhookEvent.succeeded, FACTS)


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"),
    ("192.168.0.7", "private"), ("172.16.0.1", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"), ("100.64.0.1", "not public"), ("::ffff:10.0.0.1", "private"),
    ("::ffff:127.0.0.1", "loopback"), ("8.8.8.8", None), ("2001:4860:4860::8888", None),
])
def test_addresses_a_webhook_may_reach(address, why):
    refusal = n.address_refusal(ipaddress.ip_address(address))
    if why is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.startswith(why), refusal
    # an allowed network lets its addresses through, and only those
    assert n.address_refusal(ipaddress.ip_address("10.1.2.3"), ["10.0.0.0/8"]) is None
    assert n.address_refusal(ipaddress.ip_address("10.1.2.3"), ["10.2.0.0/16"]) == "private"


@pytest.mark.parametrize("url, fragment", [
    ("ftp://hooks.example.com/x", "scheme 'ftp'"), ("file:///etc/passwd", "scheme 'file'"),
    ("gopher://x", "scheme 'gopher'"), ("https://", "names no host"),
    ("https://user:pw@hooks.example.com/", "user information"),
    ("http://127.0.0.1:8080/", "loopback"), ("http://localhost/", "loopback"),
    ("http://app.localhost/", "loopback"), ("http://[::1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data", "link-local"), ("http://10.0.0.5/", "private"),
    ("https://hooks.example.com/a b", "spaces"), ("https://hooks.example.com:99999/", "not a URL"),
    ("", "empty"), (None, "not a URL"),
])
def test_urls_that_could_harm_are_refused_with_field_value_and_fix(url, fragment):
    with pytest.raises(Invalid) as info:
        n.check_url(url)
    assert fragment in info.value.message
    [finding] = info.value.findings
    assert finding.path == "url" and finding.hint and finding.code == "InvalidWebhook"


def test_urls_allowed():
    assert n.check_url("https://hooks.slack.com/services/T0/B0/x") == \
        "https://hooks.slack.com/services/T0/B0/x"
    assert n.check_url("http://8.8.8.8:8080/hook?x=1")
    assert n.check_url("http://127.0.0.1:9/", ["127.0.0.0/8"])  # the administrator allowed it


def test_create_body_checks_every_field_and_never_shows_the_secret():
    ok = check_create({"name": "alerts", "url": "https://hooks.example.com/x"})
    assert ok["events"] == sorted(e.value for e in WebhookEvent) and ok["format"] == "rlark"
    assert ok["secret"] is None
    bad = [({"name": "Bad_Name", "url": "https://h.example.com"}, "name", "'Bad_Name'"),
           ({"name": "a", "url": "https://h.example.com", "events": ["run.exploded"]},
            "events[0]", "'run.exploded'"),
           ({"name": "a", "url": "https://h.example.com", "events": []}, "events", "[]"),
           ({"name": "a", "url": "https://h.example.com", "format": "teams"}, "format", "'teams'"),
           ({"name": "a", "url": "https://h.example.com", "colour": 1}, "colour", "not a field"),
           ({"name": "a", "url": "https://h.example.com", "secret": "short"}, "secret",
            "5 characters")]
    for body, field, shown in bad:
        with pytest.raises(Invalid) as info:
            check_create(body)
        assert info.value.findings[0].path == field, body
        assert shown in info.value.message and info.value.findings[0].hint
        assert "short" not in info.value.message or field != "secret"


def test_messages_are_masked_and_cut_to_their_first_line():
    mask = lambda text: text.replace("hf_secretvalue", "***")  # noqa: E731
    assert n.first_line("RunFailed: token hf_secretvalue\nlast lines of the log", mask) == \
        "RunFailed: token ***"
    assert len(n.first_line("x" * 1000)) == n.MAX_MESSAGE and n.first_line("") == ""


def test_retries_and_backoff():
    assert [n.retryable(s) for s in (None, 500, 503, 429, 408)] == [True] * 5
    assert [n.retryable(s) for s in (400, 401, 404, 301)] == [False] * 4
    assert [n.backoff(a, 10, 900) for a in (1, 2, 3, 7, 20)] == [10, 20, 40, 640, 900]


# --- the API ---------------------------------------------------------------------------------------


@pytest.fixture
def clients(app_store):
    app, store = app_store
    return {
        "site admin": api_client(app, admin_token(store)),
        "project admin": api_client(app, make_user(store, "pat", "default", "admin")),
        "member": api_client(app, make_user(store, "mia", "default", "member")),
        "viewer": api_client(app, make_user(store, "vic", "default", "viewer")),
        "stranger": api_client(app, make_user(store, "otto", "other", "admin")),
    }


HOOK = {"name": "alerts", "url": "https://hooks.example.com/rlark/T0/secret-path",
        "events": ["run.failed", "run.succeeded"], "format": "slack", "secret": SECRET}


def test_project_admins_create_list_get_and_delete_and_the_secret_never_comes_back(clients,
                                                                                   app_store):
    admin = clients["project admin"]
    r = admin.post("/api/v1/webhooks", json=HOOK)
    assert r.status_code == 201, r.text
    view = r.json()
    assert view == {"name": "alerts", "project": "default", "url": HOOK["url"],
                    "events": ["run.failed", "run.succeeded"], "format": "slack",
                    "secret": "set", "createdAt": view["createdAt"], "createdBy": "pat",
                    "deliveries": {"pending": 0, "succeeded": 0, "failed": 0}}
    unsigned = admin.post("/api/v1/webhooks", json={"name": "plain",
                                                    "url": "https://hooks.example.com/p"})
    assert unsigned.status_code == 201 and unsigned.json()["secret"] == "unset"
    assert unsigned.json()["format"] == "rlark"
    answers = [r, admin.get("/api/v1/webhooks"), admin.get("/api/v1/webhooks/alerts"),
               admin.get("/api/v1/webhooks/alerts/deliveries"),
               clients["site admin"].get("/api/v1/audit")]
    for a in answers:
        assert a.status_code == 200 or a is r, a.text
        assert SECRET not in a.text
    assert [w["name"] for w in answers[1].json()] == ["alerts", "plain"]
    assert answers[3].json() == []
    # sealed at rest, not in clear
    _, store = app_store
    with store.session() as s:
        row = s.scalar(select(WebhookRow).where(WebhookRow.name == "alerts"))
        assert row.sealed_secret and SECRET not in row.sealed_secret
    # a name is taken once per project
    again = admin.post("/api/v1/webhooks", json=HOOK)
    assert again.status_code == 409 and SECRET not in again.text
    assert admin.delete("/api/v1/webhooks/alerts").json() == {"name": "alerts",
                                                              "project": "default",
                                                              "deleted": True}
    assert admin.get("/api/v1/webhooks/alerts").status_code == 404
    assert admin.delete("/api/v1/webhooks/alerts").status_code == 404
    audit = clients["site admin"].get("/api/v1/audit", params={"action": "webhook."}).json()
    entries = [(a["action"], a["actor"], a["target"], a["detail"]) for a in audit["items"]]
    assert entries == [
        ("webhook.delete", "pat", "alerts", "was sending to https://hooks.example.com"),
        ("webhook.create", "pat", "plain", "to https://hooks.example.com; events: run.failed, "
         "run.queued, run.running, run.stopped, run.succeeded; format: rlark; signed: no"),
        ("webhook.create", "pat", "alerts", "to https://hooks.example.com; events: run.failed, "
         "run.succeeded; format: slack; signed: yes")]
    # the URL's path (a Slack URL's token) is not in the audit log
    assert all("secret-path" not in e[3] for e in entries)


def test_only_project_admins_manage_webhooks(clients):
    r = clients["site admin"].post("/api/v1/webhooks", json=HOOK)
    assert r.status_code == 201
    for who, status in (("member", 403), ("viewer", 403), ("stranger", 404)):
        c = clients[who]
        answers = [c.get("/api/v1/webhooks"), c.get("/api/v1/webhooks/alerts"),
                   c.get("/api/v1/webhooks/alerts/deliveries"),
                   c.post("/api/v1/webhooks", json={**HOOK, "name": "mine"}),
                   c.delete("/api/v1/webhooks/alerts")]
        assert [a.status_code for a in answers] == [status] * 5, (who, [a.text for a in answers])
        assert all(SECRET not in a.text for a in answers)
    assert clients["project admin"].get("/api/v1/webhooks/alerts").status_code == 200


@pytest.mark.parametrize("body, field, value", [
    ({**HOOK, "url": "file:///etc/passwd"}, "url", "file:///etc/passwd"),
    ({**HOOK, "url": "http://169.254.169.254/latest/meta-data/"}, "url", "169.254.169.254"),
    ({**HOOK, "url": "http://127.0.0.1:8470/api/v1/jobs"}, "url", "127.0.0.1"),
    ({**HOOK, "events": ["run.finished"]}, "events[0]", "run.finished"),
    ({**HOOK, "format": "teams"}, "format", "teams"),
    ({**HOOK, "name": "Alerts!"}, "name", "Alerts!"),
    ({**HOOK, "secret": "tooshort"}, "secret", "8 characters"),
    ({**HOOK, "secret": 12345678901234567}, "secret", "int"),
    ([HOOK], "$", "list"),
])
def test_bad_webhooks_are_422_with_field_value_and_fix(clients, body, field, value):
    r = clients["project admin"].post("/api/v1/webhooks", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["code"] == "Invalid" and value in detail["message"]
    [finding] = detail["findings"]
    assert finding["path"] == field and finding["hint"] and value in finding["message"]
    assert SECRET not in r.text
    assert clients["project admin"].get("/api/v1/webhooks").json() == []


def test_a_body_that_is_not_json_or_too_large_is_4xx(clients):
    admin = clients["project admin"]
    r = admin.post("/api/v1/webhooks", content=b"name: x", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "must be JSON" in r.json()["detail"]["message"]
    r = admin.post("/api/v1/webhooks", json={**HOOK, "url": "https://h.example.com/" + "x" * 20000})
    assert r.status_code == 413
    r = admin.get("/api/v1/webhooks/alerts/deliveries", params={"limit": 0})
    assert r.status_code == 422 and r.json()["detail"]["errors"][0]["field"] == "limit"


def test_an_allowed_network_lets_an_internal_receiver_be_registered(clients, monkeypatch):
    body = {**HOOK, "url": "http://127.0.0.1:9/hook"}
    assert clients["project admin"].post("/api/v1/webhooks", json=body).status_code == 422
    monkeypatch.setenv("RLARK_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
    assert clients["project admin"].post("/api/v1/webhooks", json=body).status_code == 201
    monkeypatch.setenv("RLARK_WEBHOOK_ALLOW_NETWORKS", "not-a-network")
    with pytest.raises(ValueError, match="RLARK_WEBHOOK_ALLOW_NETWORKS"):
        n.WebhookSettings.from_env()


# --- the console -------------------------------------------------------------------------------------


def test_console_lists_creates_deletes_and_shows_the_delivery_log(clients, app_store):
    from rlark.store.models import utcnow
    from rlark.store.webhooks import DeliveryRow, DeliveryState

    admin = clients["project admin"]
    r = admin.post("/webhooks", data={"name": "alerts", "url": HOOK["url"], "format": "slack",
                                      "events": ["run.failed", "run.queued"], "secret": SECRET},
                   follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/webhooks", r.text
    page = admin.get("/webhooks", cookies=r.cookies)
    assert page.status_code == 200 and SECRET not in page.text
    assert 'data-webhook="alerts" data-secret="set"' in page.text
    assert "run.failed, run.queued" in page.text and "Webhook alerts added." in page.text
    # a refused form comes back with the error and without the secret
    bad = admin.post("/webhooks", data={"name": "meta", "url": "http://169.254.169.254/",
                                        "events": "run.failed", "secret": SECRET})
    assert bad.status_code == 422 and "link-local" in bad.text and SECRET not in bad.text
    assert 'value="meta"' in bad.text
    # the delivery log: status code, attempts, last error
    _, store = app_store
    with store.session() as s:
        hook_id = s.scalar(select(WebhookRow.id).where(WebhookRow.name == "alerts"))
        s.add(DeliveryRow(webhook_id=hook_id, run_id=1, event=WebhookEvent.failed,
                          facts={"job": "ppo", "run": 2}, state=DeliveryState.failed, attempts=5,
                          last_status=503, last_error="HTTP 503: busy", last_attempt_at=utcnow()))
    log = admin.get("/webhooks/alerts")
    assert log.status_code == 200
    row = log.text[log.text.index('data-state="failed"'):]
    assert all(x in row for x in ("run.failed", 'href="/jobs/ppo"', "#2", ">5<", ">503<",
                                  "HTTP 503: busy"))
    assert admin.get("/webhooks/nothing").status_code == 404
    # members see no such page; a project admin deletes
    assert clients["member"].get("/webhooks").status_code == 403
    gone = admin.post("/webhooks/alerts/delete", data={}, follow_redirects=False)
    assert gone.status_code == 303
    assert admin.get("/api/v1/webhooks").json() == []
