"""The tests' leftover check (tests/server.py ``run_processes``) finds a Run's processes by PID
namespace, not by an environment variable a process can drop (issue 10, item 16): a process
the run script detaches with an empty environment and its own session is still the Run's, and
it is gone once the Run is stopped."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from rlark.runtimes.local import use_pid_namespace
from tests.server import assert_nothing_left, run_processes, serve

pytestmark = pytest.mark.ray

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: hide}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  roles:
    - {name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {cpu: 1, memory: 1Gi}}
  runScript: |
    setsid env -i /bin/sleep 604 < /dev/null > /dev/null 2>&1 &
    sleep 600
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


@pytest.mark.skipif(not use_pid_namespace(), reason="Workers get their own PID namespace only as root")
def test_a_process_that_drops_the_run_id_is_still_found(server):
    server.submit(JOB)
    job = server.wait_phase("hide", {"Running"}, timeout=180)
    uid = job["currentRun"]["uid"]
    deadline = time.monotonic() + 30
    while True:  # the run script has just started: wait for its detached child
        hidden = [p for p in run_processes(uid) if p.cmdline()[:2] == ["/bin/sleep", "604"]]
        if hidden:
            break
        assert time.monotonic() < deadline, [p.cmdline() for p in run_processes(uid)]
        time.sleep(0.2)
    (proc,) = hidden
    # nothing in it names the Run: no environment, a session of its own
    assert proc.environ() == {}
    assert os.getsid(proc.pid) == proc.pid
    assert server.cli("stop", "hide").returncode == 0
    server.wait_phase("hide", {"Stopped"}, timeout=60)
    assert_nothing_left(server.wait_released("hide"))
    assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
