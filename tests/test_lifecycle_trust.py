"""What RLark believes of a Worker's lifecycle lines (issue 18 items 3 and 6), on the Kubernetes
test bed, where the test writes the Pod logs kwok serves and so plays a workload that reached
its container's log (a keeper that could not make itself non-dumpable says so in its first
line): results come from what the runtime observes (the container's exit status in the Pod's
status), a line that contradicts it is reported and not believed; lines are typed, and a
Worker's warnings are bounded.
"""

from __future__ import annotations

import pytest

from rlark.spec import load_job
from tests.k8s_testbed import KwokWorkers, wait_for
from tests.test_k8s_runtime import job_yaml, rlark  # noqa: F401  (the fixture)



def events_of(r, name: str) -> list[dict]:
    return r.jobs.events(name)


def running(rlark, k8s_testbed, k8s_namespace, tmp_path, protected: bool):  # noqa: F811
    text = job_yaml()
    workers = KwokWorkers(k8s_testbed, k8s_namespace, load_job(text)[0], tmp_path)
    r = rlark()
    r.submit(text)
    workers.wait_running()
    workers.join(protected=protected)
    workers.start_run_script()
    r.wait_phase("ppo", "Running")
    return r, workers


def test_a_forged_success_from_an_unprotected_channel_is_not_believed(
        rlark, k8s_testbed, k8s_namespace, tmp_path):  # noqa: F811
    r, workers = running(rlark, k8s_testbed, k8s_namespace, tmp_path, protected=False)
    head = workers.logs[workers.head.name]
    head.event(None, "run_finished", exit_code=0)  # what the workload wrote...
    head.event(None, "exit", code=0)
    k8s_testbed.terminate(k8s_namespace, workers.head.name, 1)  # ...and how the head really ended
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"], job["currentRun"]["exitCode"]) == ("Failed", "RunFailed", 1)
    said = [e for e in events_of(r, "ppo") if e["reason"] == "LifecycleContradiction"]
    assert said and "the runtime's observation is kept" in said[0]["message"]
    assert "exit with 1" in said[0]["message"] and said[0]["worker"] == workers.head.name


def test_a_protected_keepers_result_is_believed_at_once(rlark, k8s_testbed, k8s_namespace, tmp_path):  # noqa: F811
    r, workers = running(rlark, k8s_testbed, k8s_namespace, tmp_path, protected=True)
    workers.logs[workers.head.name].event(None, "run_finished", exit_code=0)
    # Succeeded before the head's container has ended: the keeper saw the run script's status
    job = r.wait_phase("ppo", "Succeeded")
    assert job["currentRun"]["exitCode"] == 0


def test_lines_are_typed_and_warnings_bounded(rlark, k8s_testbed, k8s_namespace, tmp_path):  # noqa: F811
    r, workers = running(rlark, k8s_testbed, k8s_namespace, tmp_path, protected=False)
    pool = workers.logs["ppo-pool-0"]
    for i in range(60):
        pool.event(None, "warning", reason="Flood", message=f"warning {i}")
    pool.event(None, "exit", code="zero")  # untyped
    pool.event(None, "failed", reason="NodeLost", status=70000)  # a status no process has

    def all_read():
        evs = events_of(r, "ppo")
        return all(any(e["reason"] == why for e in evs)
                   for why in ("WarningsSuppressed", "ReportsDropped")) and evs
    evs = wait_for("the warnings to be bounded and the malformed lines dropped", all_read, 60)
    pool_warnings = [e for e in evs if e.get("worker") == "ppo-pool-0" and e["type"] == "Warning"]
    assert len([e for e in pool_warnings if "warning " in e["message"]]) == 20
    dropped = [e for e in evs if e["reason"] == "ReportsDropped"]
    assert len(dropped) == 1 and "not well formed" in dropped[0]["message"]
    job = r.job("ppo")
    assert job["phase"] == "Running"  # neither malformed line ended anything


def test_a_workers_facts_are_bounded_where_the_channel_is_not_the_keepers(
        rlark, k8s_testbed, k8s_namespace, tmp_path):  # noqa: F811
    """The attack pass's flood: 1 MiB facts lines with new keys, past the keeper's bound (a
    channel the workload reached). The Worker's row keeps at most 8 MiB, and says so once."""
    from rlark.controller.loop import Controller

    r, workers = running(rlark, k8s_testbed, k8s_namespace, tmp_path, protected=False)
    pool = workers.logs["ppo-pool-0"]
    for i in range(16):  # each line under 1 MiB (longer ones are no lifecycle lines at all)
        pool.event(None, "facts", **{f"flood{i}": "x" * 600_000})

    def dropped():
        return [e for e in events_of(r, "ppo") if e["reason"] == "ReportsDropped"
                and "facts" in e["message"]]
    assert len(wait_for("the facts to be bounded", dropped, 60)) == 1
    with r.store.session() as s:
        from sqlalchemy import select

        from rlark.store import WorkerRow
        facts = s.scalar(select(WorkerRow.facts).where(WorkerRow.name == "ppo-pool-0"))
    import json
    assert len(json.dumps(facts)) <= Controller.MAX_FACTS_BYTES
    assert sum(1 for k in facts if k.startswith("flood")) < 16
