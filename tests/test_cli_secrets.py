"""``rlark secret`` against a live API (issue 13 item 1): values from standard input, arguments and
files go in and never come back out (``list``, ``get``, ``-o json``, ``delete``, errors); a full
composer queue is a clear CLI error with when to try again.

A real server (API and console in a thread, real SQLite, no controller) and the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from tests.test_cli import cli_env, serve_live

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

VALUE = "wb-cli-0123456789abcdef"


@pytest.fixture
def server(rlark_home):
    yield from serve_live(rlark_home)


def secret(server, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rlark.cli", "secret", *args], input=stdin,
                          env=cli_env(RLARK_SERVER=server.url), capture_output=True, text=True,
                          timeout=60)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_values_go_in_from_stdin_arguments_and_files_and_never_come_out(server, tmp_path):
    key_file = tmp_path / "sa.json"
    key_file.write_text('{"private_key": "' + VALUE + '-file"}')
    runs = [secret(server, "set", "wandb", "api_key", stdin=VALUE + "\n"),
            secret(server, "set", "wandb", "entity=" + VALUE + "-arg"),
            secret(server, "set", "gcp", "--from-file", f"sa.json={key_file}")]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
    assert runs[0].stdout.strip() == "secret wandb (default): set api_key"
    listed = secret(server, "list")
    got = secret(server, "get", "wandb", "-o", "json")
    for proc in (*runs, listed, got, secret(server, "list", "-o", "yaml")):
        assert VALUE not in proc.stdout + proc.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["gcp", "sa.json", "set"], ["wandb", "api_key", "set"],
                                     ["-", "entity", "set"]]
    assert [k["key"] for k in json.loads(got.stdout)["keys"]] == ["api_key", "entity"]
    # what was sealed is what was given: the trailing line break of stdin dropped
    from rlark.store.secrets import open_refs

    with server.store.session() as s:
        values = open_refs(s, 1, [("wandb", "api_key"), ("wandb", "entity"), ("gcp", "sa.json")],
                           server.app.state.secrets.box)
    assert values == {("wandb", "api_key"): VALUE, ("wandb", "entity"): VALUE + "-arg",
                      ("gcp", "sa.json"): '{"private_key": "' + VALUE + '-file"}'}


def test_delete_and_errors_name_the_secret_never_a_value(server):
    assert secret(server, "set", "wandb", "a=" + VALUE, "b=" + VALUE + "2").returncode == 0
    proc = secret(server, "delete", "wandb", "--key", "a")
    assert proc.returncode == 0 and proc.stdout.strip() == "deleted key a of secret wandb"
    proc = secret(server, "delete", "wandb", "--key", "a")
    assert proc.returncode == 1 and "has no key 'a'" in proc.stderr
    proc = secret(server, "set", "Bad_Name", "k=" + VALUE)
    assert proc.returncode == 1 and "secret name 'Bad_Name' is not valid" in proc.stderr
    assert VALUE not in proc.stderr
    proc = secret(server, "set", "wandb", "a", "b")
    assert proc.returncode == 1 and "only one KEY may take its value from standard input" in proc.stderr
    assert secret(server, "delete", "wandb").returncode == 0
    assert "no secrets" in secret(server, "list").stdout


def test_a_new_key_is_printed_for_the_operator():
    from cryptography.fernet import Fernet

    proc = subprocess.run([sys.executable, "-m", "rlark.cli", "secret", "key"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    Fernet(proc.stdout.strip().encode())  # a usable key


def test_a_busy_composer_is_a_clear_cli_error(server, monkeypatch, tmp_path):
    from rlark.rlinf_config import isolated
    from tests.conftest import EXAMPLES

    slots = isolated.ComposerSlots(slots=1, queue=0, wait_seconds=0.1)
    monkeypatch.setattr(isolated, "_slots", slots)
    held, done = threading.Event(), threading.Event()

    def hold():
        with slots.slot():
            held.set()
            done.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        proc = subprocess.run([sys.executable, "-m", "rlark.cli", "check",
                               str(EXAMPLES / "quickstart" / "job.yaml")],
                              env=cli_env(RLARK_SERVER=server.url), capture_output=True, text=True,
                              timeout=60)
    finally:
        done.set()
        t.join(10)
    assert proc.returncode == 1
    assert "composing" in proc.stderr and f"try again in {isolated.RETRY_AFTER_SECONDS} s" in proc.stderr
