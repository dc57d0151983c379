"""What RLark puts on a Run's Pods for Kueue, and what it reads back from Kueue's objects (issue 24,
items 2 and 3): pure builders and readers (rlark.runtimes.kubernetes.kueue, render, status), no
I/O. The same on a real API server with Kueue: tests/test_k8s_queues.py."""

from __future__ import annotations

import pytest

from rlark.runtimes.kubernetes import kueue, render
from rlark.runtimes.kubernetes.status import PodState, interpret
from rlark.status import Reason
from tests.k8s_jobs import job

NOW = 1_800_000_000.0


def _iso(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_every_pod_of_a_queued_run_joins_one_group_of_the_runs_size_in_its_queue():
    j = job(workers=3)
    opts = render.RenderOptions(namespace="ns", queue="team", priority_class="high")
    pods = [o for o in render.render_run(j, "abc123", opts) if o["kind"] == "Pod"]
    assert len(pods) == 3
    for pod in pods:
        meta = pod["metadata"]
        # names as Kueue v0.17 reads them (pkg/controller/jobs/pod/constants, pkg/controller/constants)
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team"
        assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == "ppo-abc123"
        assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "high"
        assert meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
        # RLark never replaces a Pod: Kueue frees the group's quota once all have ended
        assert meta["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"
        assert meta["labels"]["rlark.io/run"] == "abc123"  # RLark's own labels stay
    # no queue: nothing of Kueue's
    plain = [o for o in render.render_run(j, "abc123", render.RenderOptions(namespace="ns"))
             if o["kind"] == "Pod"]
    assert not any(k.startswith("kueue.x-k8s.io/") for p in plain
                   for k in {**p["metadata"]["labels"], **p["metadata"].get("annotations", {})})


def test_group_names_are_label_values():
    assert kueue.group_name("ppo", "1a2b3c") == "ppo-1a2b3c"
    long = "j" * 60
    assert kueue.group_name(long, "1a2b3c") == "rlark-1a2b3c"


@pytest.mark.parametrize("project, server, expected", [
    (None, None, None), (None, "none", None), (None, "team", "team"), ("mine", "team", "mine"),
    ("none", "team", None), ("", "team", "team")])
def test_the_projects_queue_else_the_servers_none_means_none(project, server, expected):
    assert kueue.effective_queue(project, server) == expected


def test_queue_names_are_checked():
    assert kueue.check_queue_name("team-a") == "team-a"
    assert kueue.check_queue_name("none") == "none"
    for bad in ("Team", "team_a", "-a", "a" * 64, ""):
        with pytest.raises(ValueError, match="not a Kueue LocalQueue name"):
            kueue.check_queue_name(bad)


def test_a_priority_names_the_class_of_that_value():
    classes = {"high": 1000, "low": -10, "standard": 0}
    assert kueue.priority_class(1000, classes) == "high"
    assert kueue.priority_class(0, classes) == "standard"
    assert kueue.priority_class(0, {}) is None  # Kueue's default priority
    with pytest.raises(ValueError) as e:
        kueue.priority_class(5, classes)
    assert "spec.priority = 5" in str(e.value) and "-10 (low), 0 (standard), 1000 (high)" in str(e.value)
    with pytest.raises(ValueError, match="none is set"):
        kueue.priority_class(5, {})


def _workload(*conditions: dict, cq: str | None = None, active: bool | None = None) -> dict:
    wl: dict = {"metadata": {"name": "ppo-abc123", "uid": "u1"}, "spec": {"queueName": "team"},
                "status": {"conditions": list(conditions)}}
    if cq:
        wl["status"]["admission"] = {"clusterQueue": cq}
    if active is not None:
        wl["spec"]["active"] = active
    return wl


def _cond(kind: str, status: str, reason: str = "", message: str = "", at: float = NOW) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": _iso(at)}


def test_what_kueue_says_of_a_group_while_it_waits_and_once_admitted():
    none = kueue.admission_of(None, "team")
    assert not none.admitted
    assert none.message == ("queued in Kueue LocalQueue team: waiting for Kueue to make the "
                            "Workload of the Run's Pods")
    short = kueue.admission_of(_workload(_cond(
        "QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set 4d5e: "
        "insufficient unused quota for nvidia.com/gpu in flavor f, 2 more needed")), "team")
    assert not short.admitted and not short.inadmissible
    assert short.message.endswith("insufficient unused quota for nvidia.com/gpu in flavor f, 2 "
                                  "more needed")
    never = kueue.admission_of(_workload(_cond(
        "QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set 4d5e: insufficient "
        "quota for nvidia.com/gpu in flavor f, previously considered podsets requests (0) + "
        "current podset request (6) > maximum capacity (4)")), "team")
    assert never.inadmissible and "inadmissible: couldn't assign" in never.message
    missing = kueue.admission_of(_workload(_cond(
        "QuotaReserved", "False", "Inadmissible", "LocalQueue team doesn't exist")), "team")
    assert missing.inadmissible and missing.message.endswith("inadmissible: LocalQueue team doesn't exist")
    off = kueue.admission_of(_workload(active=False), "team")
    assert off.inadmissible and "deactivated" in off.message
    admitted = kueue.admission_of(_workload(_cond("QuotaReserved", "True"),
                                            _cond("Admitted", "True", at=NOW - 5), cq="gpus"), "team")
    assert admitted.admitted and admitted.admitted_at == NOW - 5
    assert admitted.message == "admitted by Kueue LocalQueue team (ClusterQueue gpus)"


#: a LocalQueue's pending Workloads as Kueue v0.17's visibility API answers them (GET
#: .../namespaces/ns/localqueues/team/pendingworkloads: a PendingWorkloadsSummary), the ClusterQueue
#: holding another LocalQueue's Workload first
PENDING = {
    "kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
    "metadata": {"creationTimestamp": None},
    "items": [
        {"metadata": {"name": "ppo-abc123", "namespace": "ns", "creationTimestamp": _iso(NOW - 60)},
         "priority": 0, "localQueueName": "team", "positionInClusterQueue": 1,
         "positionInLocalQueue": 0},
        {"metadata": {"name": "dpo-def456", "namespace": "ns", "creationTimestamp": _iso(NOW - 30)},
         "priority": 0, "localQueueName": "team", "positionInClusterQueue": 2,
         "positionInLocalQueue": 1},
    ],
}


def test_places_in_line_are_read_from_the_visibility_apis_answer_counting_from_one():
    assert kueue.pending_positions(PENDING) == {"ppo-abc123": 2, "dpo-def456": 3}
    assert kueue.pending_workloads_path("ns", "team") == (
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/team/pendingworkloads")


@pytest.mark.parametrize("answer", [
    None, {}, {"items": None}, {"items": "x"}, {"items": [None, "x", {"metadata": "x"}]},
    {"items": [{"metadata": {"name": "a"}}]},  # no position
    {"items": [{"metadata": {"name": "a"}, "positionInClusterQueue": -1}]},
    {"items": [{"metadata": {"name": "a"}, "positionInClusterQueue": "0"}]},
    {"items": [{"metadata": {"name": "a"}, "positionInClusterQueue": True}]},
    {"items": [{"metadata": {}, "positionInClusterQueue": 0}]},
])
def test_an_answer_of_another_shape_gives_no_place_rather_than_an_error(answer):
    assert kueue.pending_positions(answer) == {}


def test_a_waiting_groups_message_says_its_place_in_line_only_while_it_can_be_admitted():
    waiting = _workload(_cond("QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set 4d5e: insufficient unused quota "
                              "for nvidia.com/gpu in flavor f, 2 more needed"))
    short = kueue.admission_of(waiting, "team", "gpus", position=2)
    assert short.position == 2
    assert short.message.startswith("queued in Kueue LocalQueue team (ClusterQueue gpus), 2nd in "
                                    "line: couldn't assign flavors")
    assert kueue.admission_of(None, "team", position=1).message.startswith(
        "queued in Kueue LocalQueue team: ")  # no Workload yet: nothing Kueue could place
    never = kueue.admission_of(_workload(_cond(
        "QuotaReserved", "False", "Inadmissible", "LocalQueue team doesn't exist")), "team", position=1)
    assert "in line" not in never.message
    admitted = kueue.admission_of(_workload(_cond("QuotaReserved", "True"), _cond("Admitted", "True"),
                                            cq="gpus"), "team", position=1)
    assert admitted.admitted and admitted.position is None and "in line" not in admitted.message


def _pod(gates: bool = False, **status) -> dict:
    pod = {"metadata": {"name": "ppo-pool-0", "creationTimestamp": _iso(NOW - 600),
                        "labels": {kueue.GROUP_LABEL: "ppo-abc123", kueue.QUEUE_LABEL: "team"}},
           "spec": {"containers": [{"name": "worker", "image": "x/y:1"}]},
           "status": {"phase": "Pending", "conditions": [_cond(
               "PodScheduled", "False", "SchedulingGated" if gates else "Unschedulable",
               "Scheduling is blocked due to non-empty scheduling gates", at=NOW - 600)], **status}}
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": kueue.ADMISSION_GATE}]
    return pod


def test_a_pod_held_by_the_queue_never_times_out_as_unschedulable():
    gated = _pod(gates=True)
    assert kueue.gated(gated) and not kueue.gated(_pod())
    st = interpret(gated, now=NOW, container="worker", queued=True)
    assert (st.phase, st.alive, st.failure) == (PodState.Unscheduled, True, None)
    # the same Pod, not behind a queue, 600 s unscheduled: the scheduler's verdict
    st = interpret(_pod(), now=NOW, container="worker")
    assert st.failure is not None and st.failure[0] == Reason.Unschedulable


def test_the_pending_timeout_counts_from_the_groups_admission():
    pod = _pod()  # ungated now, unscheduled since its creation 600 s ago
    st = interpret(pod, now=NOW, container="worker", pending_since=NOW - 10)
    assert st.failure is None
    st = interpret(pod, now=NOW, container="worker", pending_since=NOW - 400)
    assert st.failure is not None and "not scheduled within 400 s" in st.failure[1]


PREEMPTED = ("Preempted to accommodate a workload (UID: 9f8e, JobUID: UNKNOWN) due to "
             "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq")


def _stopped(message: str, phase: str = "Running", terminated: bool = False,
             reason: str = "WorkloadEvictedDueToPreempted") -> dict:
    pod = _pod()
    pod["metadata"]["deletionTimestamp"] = _iso(NOW - 1)
    pod["spec"]["nodeName"] = "kwok-node-0"
    state = {"terminated": {"exitCode": 137, "finishedAt": _iso(NOW)}} if terminated else {"running": {}}
    pod["status"] = {"phase": phase, "conditions": [
        _cond(kueue.TERMINATION_TARGET, "True", reason, message)],
        "containerStatuses": [{"name": "worker", "state": state}]}
    return pod


def test_a_pod_kueue_preempted_reads_as_preempted_naming_the_preemptor():
    pod = _stopped(PREEMPTED)
    assert kueue.preemptor_uid(PREEMPTED) == "9f8e"
    assert kueue.preemptor_uid("Preempted to accommodate a workload (UID: UNKNOWN, JobUID: x)") is None
    reason, message = kueue.preemption_of(pod, "Workload ns/big-77")
    assert reason == Reason.Preempted
    assert message.startswith("Kueue preempted the Run's Pod group by Workload ns/big-77 and "
                              "deleted its Pods (Pod ppo-pool-0): Preempted to accommodate")
    # interpret: still running as it goes, then gone; Preempted throughout, never "deleted by
    # someone" (WorkerLost)
    failure = kueue.preemption_of(pod)
    st = interpret(pod, now=NOW, container="worker", stopped_by_queue=failure)
    assert st.alive and st.failure == failure
    st = interpret(_stopped(PREEMPTED, "Failed", terminated=True), now=NOW, container="worker",
                   stopped_by_queue=failure)
    assert not st.alive and st.failure == failure
    st = interpret(_stopped(PREEMPTED, terminated=True), now=NOW, container="worker", gone=True,
                   stopped_by_queue=failure)
    assert (st.phase, st.failure) == (PodState.Gone, failure)
    # without what Kueue said: a Pod deleted by someone else
    st = interpret(_stopped(PREEMPTED, terminated=True), now=NOW, container="worker", gone=True)
    assert st.failure is not None and st.failure[0] == Reason.WorkerLost


def test_another_eviction_by_kueue_is_evicted_and_rlarks_own_delete_is_no_failure():
    reason, message = kueue.preemption_of(_stopped("ClusterQueue cq is stopped", reason=(
        "WorkloadEvictedDueToClusterQueueStopped")))
    assert reason == Reason.Evicted
    assert message == ("Kueue evicted the Run's Pod group (ClusterQueueStopped) and deleted its "
                       "Pods (Pod ppo-pool-0): ClusterQueue cq is stopped")
    # a plain WorkloadEvicted (a job that is not composable) says it in its message
    assert kueue.preemption_of(_stopped(PREEMPTED, reason="WorkloadEvicted"))[0] == Reason.Preempted
    # stopped for another reason than an eviction (its Workload deleted...): not Kueue's verdict
    assert kueue.preemption_of(_stopped("Workload is deleted", reason="WorkloadDeleted")) is None
    assert kueue.preemption_of(_pod()) is None
    failure = kueue.preemption_of(_stopped(PREEMPTED))
    st = interpret(_stopped(PREEMPTED), now=NOW, container="worker", stopped_by_queue=failure,
                   deleted_by_rlark=True)
    assert st.failure is None


def test_a_priority_no_class_maps_is_a_finding_only_for_a_run_in_a_queue():
    from rlark.runtimes.kubernetes.profile import KubernetesProfile

    profile = KubernetesProfile(priority_classes={"urgent": 1000, "low": -10})
    odd = job(workers=2).model_copy(deep=True)
    odd.spec.priority = 5
    [found] = profile.queue_findings(odd, "team")
    assert (found.code, found.path, found.severity.value) == ("PriorityUnmapped", "spec.priority", "error")
    assert "spec.priority = 5" in found.message and "-10 (low), 1000 (urgent)" in found.message
    assert found.message.endswith("Kueue LocalQueue team, where a priority is a WorkloadPriorityClass")
    assert profile.queue_findings(odd, None) == []  # no queue: nothing to map
    odd.spec.priority = -10
    assert profile.queue_findings(odd, "team") == []
    odd.spec.priority = 0
    assert KubernetesProfile().queue_findings(odd, "team") == []  # Kueue's default priority


def test_a_preemptor_in_another_projects_namespace_is_named_by_the_runtime_that_watches_it():
    """Under a cohort's fair sharing the preemptor is often another project's Workload: the
    runtime of the preempted Run's namespace names it from the cache of the runtime that watches
    that namespace (no API server: the watches' entry points fed by hand)."""
    import copy

    from kubernetes import client as k8s_client

    from rlark.runtimes.base import WorkerRef
    from rlark.runtimes.kubernetes.client import KubeClient
    from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces
    from rlark.runtimes.kubernetes.runtime import KubernetesRuntime

    closed = k8s_client.CoreV1Api(k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9")))
    runtimes = ProjectNamespaces(KubernetesRuntime(kube=KubeClient(closed, "rlark"), start=False),
                                 lambda ns: KubernetesRuntime(kube=KubeClient(closed, ns), start=False))
    team_a, team_b = runtimes.runtime_for("team-a"), runtimes.runtime_for("team-b")
    theirs = {"metadata": {"name": "fair-77", "uid": "9f8e"}, "spec": {"queueName": "b"}, "status": {}}
    team_b.apply_list("Workload", [theirs])
    assert runtimes.workload_of_uid("9f8e") == "team-b/fair-77"
    assert team_a.workload_of_uid("9f8e") is None and runtimes.workload_of_uid("nope") is None
    team_a.apply_list("Workload", [])
    team_a.apply_list("Pod", [])
    pod = _stopped(PREEMPTED.replace("prioritization in the ClusterQueue", "Fair Sharing within the cohort"))
    pod["metadata"]["labels"].update({render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_RUN: "abc123"})
    team_a.track_pod("ppo-pool-0", head=False, join_timeout=300, run_uid="abc123")
    team_a.apply_watch_event("Pod", "ADDED", copy.deepcopy(pod))
    st = team_a.pod_status(WorkerRef(name="ppo-pool-0", handle="team-a/ppo-pool-0", run_uid="abc123"), now=NOW)
    assert st.failure is not None and st.failure[0] == Reason.Preempted
    assert st.failure[1].startswith("Kueue preempted the Run's Pod group by Workload team-b/fair-77 and"), st.failure
    # its Workload gone from the other namespace's cache: named by uid, as one nobody here watches
    team_b.apply_watch_event("Workload", "DELETED", copy.deepcopy(theirs))
    st = team_a.pod_status(WorkerRef(name="ppo-pool-0", handle="team-a/ppo-pool-0", run_uid="abc123"), now=NOW)
    assert "by the Workload of uid 9f8e and" in st.failure[1], st.failure
