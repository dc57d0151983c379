"""Gang admission, queues and preemption with Kueue (issue 24, items 2, 3 and 5), on the test bed
with Kueue (real API server, scheduler, Kueue's manager and webhook, kwok Nodes with fake GPUs).

RLark's server parts are built by the server's own wiring (:class:`tests.k8s_testbed.RlarkOnK8s`)
with ``--k8s-queue team`` (``RLARK_K8S_QUEUE``); the Workers are kwok Pods whose logs the tests
write as their keepers would (:class:`tests.k8s_testbed.KwokWorkers`). Each test has a namespace
of its own under Kueue's Pod integration with a LocalQueue ``team`` of a ClusterQueue of
:data:`GPU_QUOTA` GPUs (fewer than the two GPU Nodes' eight, so the queue, not the scheduler,
is what holds a Run back), which preempts lower priorities within itself.

The pure parts (labels, Workload and Pod readings) are in tests/test_k8s_kueue.py.
"""

from __future__ import annotations

import logging

import pytest

from tests.k8s_testbed import (GPU_NODES, KwokWorkers, RlarkOnK8s, kueue_condition, make_local_queue,
                               setup_timeout, wait_for)

from rlark.runtimes.kubernetes import kueue  # noqa: E402
from rlark.services.queue import pending  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout(kueue=True) + 600)

GROUP, VERSION = kueue.GROUP, kueue.VERSION
GPU = "nvidia.com/gpu"
#: the ClusterQueue's quota: a Job of 3 GPUs takes 60 % of it, two do not fit at once
GPU_QUOTA, CPU_QUOTA, MEMORY_QUOTA = 5, 32, "128Gi"
LOCAL_QUEUE = "team"
HIGH = 1000
IMAGE = "docker.io/rlinf/rlinf:0.3.0"


def job_yaml(name: str, *, head_gpus: int = 1, pool: int = 1, pool_gpus: int = 2,
             priority: int = 0, failure_policy: str = "", run_script: str = "python train.py") -> str:
    """A head (``head_gpus`` GPUs) and ``pool`` pool Workers of ``pool_gpus`` GPUs each, one CPU
    and 1Gi each (what the ClusterQueue covers)."""
    res = "{cpu: 1, memory: 1Gi, gpu: %d}"
    return (f"apiVersion: rlark.io/v1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n"
            f"  headRole: head\n  priority: {priority}\n  terminationGracePeriodSeconds: 2\n"
            f"  runScript: {run_script}\n"
            f"  failurePolicy: {{joinTimeoutSeconds: 300{', ' + failure_policy if failure_policy else ''}}}\n"
            f"  roles:\n"
            f"    - {{name: head, workers: 1, image: {IMAGE!r}, resources: {res % head_gpus}}}\n"
            f"    - {{name: pool, workers: {pool}, image: {IMAGE!r}, resources: {res % pool_gpus}}}\n")



@pytest.fixture
def kueue_ns(k8s_kueue_testbed):
    """A namespace under Kueue's Pod integration, set up as project-namespace.example.yaml
    says (RLark's Roles, rlark-kueue included), with LocalQueue ``team`` of its own ClusterQueue
    (GPU_QUOTA GPUs, preemption of lower priorities within it) and a WorkloadPriorityClass
    ``<ns>-high`` of value HIGH; all Active."""
    tb = k8s_kueue_testbed
    ns = tb.kueue_namespace()
    api = tb.custom()
    flavor, cq, high = f"{ns}-flavor", f"{ns}-cq", f"{ns}-high"
    try:
        api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor}})
        api.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": high}, "value": HIGH})
        api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                         "name": flavor, "resources": [
                             {"name": "cpu", "nominalQuota": CPU_QUOTA},
                             {"name": "memory", "nominalQuota": MEMORY_QUOTA},
                             {"name": GPU, "nominalQuota": GPU_QUOTA}]}]}]}})
        make_local_queue(api, ns, LOCAL_QUEUE, cq)
        yield ns
    finally:
        tb.delete_namespace(ns)
        for plural, name in (("clusterqueues", cq), ("resourceflavors", flavor),
                             ("workloadpriorityclasses", high)):
            try:
                api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except Exception as e:  # noqa: BLE001 - the object may never have been made
                if getattr(e, "status", None) != 404:
                    raise


@pytest.fixture
def server(k8s_kueue_testbed, kueue_ns, rlark_home, caplog):
    """RLark's server on the namespace, every project's Runs in LocalQueue ``team``, priority
    HIGH naming the namespace's WorkloadPriorityClass."""
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    home = rlark_home / "server"
    home.mkdir()
    srv = RlarkOnK8s(k8s_kueue_testbed, kueue_ns, home, env={
        "RLARK_K8S_QUEUE": LOCAL_QUEUE, "RLARK_K8S_PRIORITY_CLASSES": f"{kueue_ns}-high={HIGH}"})
    try:
        yield srv
    finally:
        srv.close()


def workers_of(tb, ns: str, text: str, tmp_path, name: str) -> KwokWorkers:
    return KwokWorkers(tb, ns, load_job(text)[0], tmp_path / name)


def pods_of(tb, ns: str, job: str) -> list:
    return [p for p in tb.admin().list_namespaced_pod(ns, label_selector=f"rlark.io/job={job}").items
            if p.metadata.deletion_timestamp is None]


def workloads(tb, ns: str) -> list[dict]:
    return tb.custom().list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]


def run_to_running(srv: RlarkOnK8s, workers: KwokWorkers, name: str) -> None:
    """Drive a Run whose Pods run until it is Running (as its keepers would say it)."""
    workers.wait_running()
    workers.join()
    workers.start_run_script()
    srv.wait_phase(name, "Running")


def succeed(srv: RlarkOnK8s, workers: KwokWorkers, name: str) -> dict:
    """Drive a Run whose Pods run through to Succeeded (as its keepers would say it)."""
    run_to_running(srv, workers, name)
    workers.finish_run_script(0)
    return srv.wait_ended(name)


def test_a_run_waits_in_its_queue_with_no_pod_bound_until_the_one_before_it_ends(
        k8s_kueue_testbed, kueue_ns, server, tmp_path):
    """Two Jobs each needing 60 % of the ClusterQueue's GPUs: the second waits, Queued, with
    none of its Pods bound to a Node, until the first ends; then it is admitted and Succeeds.
    Its join timeout counts from its admission."""
    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    first_yaml, second_yaml = job_yaml("first"), job_yaml("second")
    first = workers_of(tb, ns, first_yaml, tmp_path, "first")
    second = workers_of(tb, ns, second_yaml, tmp_path, "second")
    srv.submit(first_yaml)
    first.wait_running()
    srv.wait_phase("first", "Starting", "Running")  # admitted, the next pass after Kueue did
    srv.submit(second_yaml)

    def queued_for_quota():
        job = srv.job("second")
        return (job["phase"] == "Pending" and job["reason"] == "Queued"
                and "insufficient unused quota" in job["message"] and job)

    job = wait_for("Job second to be Queued for quota", queued_for_quota)
    assert job["message"].startswith(f"queued in Kueue LocalQueue {LOCAL_QUEUE} (ClusterQueue {ns}-cq): "
                                     "couldn't assign flavors"), job["message"]
    assert f"for {GPU} in flavor {ns}-flavor" in job["message"], job["message"]
    pods = pods_of(tb, ns, "second")
    assert len(pods) == 2
    for p in pods:  # all made, none bound: Kueue holds the whole group
        assert p.spec.node_name is None
        assert kueue.ADMISSION_GATE in [g.name for g in p.spec.scheduling_gates or []]
        assert p.metadata.labels[kueue.GROUP_LABEL] == f"second-{srv.run_row('second').uid}"
        assert p.metadata.annotations[kueue.TOTAL_ANNOTATION] == "2"
    run = srv.run_row("second")
    assert run.queue == LOCAL_QUEUE and run.started_at is None  # no join deadline yet
    # `rlark queue`: the waiting Run, its queue and what it asks for
    [item] = pending(srv.store, srv.jobs.profile)["items"]
    assert (item["queue"], item["job"], item["run"], item["position"]) == (LOCAL_QUEUE, "second", 1, None)
    assert item["requests"]["gpu"] == 3 and item["workers"] == 2 and item["reason"] == "Queued"

    assert succeed(srv, first, "first")["phase"] == "Succeeded"
    # the first Run's Pods end: its Workload finishes, its quota goes to the second
    done = succeed(srv, second, "second")
    assert (done["phase"], done["reason"]) == ("Succeeded", "Completed"), done
    run = srv.run_row("second")
    assert run.started_at > run.created_at
    events = [(e["reason"], e["message"]) for e in srv.events("second")]
    reasons = [r for r, _ in events]
    assert reasons.count("Queued") == 1, events
    admitted = next(m for r, m in events if r == "Launching")
    assert admitted.startswith(f"admitted by Kueue LocalQueue {LOCAL_QUEUE} (ClusterQueue {ns}-cq) after"), admitted
    assert {p.spec.node_name for p in tb.admin().list_namespaced_pod(ns).items} <= set(GPU_NODES) | {None}


def test_queued_runs_show_their_places_in_line_as_kueues_visibility_api_tells_them(
        k8s_kueue_testbed, kueue_ns, server, tmp_path):
    """Two Runs queued behind a running one (each Job needs 60 % of the ClusterQueue's GPUs): their
    Queued messages say 1st and 2nd in line, the places Kueue's visibility API gives (the test
    bed serves it through the API server), and ``GET /api/v1/queue`` and ``rlark queue`` give
    positions 1 and 2."""
    import json

    from tests.test_cli import cli_env, rlark

    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    first_yaml = job_yaml("first")
    first = workers_of(tb, ns, first_yaml, tmp_path, "first")
    srv.submit(first_yaml)
    first.wait_running()
    srv.wait_phase("first", "Starting", "Running")
    srv.submit(job_yaml("second"))
    wait_for("Job second to be Queued for quota",
             lambda: "insufficient unused quota" in srv.job("second")["message"])
    srv.submit(job_yaml("third"))

    def placed():
        jobs = {n: srv.job(n) for n in ("second", "third")}
        return all("in line" in j["message"] for j in jobs.values()) and jobs

    jobs = wait_for("both queued Runs to show their places in line", placed)
    # Kueue's order at equal priority: the Workload's creation time, in whole seconds, then its
    # uid (pkg/cache/queue/cluster_queue.go, baseCompareFunc): two made within one second may
    # go either way
    made = {w["metadata"]["name"]: w["metadata"] for w in workloads(tb, ns)}
    order = sorted(("second", "third"), key=lambda j: (
        (m := made[kueue.group_name(j, srv.run_row(j).uid)])["creationTimestamp"], m["uid"]))
    said = f"queued in Kueue LocalQueue {LOCAL_QUEUE} (ClusterQueue {ns}-cq), "
    assert jobs[order[0]]["message"].startswith(said + "1st in line: couldn't assign flavors"), jobs
    assert jobs[order[1]]["message"].startswith(said + "2nd in line: couldn't assign flavors"), jobs
    assert [(j["phase"], j["reason"]) for j in jobs.values()] == [("Pending", "Queued")] * 2
    # the API the console's Queue page and `rlark queue` read, as the administrator
    r = srv._client.get("/api/v1/queue", headers={"Authorization": f"Bearer {srv.admin_token}"})
    assert r.status_code == 200, r.text
    assert sorted((i["queue"], i["job"], i["position"]) for i in r.json()["items"]) == sorted([
        (LOCAL_QUEUE, order[0], 1), (LOCAL_QUEUE, order[1], 2)])
    proc = rlark("queue", "-o", "json", env=cli_env(RLARK_SERVER=srv.serve()))
    assert proc.returncode == 0, proc.stderr
    assert sorted((i["job"], i["position"]) for i in json.loads(proc.stdout)["items"]) == sorted([
        (order[0], 1), (order[1], 2)])
    # the first ends: the one in front is admitted, the other is next in line
    assert succeed(srv, first, "first")["phase"] == "Succeeded"
    wait_for(f"Job {order[1]} to be 1st in line", lambda: (
        m := srv.job(order[1])["message"]).startswith(said + "1st in line: ") and m)
    wait_for(f"Job {order[0]} to be admitted", lambda: srv.job(order[0])["phase"] != "Pending")
    assert srv.run_row(order[0]).queue_position is None


def test_a_job_larger_than_its_queues_quota_is_named_inadmissible_and_a_stopped_queued_run_leaves_nothing(
        k8s_kueue_testbed, kueue_ns, server):
    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    # 6 GPUs: the two GPU Nodes have 8, the ClusterQueue admits 5 at most
    srv.submit(job_yaml("big", head_gpus=2, pool=2, pool_gpus=2))

    def inadmissible():
        job = srv.job("big")
        return job["reason"] == "Queued" and "inadmissible" in job["message"] and job

    job = wait_for("Job big to be named inadmissible", inadmissible)
    assert job["phase"] == "Pending"
    assert "> maximum capacity (5)" in job["message"], job["message"]
    assert len(pods_of(tb, ns, "big")) == 3 and len(workloads(tb, ns)) == 1
    srv.jobs.stop("big")
    job = srv.wait_ended("big")
    assert (job["phase"], job["reason"]) == ("Stopped", "Stopped"), job
    wait_for("no Pod and no Workload left", lambda: not tb.admin().list_namespaced_pod(ns).items
             and not workloads(tb, ns))


def test_a_queue_timeout_fails_a_run_still_queued(k8s_kueue_testbed, kueue_ns, server):
    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    srv.submit(job_yaml("late", head_gpus=2, pool=2, pool_gpus=2,
                        failure_policy="queueTimeoutSeconds: 3"))
    job = srv.wait_phase("late", "Failed", timeout=120)
    assert job["reason"] == "QueueTimeout", job
    assert job["message"].startswith("not admitted within 3 s (spec.failurePolicy.queueTimeoutSeconds); "
                                     f"last: queued in Kueue LocalQueue {LOCAL_QUEUE} (ClusterQueue "
                                     f"{ns}-cq)"), job["message"]
    srv.wait_ended("late")
    wait_for("no Pod and no Workload left", lambda: not tb.admin().list_namespaced_pod(ns).items
             and not workloads(tb, ns))


def test_a_high_priority_job_preempts_a_low_priority_run_which_is_requeued_and_succeeds_later(
        k8s_kueue_testbed, kueue_ns, server, tmp_path):
    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    # the requeued Run resumes as a retry does (failurePolicy.resume; the script passes RLark's
    # overrides on, else submit refuses the resume: ResumeNotPassed)
    low_yaml = job_yaml("low", failure_policy="onPreemption: Requeue, resume: true",
                        run_script="python train.py $RLARK_RLINF_OVERRIDES")
    high_yaml = job_yaml("high", priority=HIGH)
    low = workers_of(tb, ns, low_yaml, tmp_path, "low")
    high = workers_of(tb, ns, high_yaml, tmp_path, "high")
    srv.submit(low_yaml)
    run_to_running(srv, low, "low")
    first = srv.run_row("low")
    srv.submit(high_yaml)

    def preempted():
        run = srv.run_row("low", 1)
        return run.phase == "Failed" and run

    run = wait_for("run 1 of Job low to fail", preempted)
    assert run.reason == "Preempted", (run.reason, run.message)
    high_group = f"high-{srv.run_row('high').uid}"
    assert run.message.startswith(f"Kueue preempted the Run's Pod group by Workload {ns}/{high_group} "
                                  "and deleted its Pods"), run.message
    assert "Preempted to accommodate a workload" in run.message
    # every Pod of the preempted Run went, and no Pod of it was made again
    wait_for("the Pods of run 1 of Job low to be gone", lambda: not [
        p for p in tb.admin().list_namespaced_pod(ns, label_selector=f"rlark.io/run={first.uid}").items])
    job = srv.job("low")
    assert job["currentRun"]["number"] == 2 and job["currentRun"]["cause"] == "Retry", job
    for log in low.logs.values():  # the new Run's Pods start from empty logs (kwok keeps files)
        log.path.write_text("")
    # the high-priority Run runs; the requeued one waits behind it in the queue
    high.wait_running()
    wait_for("run 2 of Job low to be Queued", lambda: srv.job("low")["reason"] == "Queued")
    assert all(p.spec.node_name is None for p in pods_of(tb, ns, "low"))
    assert succeed(srv, high, "high")["phase"] == "Succeeded"
    done = succeed(srv, low, "low")
    assert (done["phase"], done["currentRun"]["number"]) == ("Succeeded", 2), done
    events = srv.events("low")
    reasons = [e["reason"] for e in events]
    assert reasons.count("Preempted") == 1 and reasons.count("Requeued") == 1, reasons
    # it looked for run 1's last checkpoint, as a retry does; run 1 (kwok Pods, no outputs)
    # left none, so it started afresh, said in a Warning (a checkpoint found is resumed from:
    # tests/test_outputs_e2e.py, the same decision for a retry)
    assert done["currentRun"]["resume"] == {"fromRun": 1, "automatic": True, "checkpoint": None}, done
    [resuming] = [e for e in events if e["reason"] == "Resuming"]
    assert resuming["message"].startswith("run 2 starts afresh: run 1 left no checkpoint"), resuming


# --- two projects' queues in one cohort, under Kueue's Fair Sharing -----------------------------

#: each ClusterQueue's nominal GPUs; the cohort holds twice as many
COHORT_GPUS = 3


def _cluster_queue(name: str, ns: str, cohort: str, flavor: str) -> dict:
    """A ClusterQueue of ``ns``'s LocalQueues in ``cohort``: COHORT_GPUS nominal GPUs (CPU and
    memory plenty, never borrowed), no borrowingLimit (it may borrow all the cohort leaves unused),
    and ``reclaimWithinCohort: Any``: its workloads may preempt a borrower's
    (apis/kueue/v1beta2/clusterqueue_types.go)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohortName": cohort,
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                         "name": flavor, "resources": [
                             {"name": "cpu", "nominalQuota": CPU_QUOTA},
                             {"name": "memory", "nominalQuota": MEMORY_QUOTA},
                             {"name": GPU, "nominalQuota": COHORT_GPUS}]}]}]}}


@pytest.fixture
def cohort(k8s_kueue_testbed, rlark_home, caplog):
    """Two projects, each with a LocalQueue of its own ClusterQueue (:func:`_cluster_queue`), the
    two ClusterQueues in one cohort: project ``default`` (namespace A) in LocalQueue ``a``, project
    ``team-b`` (namespace B) in LocalQueue ``b``, both set as an administrator sets them
    (``rlark project set-queue``, ``rlark project create --queue``); no server queue. Yields
    ``(server, ns A, ns B)``."""
    from rlark.services.auth import OPEN_PRINCIPAL

    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    tb = k8s_kueue_testbed
    api = tb.custom()
    ns_a, ns_b = tb.kueue_namespace(), tb.kueue_namespace()
    flavor, cohort_name = f"{ns_a}-flavor", f"{ns_a}-cohort"
    queues = {"a": (ns_a, f"{ns_a}-cq"), "b": (ns_b, f"{ns_b}-cq")}
    home = rlark_home / "server"
    home.mkdir()
    srv = None
    try:
        api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor}})
        for local, (ns, cq) in queues.items():
            api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues",
                                             _cluster_queue(cq, ns, cohort_name, flavor))
            make_local_queue(api, ns, local, cq)
        srv = RlarkOnK8s(tb, ns_a, home)
        accounts = srv.app.state.accounts
        accounts.set_queue(OPEN_PRINCIPAL, None, "default", "a")
        accounts.create_project(OPEN_PRINCIPAL, None, "team-b", namespace=ns_b, queue="b")
        yield srv, ns_a, ns_b
    finally:
        if srv is not None:
            srv.close()
        for ns in (ns_a, ns_b):
            tb.delete_namespace(ns)
        for plural, name in [("clusterqueues", cq) for _, cq in queues.values()] + [
                ("resourceflavors", flavor)]:
            try:
                api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except Exception as e:  # noqa: BLE001 - the object may never have been made
                if getattr(e, "status", None) != 404:
                    raise


def test_two_projects_queues_in_one_cohort_share_borrowed_quota_as_fair_sharing_says(
        k8s_kueue_testbed, cohort, tmp_path):
    """Kueue v0.17 with Fair Sharing (the test bed's configuration): project A borrows 2 of B's
    GPUs (5 of the cohort's 6); B then asks for 4, one more than its nominal 3, so it too would
    borrow. Without Fair Sharing Kueue's classical preemption never lets a workload that must
    borrow reclaim from another ClusterQueue (reclaimWithinCohort without borrowWithinCohort:
    pkg/scheduler/preemption/classical, ReclaimWithoutBorrowing), and B would wait. With it,
    B's dominant resource share once admitted (1 borrowed GPU of the 6 lendable) is below A's
    now (2 of 6): rule S2-b, LessThanInitialShare (pkg/scheduler/preemption/preemption.go,
    runSecondFsStrategy), preempts A's Run "due to Fair Sharing within the cohort". RLark names
    that, requeues A's Run by its policy, and A's new Run, which would now borrow more than B,
    does not preempt B back: it waits until B's Run ends, then Succeeds."""
    tb = k8s_kueue_testbed
    srv, ns_a, ns_b = cohort
    api = tb.custom()
    wide_yaml = job_yaml("wide", pool=2, failure_policy="onPreemption: Requeue")  # 1 + 2 x 2 = 5 GPUs
    fair_yaml = job_yaml("fair", head_gpus=2)  # 2 + 1 x 2 = 4 GPUs
    wide = workers_of(tb, ns_a, wide_yaml, tmp_path, "wide")
    fair = workers_of(tb, ns_b, fair_yaml, tmp_path, "fair")
    srv.submit(wide_yaml)
    run_to_running(srv, wide, "wide")
    first = srv.run_row("wide")
    assert first.queue == "a"
    # borrowing 2 of the 6 lendable GPUs: Kueue reports A's share (only under Fair Sharing:
    # ClusterQueueStatus.fairSharing), ceil(1000 x 2 / 6) = 334 (pkg/cache/scheduler/fair_sharing.go)
    wait_for("ClusterQueue A to report its fair share", lambda: ((api.get_cluster_custom_object(
        GROUP, VERSION, "clusterqueues", f"{ns_a}-cq").get("status") or {}).get("fairSharing") or {}
        ).get("weightedShare") == 334)

    srv.ctl.wake()
    srv.jobs.create(fair_yaml, project="team-b")

    def preempted():
        run = srv.run_row("wide", 1)
        return run.phase == "Failed" and run

    run = wait_for("run 1 of Job wide to be preempted", preempted)
    fair_group = f"fair-{srv.run_row('fair').uid}"
    assert run.reason == "Preempted", (run.reason, run.message)
    assert run.message.startswith(f"Kueue preempted the Run's Pod group by Workload {ns_b}/{fair_group} "
                                  "and deleted its Pods"), run.message
    assert "due to Fair Sharing within the cohort" in run.message, run.message
    wait_for("the Pods of run 1 of Job wide to be gone", lambda: not tb.admin().list_namespaced_pod(
        ns_a, label_selector=f"rlark.io/run={first.uid}").items)
    job = srv.job("wide")
    assert job["currentRun"]["number"] == 2 and job["currentRun"]["cause"] == "Retry", job
    for log in wide.logs.values():  # the new Run's Pods start from empty logs (kwok keeps files)
        log.path.write_text("")

    # B's Run is admitted to its ClusterQueue, borrowing 1 GPU, and runs to its end
    fair.wait_running()
    fair.join()
    fair.start_run_script()
    wait_for("Job fair to be Running", lambda: srv.jobs.get("fair", "team-b")["phase"] == "Running")
    # A's new Run would borrow 2 again, more than B's 1: no preemption back; it waits
    wait_for("run 2 of Job wide to be Queued for quota", lambda: (
        (j := srv.job("wide"))["reason"] == "Queued" and "insufficient unused quota" in j["message"]))
    assert srv.job("wide")["message"].startswith(f"queued in Kueue LocalQueue a (ClusterQueue {ns_a}-cq)")
    assert all(p.spec.node_name is None for p in pods_of(tb, ns_a, "wide"))
    fair.finish_run_script(0)
    done = wait_for("Job fair to Succeed", lambda: (
        (j := srv.jobs.get("fair", "team-b"))["phase"] == "Succeeded" and j))
    assert done["currentRun"]["number"] == 1
    # B's quota back: A's Run is admitted, borrowing again, and Succeeds
    done = succeed(srv, wide, "wide")
    assert (done["phase"], done["currentRun"]["number"]) == ("Succeeded", 2), done
    reasons = [e["reason"] for e in srv.events("wide")]
    assert reasons.count("Preempted") == 1 and reasons.count("Requeued") == 1, reasons
    fair_reasons = [e["reason"] for e in srv.jobs.events("fair", project="team-b")]
    assert "Preempted" not in fair_reasons, fair_reasons


# --- RBAC: the Role rlark-kueue of project-namespace.example.yaml is sufficient and minimal --------

#: (resource, verb) of Role rlark-kueue -> the words of the named failure without it
KUEUE_NEEDS = {
    ("localqueues", "get"): ["LaunchFailed", "read LocalQueue team", 'cannot get resource "localqueues"'],
    ("workloads", "list"): ["LaunchFailed", "may not watch Kueue's Workloads",
                            'cannot list resource "workloads"'],
    ("workloads", "watch"): ["LaunchFailed", "may not watch Kueue's Workloads",
                             'cannot watch resource "workloads"'],
}
#: (resource, verb) of Role rlark-kueue that RLark does without: what a Run shows without it
KUEUE_OPTIONAL = {
    ("localqueues/pendingworkloads", "get"): "no place in line",
}


def _kueue_role() -> dict:
    import yaml

    from tests.k8s_testbed import PROJECT_TEMPLATE

    return next(d for d in yaml.safe_load_all(PROJECT_TEMPLATE.read_text())
                if d and d["kind"] == "Role" and d["metadata"]["name"] == "rlark-kueue")


def test_every_verb_of_the_kueue_role_has_a_named_failure_below():
    rows = {(res, verb) for rule in _kueue_role()["rules"] for res in rule["resources"]
            for verb in rule["verbs"]}
    assert rows == set(KUEUE_NEEDS) | set(KUEUE_OPTIONAL)


def test_the_queued_run_needs_no_more_than_the_kueue_role(k8s_kueue_testbed, kueue_ns, server):
    """With the Role as deployed, a queued Run gets as far as its queue's verdict (sufficient)."""
    server.submit(job_yaml("fits"))
    wait_for("Job fits to be admitted", lambda: server.job("fits")["phase"] == "Starting")


def test_without_the_visibility_verb_a_queued_run_shows_no_place_and_the_log_says_why_once(
        k8s_kueue_testbed, kueue_ns, server, tmp_path, caplog):
    """Role rlark-kueue without ``get`` on the visibility API's pendingworkloads: a queued Run
    still waits, Queued, saying what it waits for but no place in line, and the server's log says
    once why there is none."""
    import copy

    caplog.set_level(logging.WARNING, logger="rlark.kubernetes")
    tb, ns, srv = k8s_kueue_testbed, kueue_ns, server
    role = copy.deepcopy(_kueue_role())
    role["metadata"]["namespace"] = ns
    role["rules"] = [r for r in role["rules"] if r["apiGroups"] != [kueue.VISIBILITY_GROUP]]
    tb.rbac().replace_namespaced_role("rlark-kueue", ns, role)
    tb.wait_rbac("get", "localqueues", ns, allowed=False, group=kueue.VISIBILITY_GROUP,
                 subresource="pendingworkloads")
    first_yaml = job_yaml("first")
    first = workers_of(tb, ns, first_yaml, tmp_path, "first")
    srv.submit(first_yaml)
    first.wait_running()
    srv.wait_phase("first", "Starting", "Running")
    srv.submit(job_yaml("second"))
    job = wait_for("Job second to be Queued for quota",
                   lambda: "insufficient unused quota" in (j := srv.job("second"))["message"] and j)
    noted = wait_for("the server's log to say why there is no place in line", lambda: [
        r.getMessage() for r in caplog.records if "visibility API gives no places" in r.getMessage()])
    assert (job["phase"], job["reason"]) == ("Pending", "Queued"), job
    assert "in line" not in job["message"] and "insufficient unused quota" in job["message"], job
    assert len(noted) == 1 and "RBAC forbids it" in noted[0] and "403" in noted[0], noted
    assert srv.run_row("second").queue_position is None


@pytest.mark.parametrize("resource,verb", sorted(KUEUE_NEEDS), ids=lambda v: str(v))
def test_each_kueue_verb_taken_away_is_a_named_failure(resource, verb, k8s_kueue_testbed, kueue_ns,
                                                        server):
    import copy

    tb, ns = k8s_kueue_testbed, kueue_ns
    role = copy.deepcopy(_kueue_role())
    role["metadata"]["namespace"] = ns
    rules = []
    for rule in role["rules"]:
        if resource in rule["resources"]:
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
        if rule["verbs"]:
            rules.append(rule)
    role["rules"] = rules
    tb.rbac().replace_namespaced_role("rlark-kueue", ns, role)
    tb.wait_rbac(verb, resource, ns, allowed=False, group=GROUP)
    server.submit(job_yaml("denied"))
    job = server.wait_phase("denied", "Failed")
    said = f"{job['reason']}: {job['message']}"
    assert "Traceback" not in said
    for w in KUEUE_NEEDS[(resource, verb)]:
        assert w in said, said
    assert not pods_of(tb, ns, "denied")
