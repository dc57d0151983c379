"""Pod + Events -> Worker state and Run failure, fed with real Pod and Event objects that people
posted publicly (tests/data/k8s, sources in its README.md).

Two levels: the pure :func:`interpret` (graces and timeouts with an explicit clock), and the
backend path - the real Controller and Store over a ``KubernetesRuntime`` whose watch caches are
fed the saved objects (its API client points at a closed port: nothing here talks to a cluster;
the deletes the controller asks for fail and are logged).

Why saved objects and not the test bed (tests/test_k8s_runtime.py runs the same reasons through
kwok's Stages): these are what real kubelets, schedulers and registries wrote (CrashLoopBackOff
after restarts, an eviction for memory pressure, a hostPath mount failure, containerd's pull
errors, timestamps an hour apart) - kwok runs no kubelet and can only imitate them.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s_client
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.record.build import build_record
from rlark.runtimes.kubernetes import render
from rlark.runtimes.kubernetes.client import KubeClient
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime
from rlark.runtimes.kubernetes.status import (
    StatusPolicy,
    classify_pull_error,
    image_digest,
    interpret,
    parse_time,
)
from rlark.services.jobs import JobService
from rlark.store import JobRow, RunRow, Store

DATA = Path(__file__).resolve().parent / "data" / "k8s"
HOUR = 3600.0


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def started(pod: dict) -> float:
    meta, status = pod["metadata"], pod["status"]
    return parse_time(status.get("startTime") or meta.get("creationTimestamp")) or 0.0


def at(name: str, after: float, events=(), **kw):
    pod = load(name)
    return interpret(pod, [load(e) for e in events], now=started(pod) + after, **kw)


# --- the pure interpretation ---------------------------------------------------------------------


def test_completed_with_exit_0():
    st = at("pod-succeeded-exit0", HOUR)
    assert (st.phase, st.alive, st.exit_code, st.failure) == ("Succeeded", False, 0, None)
    assert st.facts["imageDigest"] == "sha256:621c2f39f8133acb8e64023a94dbdf0d5ca81896102b9e57c0dc184cadaf5528"
    assert st.facts["node"] == "minikube" and st.facts["podIP"] == "172.17.0.9"


def test_error_exit_1_is_an_exit_code_not_a_runtime_failure():
    st = at("pod-failed-exit1", HOUR)
    assert (st.phase, st.alive, st.exit_code, st.failure) == ("Failed", False, 1, None)


@pytest.mark.parametrize("event,kind_text", [
    ("event-failed-pull-notfound", "the registry has no such image or tag (not found)"),
    ("event-failed-pull-unauthorized", "the registry refused the credentials (unauthorized)"),
])
def test_image_pull_not_found_vs_unauthorized_after_the_grace(event, kind_text):
    policy = StatusPolicy(image_pull_grace_seconds=30)
    # the grace counts from the first pull failure Event (16:06:58Z), not from the Pod's start
    early = at("pod-imagepullbackoff", 2 + 29, [event], policy=policy)
    assert early.failure is None and early.alive and early.phase == "Scheduled"
    st = at("pod-imagepullbackoff", 2 + 31, [event], policy=policy)
    reason, message = st.failure
    assert reason == "ImagePull" and st.alive
    assert kind_text in message
    assert "gcr.io/heptio-images/ks-guestbook-demo:0.3" in message  # the Pod's image
    assert "(ImagePullBackOff)" in message
    assert load(event)["message"][:60] in message  # the registry's own words


def test_image_pull_without_events_uses_the_kubelet_message():
    reason, message = at("pod-imagepullbackoff", HOUR).failure
    assert reason == "ImagePull"
    assert 'Back-off pulling image "gcr.io/heptio-images/ks-guestbook-demo:0.3"' in message
    assert "the image could not be pulled" in message


def test_docker_hub_does_not_tell_missing_from_private():
    reason, message = at("pod-errimagepull-dockerhub", 60).failure
    assert reason == "ImagePull"
    assert "does not exist or needs credentials (it does not tell which)" in message
    assert "insufficient_scope: authorization failed" in message
    assert at("pod-errimagepull-dockerhub", 10).failure is None  # within the grace


@pytest.mark.parametrize("text,kind", [
    # octarinesec/octarine-operator#15 (dockershim)
    ("Failed to pull image \"octarinesec/guardrails-enforcer:20.7\": rpc error: code = Unknown desc = "
     "Error response from daemon: unauthorized: authentication required", "unauthorized"),
    ("Failed to pull image \"octarinesec/guardrails-enforcer:20.7\": rpc error: code = Unknown desc = "
     "Error response from daemon: pull access denied for octarinesec/guardrails-enforcer, repository "
     "does not exist or may require 'docker login': denied: requested access to the resource is "
     "denied", "ambiguous"),
    # carvel-dev/kapp core_v1_pod.go (docker)
    ("rpc error: code = Unknown desc = Error response from daemon: repository kbld not found: does "
     "not exist or no pull access", "ambiguous"),
    # kubernetes/kubernetes#110678 (containerd, Harbor)
    (load("event-failed-pull-unauthorized")["message"], "unauthorized"),
    # lachie83/k8s-kubectl#157
    (load("event-failed-pull-notfound")["message"], "not_found"),
    ("Back-off pulling image \"x\"", "unknown"),
])
def test_classify_pull_error(text, kind):
    assert classify_pull_error(text) == kind


def test_unschedulable_for_gpus_after_the_pending_timeout():
    policy = StatusPolicy(pending_timeout_seconds=120)
    early = at("pod-unschedulable-gpu", 119, ["event-failedscheduling-gpu"], policy=policy)
    assert (early.phase, early.alive, early.failure) == ("Unscheduled", True, None)
    st = at("pod-unschedulable-gpu", 121, ["event-failedscheduling-gpu"], policy=policy)
    reason, message = st.failure
    assert reason == "Unschedulable" and st.alive
    assert "8 Insufficient nvidia.com/gpu" in message and "within 121 s" in message


def test_unschedulable_message_from_the_event_when_the_condition_has_none():
    pod = load("pod-unschedulable-gpu")
    del pod["status"]["conditions"][0]["message"]
    st = interpret(pod, [load("event-failedscheduling-gpu")], now=started(pod) + HOUR)
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu" in st.failure[1]


def test_unschedulable_for_node_selector_and_ports():
    reason, message = at("pod-unschedulable-ports", HOUR).failure
    assert reason == "Unschedulable"
    assert "3 node(s) didn't match node selector" in message


def test_failed_mount_on_a_missing_host_path_after_the_grace():
    policy = StatusPolicy(mount_grace_seconds=60)
    ev = ["event-failedmount-hostpath"]  # first seen 10:16:05Z, the Pod started 10:16:04Z
    assert at("pod-pending-initializing", 1 + 59, ev, policy=policy).failure is None
    st = at("pod-pending-initializing", 1 + 61, ev, policy=policy)
    assert st.failure == ("MountFailed", 'Pod image-pull-backoff on node minikube: MountVolume.SetUp '
                          'failed for volume "docker-lib" : hostPath type check failed: '
                          '/var/lib/docker is not a directory')
    # without mount Events, a Pod waiting in PodInitializing is just starting
    assert at("pod-pending-initializing", HOUR).failure is None


def test_oom_killed():
    st = at("pod-oomkilled", HOUR)
    assert (st.phase, st.alive, st.exit_code) == ("Failed", False, 137)
    reason, message = st.failure
    assert reason == "OOMKilled" and "OOM killer (exit code 137)" in message
    assert st.facts["imageID"].startswith("docker://sha256:") and "imageDigest" not in st.facts


def test_oom_killed_mentions_the_memory_limit():
    pod = load("pod-oomkilled")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"memory": "2Gi"}}
    assert "its memory limit is 2Gi" in interpret(pod, now=0).failure[1]


def test_evicted():
    st = at("pod-evicted", HOUR)
    assert (st.phase, st.alive) == ("Failed", False)
    reason, message = st.failure
    assert reason == "Evicted"
    assert "The node was low on resource: memory." in message and "10.100.42.154" in message


def test_crash_loop():
    reason, message = at("pod-crashloop", HOUR).failure
    assert reason == "CrashLoop"
    assert "3 restarts; last exit code 1 Error" in message and "Back-off 40s" in message


def test_pod_deleted_by_someone_else_is_a_lost_worker_or_head():
    st = at("pod-deleted-by-someone", HOUR)
    assert st.alive and st.failure[0] == "WorkerLost" and "being deleted (not by RLark)" in st.failure[1]
    assert at("pod-deleted-by-someone", HOUR, head=True).failure[0] == "HeadLost"
    # RLark's own stop is not a failure
    assert at("pod-deleted-by-someone", HOUR, deleted_by_rlark=True).failure is None
    gone = at("pod-pending-initializing", HOUR, gone=True, head=True)
    assert (gone.phase, gone.alive, gone.failure[0]) == ("Gone", False, "HeadLost")
    assert at("pod-succeeded-exit0", HOUR, gone=True).failure is None  # finished, then removed


def test_node_level_failures():
    pod = load("pod-failed-exit1")
    pod["status"].update(reason="NodeLost", message="Node minikube which was running pod my-pod is "
                         "unresponsive")
    assert interpret(pod, now=0, head=True).failure[0] == "HeadLost"
    pod["status"].update(reason="OutOfnvidia.com/gpu", message="Node didn't have enough resource")
    assert interpret(pod, now=0).failure[0] == "AdmissionRejected"


def test_image_digest():
    assert image_digest("docker.io/library/redis@sha256:c45b") == "sha256:c45b"
    assert image_digest("docker-pullable://alpine@sha256:621c") == "sha256:621c"
    assert image_digest("docker://sha256:0a62") is None and image_digest("") is None


def test_odd_objects_do_not_raise():
    for pod in ({}, {"status": None}, {"status": {"containerStatuses": [{}]}}, None):
        interpret(pod, [{}], now=time.time())


# --- through the backend: Controller + Store + KubernetesRuntime fed with the saved objects ------

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: solo}
spec:
  headRole: head
  runScript: python train.py
  roles: [{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0"}]
"""


@pytest.fixture
def backend(rlark_home, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")  # the deletes fail: no API server
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    closed = k8s_client.CoreV1Api(k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9")))
    rt = KubernetesRuntime(kube=KubeClient(closed, "rl"), start=False)
    rt.apply_list("Pod", [])  # as its watch would have: no Pod yet
    ctl = Controller(store, rt)
    ctl.reconcile_once()  # the start-up pass (nothing to recover)
    yield store, rt, ctl
    store.dispose()


def rlarks(pod: dict, run_uid: str | None = None) -> dict:
    """A saved Pod (from a real cluster) labelled as RLark labels a Worker's Pod of Run
    ``run_uid``: the runtime reads no other Pod as a Worker's."""
    labels = pod["metadata"].setdefault("labels", {})
    labels[render.LABEL_MANAGED_BY] = render.MANAGED_BY
    if run_uid is not None:
        labels[render.LABEL_RUN] = run_uid
    return pod


def run_head_pod(backend, tmp_path, pod_name, events=(), lines=(), gone=False):
    """A Starting Run whose head is the saved Pod ``pod_name``; one controller pass."""
    store, rt, ctl = backend
    JobService(store, runtime="kubernetes").create(JOB)
    with store.session() as s:
        run = s.scalar(select(RunRow))
        token, uid = run.event_token, run.uid  # the bootstrap signs its lines with the token
    pod = rlarks(load(pod_name), uid)
    name = pod["metadata"]["name"]
    log = tmp_path / "head.log"
    log.write_text("".join(f"RLARK_EVENT {json.dumps({**line, 'tok': token})}\n" for line in lines))
    with store.session() as s:
        run = s.scalar(select(RunRow))
        run.phase = run.job.phase = "Starting"
        w = run.workers[0]
        w.handle, w.log_path, w.phase = f"rl/{name}", str(log), "Starting"
    rt.track_pod(name, head=True, join_timeout=300, created=time.time() - HOUR)
    rt.apply_watch_event("Pod", "ADDED", copy.deepcopy(pod))
    if gone:
        rt.apply_watch_event("Pod", "DELETED", copy.deepcopy(pod))
    for e in events:
        rt.apply_watch_event("Event", "ADDED", load(e))
    ctl.reconcile_once()
    with store.session() as s:
        run = s.scalar(select(RunRow))
        w = run.workers[0]
        return {"run": (run.phase, run.reason, run.message), "worker": (w.phase, w.reason, w.message),
                "facts": dict(w.facts or {}), "record": run.record, "exit": w.exit_code}


@pytest.mark.parametrize("pod,events,reason,worker_reason,words", [
    ("pod-imagepullbackoff", ["event-failed-pull-notfound"], "ImagePull", "ImagePull",
     "(not found)"),
    ("pod-imagepullbackoff", ["event-failed-pull-unauthorized"], "ImagePull", "ImagePull",
     "(unauthorized)"),
    ("pod-unschedulable-gpu", ["event-failedscheduling-gpu"], "Unschedulable", "Unschedulable",
     "8 Insufficient nvidia.com/gpu"),
    ("pod-pending-initializing", ["event-failedmount-hostpath"], "MountFailed", "MountFailed",
     "hostPath type check failed: /var/lib/docker is not a directory"),
    ("pod-oomkilled", [], "OOMKilled", "OOMKilled", "OOM killer"),
    ("pod-evicted", [], "Evicted", "Evicted", "The node was low on resource: memory"),
    ("pod-crashloop", [], "CrashLoop", "CrashLoop", "keeps failing"),
    ("pod-deleted-by-someone", [], "HeadLost", "HeadLost", "not by RLark"),
])
def test_backend_names_the_failure(backend, tmp_path, pod, events, reason, worker_reason, words):
    out = run_head_pod(backend, tmp_path, pod, events)
    phase, run_reason, message = out["run"]
    assert (phase, run_reason) == ("Failed", reason)
    assert message.startswith("Worker solo-head-0 (rank 0, role head): ") and words in message
    assert out["worker"][:2] == ("Failed", worker_reason)


def test_backend_error_exit_1_is_head_lost_with_the_exit_code(backend, tmp_path):
    out = run_head_pod(backend, tmp_path, "pod-failed-exit1")
    assert out["run"] == ("Failed", "HeadLost", "Worker solo-head-0 (rank 0, role head) exited "
                                                "with code 1 before the run script finished")
    assert out["worker"][0] == "Failed" and out["exit"] == 1


def test_backend_completed_exit_0_with_the_bootstrap_lines(backend, tmp_path):
    lines = [{"ts": 1.0, "event": "running", "pid": 7},
             {"ts": 2.0, "event": "run_finished", "exit_code": 0},
             {"ts": 3.0, "event": "exit", "code": 0}]
    out = run_head_pod(backend, tmp_path, "pod-succeeded-exit0", lines=lines)
    assert out["run"] == ("Succeeded", "Completed", "the run script on solo-head-0 exited with code 0")
    assert out["worker"][0] == "Succeeded"
    digest = "sha256:621c2f39f8133acb8e64023a94dbdf0d5ca81896102b9e57c0dc184cadaf5528"
    assert out["facts"]["imageDigest"] == digest and out["facts"]["node"] == "minikube"
    rec = out["record"]  # the Run finished in this pass: its record has the digest
    assert rec["imageDigests"] == {"head": {digest: ["solo-head-0"]}}
    assert rec["imageDigestMismatch"] == []


def test_backend_pod_gone_while_starting(backend, tmp_path):
    out = run_head_pod(backend, tmp_path, "pod-pending-initializing", gone=True)
    assert out["run"][:2] == ("Failed", "HeadLost")
    assert "was deleted (not by RLark) while Pending on node minikube" in out["run"][2]


# --- the run record ---------------------------------------------------------------------------------


def test_record_flags_workers_of_one_role_with_different_digests(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        svc = JobService(store, runtime="kubernetes")
        svc.create(JOB.replace("workers: 1", "workers: 3"))
        with store.session() as s:
            job = s.scalar(select(JobRow))
            run = job.runs[0]
            for w, d in zip(run.workers, ("sha256:aaa", "sha256:aaa", "sha256:bbb")):
                w.facts = {"imageDigest": d, "imageID": f"docker.io/rlinf/rlinf@{d}"}
            rec = build_record(job, run, run.workers)
    finally:
        store.dispose()
    assert rec["imageDigests"] == {"head": {"sha256:aaa": ["solo-head-0", "solo-head-1"],
                                            "sha256:bbb": ["solo-head-2"]}}
    assert rec["imageDigestMismatch"] == ["head"]
    assert any("2 different image digests" in n for n in rec["runtimeNotes"])
    from rlark.record.export import render_markdown

    md = render_markdown(rec)
    assert "Workers of role head ran different image digests" in md
    assert "head digest `sha256:bbb`: solo-head-2" in md


def test_runtime_cache_before_and_after_the_watch(backend):
    """A Pod the watch has not shown yet, or never showed: the clock is the test's (a Pod
    created an hour ago), which the test bed cannot fake."""
    from rlark.runtimes.base import WorkerRef

    _, rt, _ = backend
    ref = WorkerRef(name="solo-head-0", handle="rl/solo-head-0")
    rt.track_pod("solo-head-0", head=True, join_timeout=300)
    seen = rt.observe(ref)  # just created, not in the watch cache yet: alive
    assert (seen.alive, seen.failure) == (True, None)
    rt.track_pod("solo-head-0", head=True, join_timeout=300, created=time.time() - HOUR)
    seen = rt.observe(ref)  # never showed up: gone, and not by RLark's doing
    assert not seen.alive and seen.failure[0] == "HeadLost"
    rt.kill(ref)  # the delete fails (no API server) but RLark asked for it: no failure
    assert rt.observe(ref).failure is None
    rt.apply_watch_event("Event", "ADDED", {"metadata": {"uid": "1"}, "involvedObject": {"name": "other"},
                                            "reason": "FailedMount"})
    assert rt.pod_status(WorkerRef(name="other")).facts == {}  # not ours: not kept
    fresh = KubernetesRuntime(kube=rt.kube, start=False)  # its watch has not listed yet
    fresh.track_pod("solo-head-0", head=True, join_timeout=300, created=time.time() - HOUR)
    assert fresh.observe(ref).alive  # an empty cache proves nothing
    fresh.apply_list("Pod", [])
    assert not fresh.observe(ref).alive


def test_runtime_pending_timeout_is_capped_by_the_join_timeout(backend):
    from rlark.runtimes.base import WorkerRef

    _, rt, _ = backend
    pod = rlarks(load("pod-unschedulable-gpu"))
    rt.track_pod("gpu-job", head=False, join_timeout=100, created=time.time() - HOUR)
    rt.apply_watch_event("Pod", "ADDED", pod)
    t0 = started(pod)
    assert rt.pod_status(WorkerRef(name="gpu-job"), now=t0 + 89).failure is None
    assert rt.pod_status(WorkerRef(name="gpu-job"), now=t0 + 91).failure[0] == "Unschedulable"


def test_a_deleted_pods_container_that_ended_with_the_deletion_is_a_loss_not_one_before():
    """Someone deleted the Pod: a container that ended once the deletion was asked for ended
    because of it (a loss naming the deletion); one that had finished before did not."""
    pod = copy.deepcopy(load("pod-succeeded-exit0"))  # its container finished 09:15:29
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    pod["metadata"]["deletionTimestamp"] = "2018-12-02T09:15:50Z"  # asked 09:15:20: before
    st = interpret(pod, now=HOUR, head=True)
    assert st.failure == ("HeadLost", "Pod my-pod was deleted (not by RLark) before its Worker "
                                      "finished (exit code 0)") and not st.alive
    pod["metadata"]["deletionTimestamp"] = "2018-12-02T09:16:30Z"  # asked 09:16:00: after
    assert interpret(pod, now=HOUR, head=True).failure is None
    assert interpret(pod, now=HOUR, head=True, gone=True).failure is None
    pod["metadata"]["deletionTimestamp"] = "2018-12-02T09:15:50Z"
    assert interpret(pod, now=HOUR, head=True, deleted_by_rlark=True).failure is None


def test_a_pod_gone_keeps_the_reason_its_last_state_gave():
    st = at("pod-evicted", HOUR, gone=True)
    assert (st.phase, st.alive, st.failure[0]) == ("Gone", False, "Evicted")
    assert at("pod-oomkilled", HOUR, gone=True).failure[0] == "OOMKilled"
    assert at("pod-evicted", HOUR, gone=True, deleted_by_rlark=True).failure is None


def test_the_runtime_says_which_pods_changed_each_once(rlark_home):
    """What the controller watches between passes on Kubernetes (:meth:`take_changes`, issue 23
    item 3): the Pods the watch brought (a list after a lost watch: each Pod in it, and each
    Pod it no longer has), each once, as ``<namespace>/<pod>`` handles, of every namespace."""
    from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces

    closed = k8s_client.CoreV1Api(k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9")))
    runtimes = ProjectNamespaces(KubernetesRuntime(kube=KubeClient(closed, "rl"), start=False),
                                 lambda ns: KubernetesRuntime(kube=KubeClient(closed, ns), start=False))
    team = runtimes.runtime_for("team-a")
    pod = rlarks(load("pod-pending-initializing"))
    name = pod["metadata"]["name"]
    assert runtimes.take_changes() == set()
    team.apply_list("Pod", [pod])
    assert runtimes.take_changes() == {f"team-a/{name}"}
    assert runtimes.take_changes() == set()  # said once
    team.apply_watch_event("Pod", "MODIFIED", pod)
    runtimes.default.apply_watch_event("Pod", "ADDED", {**pod, "metadata": {**pod["metadata"], "name": "other"}})
    assert runtimes.take_changes() == {f"team-a/{name}", "rl/other"}
    team.apply_list("Pod", [])  # gone from a later list
    assert team.take_changes() == {f"team-a/{name}"}


def test_between_passes_the_controller_asks_the_runtime_what_changed_not_every_worker(
        backend, tmp_path, monkeypatch):
    """On Kubernetes the controller's watch between passes takes the Pods the runtime says
    changed and maps them to their Runs: no stat of each log, no ``observe`` of each Worker ten
    times a second (issue 23 item 3: at 1,000 Workers that loop was a sixth of the server's CPU)."""
    store, rt, ctl = backend
    run_head_pod(backend, tmp_path, "pod-pending-initializing")
    with store.session() as s:
        run = s.scalar(select(RunRow))
        run_id, handle = run.id, run.workers[0].handle
    observed: list = []
    real_observe = rt.observe
    monkeypatch.setattr(rt, "observe", lambda ref: observed.append(ref) or real_observe(ref))
    seen = ctl._fingerprint(refresh=True)
    rt.take_changes()  # what the set-up's pass left
    assert ctl._changed_since(seen) == set()
    pod = rlarks(load("pod-pending-initializing"), run.uid)
    rt.apply_watch_event("Pod", "MODIFIED", pod)  # the watch brings the head's Pod
    assert handle == f"rl/{pod['metadata']['name']}"
    assert ctl._changed_since(seen) == {run_id}
    assert ctl._changed_since(seen) == set()
    rt.apply_watch_event("Pod", "MODIFIED", {**pod, "metadata": {**pod["metadata"], "name": "not-rlarks"}})
    assert ctl._changed_since(seen) == set()  # a Pod no Run watches
    assert observed == []
