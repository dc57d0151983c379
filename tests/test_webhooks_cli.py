"""``rlark webhook`` against a live API (issue 25 item 4): create (the secret from standard input,
never printed back), list and deliveries in text, JSON and YAML, delete, a refused URL as one
error line with field, value and fix, and an example in every command's help.

The server ``rlark server`` builds (tests.server.AppServer: controller and notifier running, real
SQLite; one failed delivery's log entry is written into the store as the notifier would, since no
receiver here fails five times on purpose; tests/test_webhooks_delivery.py makes real ones) and
the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from rlark.store import WebhookRow
from rlark.store.models import utcnow
from rlark.store.webhooks import DeliveryRow, DeliveryState, WebhookEvent
from tests.server import AppServer
from tests.test_cli import cli_env, error_line

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SECRET = "whsec-cli-0123456789abcdef"


@pytest.fixture
def server(rlark_home):
    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def webhook(server, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rlark.cli", "webhook", *args], input=stdin,
                          env=cli_env(RLARK_SERVER=server.url), capture_output=True, text=True,
                          timeout=60)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    return proc


def test_create_list_deliveries_delete(server):
    made = webhook(server, "create", "alerts", "--url", "https://hooks.example.com/rlark",
                   "-e", "run.failed", "-e", "run.queued", "--secret-stdin", stdin=SECRET + "\n")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == ("webhook alerts (default) created: run.failed, run.queued to "
                                   "https://hooks.example.com/rlark as rlark, secret set")
    slack = webhook(server, "create", "team", "--url", "https://hooks.slack.com/services/T/B/x",
                    "--format", "slack", "-o", "json")
    assert slack.returncode == 0 and json.loads(slack.stdout)["secret"] == "unset"
    listed = webhook(server, "list")
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["alerts", "team"]
    assert rows[0][2:5] == ["failed,queued", "rlark", "set"] and rows[1][3:5] == ["slack", "unset"]
    as_yaml = yaml.safe_load(webhook(server, "list", "-o", "yaml").stdout)
    assert [w["name"] for w in as_yaml] == ["alerts", "team"]
    # the sealed secret opens to what was given on standard input, its line break dropped
    with server.store.session() as s:
        row = s.query(WebhookRow).filter_by(name="alerts").one()
        assert server.app.state.webhooks.box.open(row.sealed_secret, "t") == {"secret": SECRET}
        s.add(DeliveryRow(webhook_id=row.id, run_id=1, event=WebhookEvent.failed,
                          facts={"job": "ppo", "run": 2}, state=DeliveryState.failed,
                          attempts=5, last_status=503, last_error="HTTP 503: busy",
                          last_attempt_at=utcnow()))
    empty = webhook(server, "deliveries", "team")
    assert empty.stdout.strip() == "no deliveries for webhook team yet"
    log = webhook(server, "deliveries", "alerts")
    [entry] = [line.split() for line in log.stdout.splitlines()[1:]]
    assert entry[1:6] == ["run.failed", "ppo:2", "failed", "5", "503"]
    assert log.stdout.rstrip().endswith("HTTP 503: busy")
    [as_json] = json.loads(webhook(server, "deliveries", "alerts", "-o", "json").stdout)
    assert (as_json["attempts"], as_json["lastError"]) == (5, "HTTP 503: busy")
    gone = webhook(server, "delete", "alerts")
    assert gone.returncode == 0 and gone.stdout.strip() == "deleted webhook alerts"
    assert [w["name"] for w in json.loads(webhook(server, "list", "-o", "json").stdout)] == ["team"]
    missing = webhook(server, "delete", "alerts")
    assert missing.returncode == 1 and "no webhook named 'alerts'" in error_line(missing)


def test_a_refused_webhook_is_one_error_line_with_field_value_and_fix(server):
    proc = webhook(server, "create", "meta", "--url", "http://169.254.169.254/latest/",
                   "--secret-stdin", stdin=SECRET)
    assert proc.returncode == 1 and proc.stdout == ""
    line = error_line(proc)
    assert "url: 'http://169.254.169.254/latest/' points at 169.254.169.254, a link-local" in line
    assert "RLARK_WEBHOOK_ALLOW_NETWORKS" in line
    short = webhook(server, "create", "x", "--url", "https://h.example.com", "--secret-stdin",
                    stdin="tiny")
    assert short.returncode == 1 and "secret: has 4 characters" in error_line(short)
    assert "tiny" not in short.stderr


def test_every_webhook_command_teaches_with_an_example():
    for cmd in ("create", "list", "delete", "deliveries"):
        proc = subprocess.run([sys.executable, "-m", "rlark.cli", "webhook", cmd, "--help"],
                              env=cli_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and f"rlark webhook {cmd}" in proc.stdout, proc.stdout
        assert "Example" in proc.stdout
