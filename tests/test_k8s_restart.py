"""A server restart never ends a training Run on Kubernetes either (issue 12, items 1 and 6).

RLark's server parts (controller, KubernetesRuntime, store) against the real test bed; the
Workers are kwok Pods whose logs the test writes as their bootstraps would
(tests/k8s_testbed.py ``KwokWorkers``). A first server starts the Run and shuts down the way an
upgrade does (its Runs carry on); things happen while no server runs; a second server on the same
store adopts the Run, which reaches its true end.
"""

from __future__ import annotations

import logging

import pytest

from tests.k8s_testbed import KwokWorkers, RlarkOnK8s, wait_for
from tests.test_k8s_runtime import job_yaml

from rlark.spec import load_job  # noqa: E402


@pytest.fixture
def home(rlark_home, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    path = rlark_home / "server"
    path.mkdir()
    return path


def first_server_runs_it(k8s_testbed, k8s_namespace, home, tmp_path) -> KwokWorkers:
    """A first server brings Job ppo to Running, then shuts down leaving it running."""
    text = job_yaml()
    workers = KwokWorkers(k8s_testbed, k8s_namespace, load_job(text)[0], tmp_path)
    first = RlarkOnK8s(k8s_testbed, k8s_namespace, home, stop_runs_on_exit=False)
    try:
        first.submit(text)
        workers.wait_running()
        workers.join()
        workers.start_run_script()
        first.wait_phase("ppo", "Running")
        workers.logs[workers.head.name].write("step 1")
        head_log = next(w for w in first.job("ppo")["currentRun"]["workers"] if w["nodeRank"] == 0)["log"]
        wait_for("step 1 in the head's log file", lambda: "step 1" in open(head_log).read())
    finally:
        first.close()
    assert len(k8s_testbed.admin().list_namespaced_pod(k8s_namespace).items) == 3  # still there
    return workers


def test_a_run_that_finishes_while_no_server_runs_gets_its_true_result_and_a_whole_log(
        k8s_testbed, k8s_namespace, home, tmp_path):
    workers = first_server_runs_it(k8s_testbed, k8s_namespace, home, tmp_path)
    workers.logs[workers.head.name].write("step 2", "step 3")
    workers.finish_run_script(0)
    second = RlarkOnK8s(k8s_testbed, k8s_namespace, home)
    try:
        job = second.wait_ended("ppo", timeout=90)
        assert (job["phase"], job["reason"], job["currentRun"]["exitCode"]) == ("Succeeded", "Completed", 0), job
        head = next(w for w in job["currentRun"]["workers"] if w["nodeRank"] == 0)
        text = open(head["log"]).read()
        assert [text.count(f"step {i}") for i in (1, 2, 3)] == [1, 1, 1], text
        assert text.count('"event": "running"') == 1 and text.count('"event": "run_finished"') == 1
        reasons = [e["reason"] for e in second.events("ppo")]
        assert reasons.count("Adopted") == 1 and reasons.count("ServerStopped") == 1, reasons
        assert reasons.count("NodeJoined") == 3, reasons  # lines read once, across both servers
    finally:
        second.close()


def test_a_pod_deleted_while_no_server_runs_fails_the_run_naming_the_worker_and_the_window(
        k8s_testbed, k8s_namespace, home, tmp_path):
    first_server_runs_it(k8s_testbed, k8s_namespace, home, tmp_path)
    k8s_testbed.admin().delete_namespaced_pod("ppo-pool-1", k8s_namespace, grace_period_seconds=0)
    wait_for("Pod ppo-pool-1 to be gone", lambda: all(
        p.metadata.name != "ppo-pool-1" for p in k8s_testbed.admin().list_namespaced_pod(k8s_namespace).items))
    second = RlarkOnK8s(k8s_testbed, k8s_namespace, home)
    try:
        job = second.wait_phase("ppo", "Failed", timeout=60)
        assert job["reason"] == "WorkerLost", job
        assert "ppo-pool-1" in job["message"] and "rank 2" in job["message"], job["message"]
        assert "while the RLark server was down, between" in job["message"], job["message"]
        second.wait_ended("ppo", timeout=60)
        wait_for("the other Pods deleted", lambda: not k8s_testbed.admin().list_namespaced_pod(k8s_namespace).items,
                 timeout=60)
    finally:
        second.close()
