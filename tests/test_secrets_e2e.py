"""A Job with a secret on a real server with a real Worker (issue 13 items 1, 2 and 8): the run
script gets the secret's value and its role's env, PATH and HOME, and nothing else of the
server's environment (its cloud credentials, its database URL); the secret's value, which the
script prints, is in no answer of the API, the console, the record, the Events, the logs or the
CLI, nor in the server's own log; a Run whose secret was deleted fails with SecretMissing.

Real ``rlark server`` (local runtime, SQLite), a real Ray node, the real CLI.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest
import yaml

from tests.server import RlarkServer, ray_tmp_dir
from tests.test_local_runtime import exchange_dir, job_yaml

pytestmark = pytest.mark.ray

VALUE = "wb-" + secrets.token_hex(12)
#: what the server's own environment holds and no Worker may see
SERVER_ENV = {"AWS_SECRET_ACCESS_KEY": "server-aws-" + secrets.token_hex(8),
              "SERVER_DATABASE_URL": f"postgresql://rlark:db-pw-{secrets.token_hex(8)}@db/rlark"}


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(), **SERVER_ENV}).start()
    try:
        yield srv
    finally:
        srv.stop()


def cli(server: RlarkServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlark.cli", *args], env=server.env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def everything_a_reader_gets(server: RlarkServer, name: str,
                             secret_exists: bool = True) -> dict[str, str]:
    """Every API, console, record, Event, log and CLI answer about Job ``name``: what -> text
    (``secret_exists``: secret ``wandb`` is there to be shown)."""
    http = server.http
    out: dict[str, str] = {}
    for path in (
        "/api/v1/jobs", f"/api/v1/jobs/{name}", f"/api/v1/jobs/{name}/runs",
        f"/api/v1/jobs/{name}/workers", f"/api/v1/jobs/{name}/events",
        f"/api/v1/jobs/{name}/record", f"/api/v1/jobs/{name}/record?format=yaml",
        f"/api/v1/jobs/{name}/record?format=md", f"/api/v1/jobs/{name}/logs",
        f"/api/v1/jobs/{name}/logs?lifecycle=true", f"/api/v1/jobs/{name}/logs?follow=true",
        "/api/v1/secrets", "/api/v1/secrets/wandb", "/api/v1/audit",
        "/jobs", f"/jobs/{name}", f"/jobs/{name}?tab=events", f"/jobs/{name}?tab=logs",
        f"/jobs/{name}?tab=logs&lifecycle=1", f"/jobs/{name}?tab=record", f"/jobs/{name}?tab=spec",
        f"/jobs/{name}/_live?tab=logs", f"/jobs/{name}/logs.txt", f"/jobs/{name}/logs.csv",
        f"/jobs/{name}/record.md", f"/jobs/{name}/record.json", f"/jobs/{name}/edit",
        f"/jobs/{name}/clone",
    ):
        if path == "/api/v1/secrets/wandb" and not secret_exists:
            continue
        r = http.get(path, timeout=60)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        out[path] = r.text
    for args in (("describe", "job", name), ("get", "job", name, "-o", "yaml"),
                 ("get", "jobs"), ("logs", name), ("logs", name, "--lifecycle"),
                 ("record", name), ("secret", "list"), ("audit",)):
        proc = cli(server, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        out["rlark " + " ".join(args)] = proc.stdout + proc.stderr
    return out


def test_a_secret_reaches_the_run_script_and_no_reader(server, tmp_path):
    set_it = cli(server, "secret", "set", "wandb", "api_key", stdin=VALUE + "\n")
    assert set_it.returncode == 0, set_it.stderr
    assert VALUE not in set_it.stdout + set_it.stderr and "set api_key" in set_it.stdout
    shared = exchange_dir(tmp_path / "shared")
    env_file = shared / "worker-env.txt"
    doc = yaml.safe_load(job_yaml("sec", pool_workers=0, shared=shared, run=(
        f"printenv > {env_file}; echo the key is $WANDB_API_KEY; exit 3")))
    doc["spec"]["roles"][0]["env"] = [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}},
        {"name": "HELLO", "value": "world"}]
    r = server.http.post("/api/v1/jobs", content=json.dumps(doc),
                         headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    job = server.wait_phase("sec", {"Failed"}, timeout=240)
    assert job["reason"] == "RunFailed", job
    server.wait_released("sec")

    # the Worker's environment: the secret, its role's env, PATH and HOME; none of the server's
    worker_env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    assert worker_env["WANDB_API_KEY"] == VALUE
    assert worker_env["HELLO"] == "world"
    assert worker_env["PATH"] and worker_env["HOME"]
    for name, value in SERVER_ENV.items():
        assert name not in worker_env
        assert not any(value in v for v in worker_env.values())
    assert "RLARK_DATABASE_URL" not in worker_env and "RLARK_HOME" not in worker_env

    # ... and the value printed by the script is masked wherever a reader looks
    answers = everything_a_reader_gets(server, "sec")
    leaked = [what for what, text in answers.items() if VALUE in text]
    assert leaked == []
    assert "the key is ***" in answers["/api/v1/jobs/sec/logs"]
    assert "the key is ***" in answers["/jobs/sec/logs.txt"]
    assert "secretKeyRef" in answers["/jobs/sec?tab=spec"]
    assert "secretKeyRef" in answers["rlark get job sec -o yaml"]
    assert 'value="wandb/api_key"' in answers["/jobs/sec/edit"]  # the wizard keeps the reference
    assert VALUE not in (server.home / "server.log").read_text()

    # the secret deleted: run 1's logs and messages stay masked (the values a Run was launched
    # with are kept with it, sealed), and the next Run fails before any Worker starts, naming it
    assert cli(server, "secret", "delete", "wandb").returncode == 0
    answers = everything_a_reader_gets(server, "sec", secret_exists=False)
    assert [what for what, text in answers.items() if VALUE in text] == []
    assert "the key is ***" in answers["/api/v1/jobs/sec/logs"]
    assert cli(server, "start", "sec").returncode == 0
    job = server.wait_phase("sec", {"Failed"}, timeout=60)
    assert (job["currentRun"]["number"], job["reason"]) == (2, "SecretMissing")
    assert "'wandb'" in job["message"] and "api_key" in job["message"]
    assert all(w["pid"] is None for w in job["currentRun"]["workers"])

    # set again with another value: the old one still never shows in run 1's logs
    assert cli(server, "secret", "set", "wandb", "api_key",
               stdin="wb-new-" + secrets.token_hex(12) + "\n").returncode == 0
    answers = everything_a_reader_gets(server, "sec")
    assert [what for what, text in answers.items() if VALUE in text] == []
