"""The real ``rlark`` command in a subprocess against a real Run: one one-Worker Job (one Ray
node) on the server ``rlark server`` builds (tests/server.py AppServer, its controller running),
for what only a running Run shows: ``logs --follow`` printing lines as the run script writes
them and ending by itself once the Workers are released, and ``describe`` showing the
conditions the controller set. Everything else the CLI does is tests/test_cli.py's, on Jobs that
never start a Ray node.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.server import AppServer, assert_nothing_left
from tests.streams import ArrivingLines
from tests.test_cli import cli_env, error_line, rlark

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STEPS = ["step 1 of 3", "step 2 of 3", "step 3 of 3"]


def run_script() -> str:
    """Prints a step, then waits for the test's word (a file in the ``/signal`` mount: a Worker's
    /tmp is its own) before the next; each wait bounded, so a failed test leaves no Run behind
    for long even if the server's stop did not come."""
    wait = "timeout 120 sh -c 'until [ -e /signal/{n} ]; do sleep 0.1; done' || exit 3"
    return "\n".join([f'echo "{STEPS[0]}"', wait.format(n=2), f'echo "{STEPS[1]}"',
                      wait.format(n=3), f'echo "{STEPS[2]}"'])


def job_yaml(name: str, signal: Path) -> str:
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"headRole": "head", "terminationGracePeriodSeconds": 5,
                    "failurePolicy": {"joinTimeoutSeconds": 120},
                    "runScript": run_script(),
                    "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                               "resources": {"cpu": 1, "memory": "1Gi"},
                               "mounts": [{"name": "signal", "type": "hostPath",
                                           "source": str(signal), "mountPath": "/signal",
                                           "readOnly": True}]}]}}
    return json.dumps(doc)


@pytest.fixture
def app(rlark_home):
    app = AppServer(rlark_home).start()
    try:
        yield app
    finally:
        app.stop()


def take_until(out: ArrivingLines[str], line: str, what: str, timeout: float = 60) -> list[str]:
    """The lines up to and with ``line`` (Ray's and the bootstrap's own come before and between
    the run script's)."""
    got: list[str] = []
    while line not in got:
        got += out.take(1, what, timeout=timeout)
    return got


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_logs_follow_shows_a_real_run_as_it_writes_and_ends_when_its_workers_are_released(app, tmp_path):
    """``rlark logs --follow`` on a Running Run prints what its log holds, then each line the run
    script writes while it follows (the next step is written only after the follower printed the
    one before: it can only come through following), and ends by itself, exit code 0, once the
    Run has ended and its Worker is released. ``describe`` of the Running Run shows the
    conditions the controller set, as the API has them."""
    signal = tmp_path / "signal"
    signal.mkdir()
    spec = tmp_path / "follow.yaml"
    spec.write_text(job_yaml("follow", signal))
    env = cli_env(RLARK_SERVER=app.url)
    submitted = rlark("submit", str(spec), env=env)
    assert submitted.returncode == 0, submitted.stderr
    app.wait_for("follow", "Running", lambda j: j["phase"] == "Running", timeout=180)

    stderr = tmp_path / "follow.stderr"
    with open(stderr, "w") as err:
        # --tail: everything the log holds, however many lines Ray wrote before the run script
        proc = subprocess.Popen([sys.executable, "-m", "rlark.cli", "logs", "follow", "--follow",
                                 "--tail", "100000"],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        out = ArrivingLines((line.rstrip("\n") for line in proc.stdout), "rlark logs --follow")
        before = take_until(out, STEPS[0], "the run script's first step")
        assert not any(line.startswith("[") for line in before)  # one Worker: no name prefix
        assert "RLARK_EVENT" not in "\n".join(before)  # lifecycle lines hidden by default

        # the Running Run's conditions, as the API has them (set by the controller), unchanged
        # while describe read them (a pass may add one, e.g. Responsive: then read again)
        for _ in range(3):
            conditions = app.job("follow")["currentRun"]["conditions"]
            desc = rlark("describe", "job", "follow", env=env)
            if app.job("follow")["currentRun"]["conditions"] == conditions:
                break
        else:
            pytest.fail(f"the Run's conditions kept changing: {conditions}")
        kinds = {c["type"]: c["status"] for c in conditions}
        assert kinds.get("AllJoined") == "True" and kinds.get("HeadReady") == "True", conditions
        assert desc.returncode == 0, desc.stderr
        text = desc.stdout
        start = text.index("Conditions")
        rows = [line.split(None, 4) for line in text[start:text.index("\nWorkers", start)].splitlines()[2:]
                if line.strip()]
        assert [row[:3] for row in rows] == [[c["type"], c["status"], c["reason"]] for c in conditions]
        assert [row[3] for row in rows] == [c["lastTransitionTime"][:19] for c in conditions]

        (signal / "2").touch()
        assert take_until(out, STEPS[1], "step 2, written after the follower printed step 1")[-1] == STEPS[1]
        assert proc.poll() is None  # still following: the Run still runs
        (signal / "3").touch()
        rest = out.rest("its end once the Run ended and its Worker was released", timeout=120)
        assert STEPS[2] in rest
        assert proc.wait(timeout=10) == 0, stderr.read_text()
        assert "Traceback" not in stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    job = app.wait_for("follow", "its Worker released",
                       lambda j: all(w["finishedAt"] for w in j["currentRun"]["workers"]), timeout=60)
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    assert_nothing_left(job)

    # following an ended Run prints its log and ends at once
    again = rlark("logs", "follow", "-f", "--rank", "0", "--tail", "100000", env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if line in STEPS] == STEPS
    ghost = rlark("logs", "follow", "-f", "--worker", "ghost", env=env, timeout=60)
    assert ghost.returncode == 1 and "no Worker of 'follow'" in error_line(ghost)
