"""Webhook deliveries end to end (issue 25 item 4): real Runs on the server ``rlark server`` builds
(tests/server.py AppServer: local runtime, controller and notifier running) notify a real HTTP
receiver this test starts (``http.server`` in a thread), which checks each request's HMAC
signature the way docs/notifications.md tells receivers to.

Without Ray: a Job holding every CPU with a prepare script that waits (no Ray node starts) keeps
a second Job queued (``run.queued``); stopping the first is ``run.stopped``; the second then starts
and fails in its prepare script (``run.failed`` with its reason), delivered to a signed RLark
receiver, to a Slack-format one, to one that answers 500 then 200 (retried: two attempts in the
log) and to one that always answers 503 (failed after its attempts, the status and error in the
log). With one Ray node (``ray``): a one-Worker Run that succeeds is ``run.running`` then
``run.succeeded``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.server import AppServer, free_port

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SECRET = "whsec-e2e-0123456789abcdef"
TOKEN_VALUE = "tok-e2e-9f8e7d6c5b4a"


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every POST (path, headers, body) and answers each
    path with the statuses of ``script`` in turn (the last one repeated; default 200)."""

    def __init__(self, script: dict[str, list[int]] | None = None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.got: list[dict] = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                statuses = receiver.script.get(self.path, [200])
                status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                with receiver.cond:
                    receiver.got.append({"path": self.path, "headers": dict(self.headers),
                                         "body": body, "answered": status})
                    receiver.cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "7")
                self.end_headers()
                self.wfile.write(b"refused" if status >= 300 else b"thanks!")

            def log_message(self, *args) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(self, what: str, done, timeout: float = 60) -> list[dict]:
        """The requests so far once ``done(requests)`` holds; an error naming ``what`` when
        ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not done(self.got):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the receiver did not get {what} within {timeout} s; "
                                         f"it got {[(g['path'], g['body'][:200]) for g in self.got]}")
                self.cond.wait(left)
            return list(self.got)

    def on(self, path: str) -> list[dict]:
        with self.cond:
            return [g for g in self.got if g["path"] == path]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(request: dict) -> dict:
    """The body of a request whose signature checks (docs/notifications.md): HMAC-SHA256 keyed
    with the secret over ``<X-RLark-Timestamp>.<body>``, hex, after ``sha256=``."""
    stamp = request["headers"]["X-RLark-Timestamp"]
    mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + request["body"], hashlib.sha256)
    assert hmac.compare_digest("sha256=" + mac.hexdigest(),
                               request["headers"]["X-RLark-Signature"]), request
    assert abs(int(stamp) - time.time()) < 300
    return json.loads(request["body"])


def events(requests: list[dict], path: str) -> list[str]:
    return [r["headers"]["X-RLark-Event"] for r in requests if r["path"] == path]


def job(name: str, cpu: int, prepare: str, run: str = "true", env: list | None = None) -> str:
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"headRole": "head", "runScript": run, "terminationGracePeriodSeconds": 3,
                    "failurePolicy": {"maxRestarts": 0},
                    "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                               "resources": {"cpu": cpu, "memory": "1Gi"},
                               "prepareScript": prepare, "env": env or []}]}}
    return json.dumps(doc)


@pytest.fixture
def receiver():
    r = Receiver({"/flaky": [500, 200], "/broken": [503]})
    yield r
    r.stop()


@pytest.fixture
def app(rlark_home, monkeypatch):
    monkeypatch.setenv("RLARK_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("RLARK_WEBHOOK_POLL", "0.2")
    monkeypatch.setenv("RLARK_WEBHOOK_BACKOFF", "0.3")
    monkeypatch.setenv("RLARK_WEBHOOK_ATTEMPTS", "3")
    monkeypatch.setenv("RLARK_WEBHOOK_QUEUED_SECONDS", "1")
    monkeypatch.setenv("RLARK_WEBHOOK_TIMEOUT", "5")
    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def hook(app: AppServer, name: str, url: str, events: list[str], **extra) -> None:
    r = app.http.post("/api/v1/webhooks", json={"name": name, "url": url, "events": events,
                                                **extra})
    assert r.status_code == 201, r.text


def deliveries(app: AppServer, name: str) -> list[dict]:
    r = app.http.get(f"/api/v1/webhooks/{name}/deliveries")
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.timeout(300)
def test_queued_stopped_and_failed_runs_notify_signed_slack_and_retrying_receivers(app, receiver):
    every = ["run.failed", "run.queued", "run.running", "run.stopped", "run.succeeded"]
    hook(app, "signed", receiver.url("/signed"), every, secret=SECRET)
    hook(app, "slack", receiver.url("/slack"), ["run.failed"], format="slack")
    hook(app, "flaky", receiver.url("/flaky"), ["run.failed"])
    hook(app, "broken", receiver.url("/broken"), ["run.failed"])
    r = app.http.patch("/api/v1/secrets/tok", json={"data": {"value": TOKEN_VALUE}})
    assert r.status_code == 200, r.text
    # the machine held: every CPU asked, a prepare script that waits (no Ray node starts)
    held = app.http.post("/api/v1/jobs", content=job("held", os.cpu_count() or 1,
                                                     "sleep 3600").encode(),
                         headers={"Content-Type": "application/json"})
    assert held.status_code == 201, held.text
    app.wait_for("held", "its Worker preparing",
                 lambda j: [w["phase"] for w in j["currentRun"]["workers"]] == ["Preparing"],
                 timeout=120)
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "value"}}}]
    prepare = textwrap.dedent("""\
        echo "the token is $TOKEN"
        exit 3
        """)
    r = app.http.post("/api/v1/jobs", content=job("waits", 1, prepare, env=env).encode(),
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    got = receiver.wait("run.queued", lambda g: "run.queued" in events(g, "/signed"))
    queued = verified(next(g for g in got if g["headers"]["X-RLark-Event"] == "run.queued"))
    assert queued["job"] == "waits" and queued["phase"] == "Pending"
    assert queued["reason"] == "Queued" and queued["queuedSeconds"] >= 1
    assert app.job("waits")["phase"] == "Pending"  # still waiting: the notice came while queued

    assert app.http.post("/api/v1/jobs/held/stop").status_code == 200
    got = receiver.wait("run.stopped and run.failed",
                        lambda g: {"run.stopped", "run.failed"} <= set(events(g, "/signed")))
    signed = {r["headers"]["X-RLark-Event"]: verified(r) for r in got if r["path"] == "/signed"}
    assert signed["run.stopped"]["job"] == "held" and signed["run.stopped"]["phase"] == "Stopped"
    failed = signed["run.failed"]
    assert (failed["job"], failed["phase"], failed["reason"]) == ("waits", "Failed",
                                                                   "PrepareFailed")
    assert failed["project"] == "default" and failed["run"] == 1 and failed["message"]
    assert "\n" not in failed["message"]
    assert sorted(signed) == ["run.failed", "run.queued", "run.stopped"]  # nothing else happened
    # Slack: the Slack shape, unsigned (no secret given)
    receiver.wait("the Slack message", lambda g: "run.failed" in events(g, "/slack"))
    [slack] = receiver.on("/slack")
    body = json.loads(slack["body"])
    assert body["text"].startswith(":x: Run 1 of Job waits (project default) failed: PrepareFailed")
    assert "X-RLark-Signature" not in slack["headers"]
    # the receiver that answered 500 got the same delivery again, and took it
    receiver.wait("a second attempt at /flaky", lambda g: len([r for r in g
                                                               if r["path"] == "/flaky"]) == 2)
    tries = receiver.on("/flaky")
    assert [t["answered"] for t in tries] == [500, 200]
    assert tries[0]["body"] == tries[1]["body"]
    assert tries[0]["headers"]["X-RLark-Delivery"] == tries[1]["headers"]["X-RLark-Delivery"]
    receiver.wait("three attempts at /broken", lambda g: len([r for r in g
                                                              if r["path"] == "/broken"]) == 3)
    # the delivery log says what happened
    deadline = time.monotonic() + 30
    while True:
        logs = {name: deliveries(app, name) for name in ("signed", "flaky", "broken", "slack")}
        if all(d["state"] != "pending" for entries in logs.values() for d in entries):
            break
        assert time.monotonic() < deadline, logs
        time.sleep(0.2)
    [flaky] = logs["flaky"]
    assert (flaky["state"], flaky["attempts"], flaky["lastStatus"], flaky["event"]) == \
        ("succeeded", 2, 200, "run.failed")
    [broken] = logs["broken"]
    assert (broken["state"], broken["attempts"], broken["lastStatus"]) == ("failed", 3, 503)
    assert broken["lastError"] == "HTTP 503: refused"
    assert [d["event"] for d in logs["signed"]] == ["run.failed", "run.stopped", "run.queued"]
    assert all(d["state"] == "succeeded" and d["attempts"] == 1 for d in logs["signed"])
    views = {w["name"]: w for w in app.http.get("/api/v1/webhooks").json()}
    assert views["broken"]["deliveries"] == {"pending": 0, "succeeded": 0, "failed": 1}
    # a secret value the Job's Worker printed reaches no receiver
    assert all(TOKEN_VALUE.encode() not in g["body"] for g in receiver.got)
    assert all(SECRET.encode() not in g["body"] for g in receiver.got)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_run_that_succeeds_notifies_running_then_succeeded(app, receiver):
    hook(app, "signed", receiver.url("/signed"), ["run.running", "run.succeeded"], secret=SECRET)
    r = app.http.post("/api/v1/jobs", content=job("fine", 1, "true", run="echo done").encode(),
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    got = receiver.wait("run.running and run.succeeded",
                        lambda g: sorted(events(g, "/signed")) == ["run.running", "run.succeeded"],
                        timeout=240)
    # sent by concurrent senders, so they may arrive in either order: their times order them
    bodies = sorted((verified(g) for g in got), key=lambda b: b["at"])
    assert [(b["event"], b["phase"], b["previousPhase"]) for b in bodies] == [
        ("run.running", "Running", "Starting"), ("run.succeeded", "Succeeded", "Running")]
    assert bodies[1]["job"] == "fine" and bodies[1]["reason"] and bodies[1]["at"].endswith("Z")
    assert app.job("fine")["phase"] == "Succeeded"
