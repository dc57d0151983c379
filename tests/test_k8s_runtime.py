"""``KubernetesRuntime`` and the controller against a real control plane (the test bed:
kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok Nodes), as RLark's own
ServiceAccount in a fresh namespace per test set up like
deploy/kubernetes/project-namespace.example.yaml.

What RLark creates and in which order, its ownerReferences and the garbage collector; the
scheduler's verdicts (GPUs, nodeSelector, tolerations, a missing PVC) and the capacity preflight
on the real Nodes; Pod states kwok's Stages produce (tests/data/kwok-stages.yaml) as Worker and
Run reasons; logs through the API server; names an earlier Run still holds, and names another
Job's objects hold; the watches across an etcd compaction and API server restarts.

No container runs (kwok): the tests write each Worker's lifecycle lines into the log kwok
serves for its Pod (:class:`tests.k8s_testbed.KwokWorkers`).
"""

from __future__ import annotations

import logging

import pytest

from tests.k8s_testbed import (
    GPU_NODES,
    MISSING_IMAGE,
    PRIVATE_IMAGE,
    RESERVED_LABEL,
    RESERVED_NODE,
    RESERVED_TAINT,
    KwokWorkers,
    RlarkOnK8s,
    restricted,
    setup_timeout,
    wait_for,
)

pytest.importorskip("kubernetes")

from rlark.ranks import plan_workers  # noqa: E402
from rlark.runtimes.base import LaunchSpec, WorkerPlace  # noqa: E402
from rlark.runtimes.kubernetes import render  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.services.errors import Invalid  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

IMAGE = "docker.io/rlinf/rlinf:0.3.0"


def job_yaml(name: str = "ppo", *, pool: int = 2, head_gpus: int = 1, pool_extra: str = "",
             pool_image: str = IMAGE, head_role: str = "head") -> str:
    """A Job of a head (``head_gpus`` GPUs) and ``pool`` pool Workers (``pool_extra``: more
    YAML of the pool role, e.g. mounts, nodeSelector)."""
    roles = f"    - {{name: {head_role}, workers: 1, image: {IMAGE!r}, resources: {{gpu: {head_gpus}}}}}\n"
    if pool:
        roles += f"    - name: pool\n      workers: {pool}\n      image: {pool_image!r}\n{pool_extra}"
    return (f"apiVersion: rlark.io/v1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n"
            f"  headRole: {head_role}\n  terminationGracePeriodSeconds: 5\n"
            f"  runScript: python train.py\n  failurePolicy: {{joinTimeoutSeconds: 120}}\n"
            f"  roles:\n{roles}")


#: a Pod the scheduler refuses fails its Run as Unschedulable after 2 s (the default of the
#: tests' servers is longer: a busy test bed's scheduler may take that long to bind any Pod)
SOON_UNSCHEDULABLE = {"RLARK_K8S_PENDING_TIMEOUT": "2"}

PVC_MOUNT = """      mounts:
        - {name: models, type: objectStorage, source: "s3://models/llama", mountPath: /models,
           readOnly: true, kubernetes: {storageClass: csi-s3, size: 100Gi}}
"""


@pytest.fixture
def rlark(k8s_testbed, k8s_namespace, rlark_home, caplog):
    """RLark's server parts on the test bed (preflight on), stopped after the test."""
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    made: list[RlarkOnK8s] = []

    def make(**kw) -> RlarkOnK8s:
        home = rlark_home / f"server-{len(made)}"  # a store of its own: one controller per store
        home.mkdir()
        r = RlarkOnK8s(k8s_testbed, k8s_namespace, home, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def pod_named(tb, namespace: str, name: str):
    """The Pod as the admin reads it, or None while it does not exist."""
    return next((p for p in tb.admin().list_namespaced_pod(namespace).items if p.metadata.name == name), None)


def owner_uid(obj) -> str | None:
    refs = obj.metadata.owner_references or []
    return refs[0].uid if refs else None


# --- objects, order, owners, garbage collection ------------------------------------------------------


def test_a_run_creates_its_configmap_then_owned_objects_then_pods_and_the_garbage_collector_removes_them(
        rlark, k8s_testbed, k8s_namespace):
    # a long pending timeout: the PVC of a StorageClass nobody provisions keeps the pool unscheduled
    r = rlark(env={"RLARK_K8S_PENDING_TIMEOUT": "600", "RLARK_K8S_STORAGE_CLASSES": "csi-s3"})
    created = r.record_creates()
    r.submit(job_yaml(pool_extra=PVC_MOUNT))
    r.wait_phase("ppo", "Starting")
    # the Run is Starting once its plan is committed, before its launch calls: wait for them
    wait_for("the launch of all three Workers", lambda: len(created) >= 8)
    uid = r.run_row("ppo").uid
    cm = f"ppo-run-{uid}"
    # the Run's Ray token Secret (render.render_ray_secret) comes right after its owner
    assert created == [("ConfigMap", cm), ("Secret", f"{cm}-ray"), ("Service", "ppo-head"),
                            ("NetworkPolicy", cm),
                            ("PersistentVolumeClaim", f"ppo-pool-models-{uid}"),
                            ("Pod", "ppo-head-0"), ("Pod", "ppo-pool-0"), ("Pod", "ppo-pool-1")]
    objs = r.objects(f"{render.LABEL_RUN}={uid}")
    owner = objs["ConfigMap"][0]
    assert owner.metadata.name == cm and owner_uid(owner) is None
    owned = [o for kind in ("Secret", "Service", "NetworkPolicy", "PersistentVolumeClaim", "Pod")
             for o in objs[kind]]
    assert sorted(o.metadata.name for o in owned) == sorted(
        [f"{cm}-ray", "ppo-head", cm, f"ppo-pool-models-{uid}", "ppo-head-0", "ppo-pool-0",
         "ppo-pool-1"])
    for o in owned:
        assert owner_uid(o) == owner.metadata.uid, o.metadata.name
        assert o.metadata.owner_references[0].kind == "ConfigMap"
        assert o.metadata.labels[render.LABEL_RUN] == uid and o.metadata.labels[render.LABEL_JOB] == "ppo"
    # the NetworkPolicy: the Run's Pods take connections from the Run's own Pods only
    (netpol,) = objs["NetworkPolicy"]
    assert netpol.spec.pod_selector.match_labels == {render.LABEL_RUN: uid}
    assert netpol.spec.policy_types == ["Ingress"]
    (rule,) = netpol.spec.ingress
    assert [p.pod_selector.match_labels for p in rule._from] == [{render.LABEL_RUN: uid}]
    assert rule.ports is None and not any(p.namespace_selector or p.ip_block for p in rule._from)
    ranks = {p.metadata.name: p.metadata.labels[render.LABEL_RANK] for p in objs["Pod"]}
    assert ranks == {"ppo-head-0": "0", "ppo-pool-0": "1", "ppo-pool-1": "2"}
    env = {e.name: e.value for p in objs["Pod"] if p.metadata.name == "ppo-pool-1"
           for e in p.spec.containers[0].env}
    assert env["RLINF_NODE_RANK"] == "2" and env["RLARK_RUN_ID"] == uid
    # deleting the owner (`kubectl delete configmap`): the controller-manager's garbage collector
    # removes the rest, and RLark names its Workers' Pods as deleted by someone else
    k8s_testbed.admin().delete_namespaced_config_map(cm, k8s_namespace)
    wait_for("the garbage collector to remove the Run's objects",
             lambda: not any(r.objects(f"{render.LABEL_RUN}={uid}").values()), timeout=60)
    job = r.wait_phase("ppo", "Failed", timeout=60)
    # the first Worker seen gone decides: the head (HeadLost) or a pool Worker (WorkerLost)
    assert job["reason"] in ("HeadLost", "WorkerLost"), job
    assert "not by RLark" in job["message"], job["message"]


def a_running_run(rlark, k8s_testbed, k8s_namespace, tmp_path):
    """Submit :func:`job_yaml`, let kwok run its Pods, join every Worker and start the run
    script; returns ``(rlark, workers)`` once the Job is Running."""
    text = job_yaml()
    workers = KwokWorkers(k8s_testbed, k8s_namespace, load_job(text)[0], tmp_path)
    r = rlark()
    r.submit(text)
    workers.wait_running()
    workers.join()
    workers.start_run_script()
    r.wait_phase("ppo", "Running")
    return r, workers


def test_a_run_succeeds_on_kwok_nodes_its_logs_stream_through_the_api_server_and_end_run_cleans_up(
        rlark, k8s_testbed, k8s_namespace, tmp_path):
    r, workers = a_running_run(rlark, k8s_testbed, k8s_namespace, tmp_path)
    workers.finish_run_script(0)
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"]) == ("Succeeded", "Completed"), job
    head = next(w for w in job["currentRun"]["workers"] if w["nodeRank"] == 0)
    log = open(head["log"]).read()
    assert '"event": "run_finished"' in log and '"event": "running"' in log  # through pods/log
    uid = job["currentRun"]["uid"]
    wait_for("end_run to delete the Run's objects",
             lambda: not any(r.objects(f"{render.LABEL_RUN}={uid}").values()), timeout=60)


# --- Pod states kwok's Stages produce ---------------------------------------------------------------


@pytest.mark.parametrize("case", ["run-script-exit-3", "pool-exit-2", "pool-oomkilled",
                                  "head-deleted-by-someone", "head-deleted-gracefully-by-someone"])
def test_pod_states_become_worker_and_run_reasons(case, rlark, k8s_testbed, k8s_namespace, tmp_path):
    r, workers = a_running_run(rlark, k8s_testbed, k8s_namespace, tmp_path)
    if case == "run-script-exit-3":
        workers.finish_run_script(3)
        reason, words, blamed = "RunFailed", "the run script on ppo-head-0 exited with code 3", "ppo-head-0"
    elif case == "pool-exit-2":
        k8s_testbed.terminate(k8s_namespace, "ppo-pool-0", 2)
        reason, words, blamed = "WorkerLost", "exited with code 2", "ppo-pool-0"
    elif case == "pool-oomkilled":
        k8s_testbed.terminate(k8s_namespace, "ppo-pool-0", 137, "OOMKilled")
        reason, words, blamed = "OOMKilled", "OOM", "ppo-pool-0"
    elif case == "head-deleted-by-someone":  # at once: the Pod is gone
        k8s_testbed.admin().delete_namespaced_pod("ppo-head-0", k8s_namespace, grace_period_seconds=0)
        reason, words, blamed = "HeadLost", "not by RLark", "ppo-head-0"
    else:  # with its grace period: its container ends (SIGTERM, kwok's Stage) before it goes
        k8s_testbed.admin().delete_namespaced_pod("ppo-head-0", k8s_namespace)
        reason, words, blamed = "HeadLost", "not by RLark", "ppo-head-0"
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"]) == ("Failed", reason), job
    assert words in job["message"] and blamed in job["message"], job["message"]
    worker = next(w for w in job["currentRun"]["workers"] if w["name"] == blamed)
    assert worker["phase"] == "Failed", worker


@pytest.mark.parametrize("image,words", [(MISSING_IMAGE, "(not found)"), (PRIVATE_IMAGE, "(unauthorized)")])
def test_an_image_that_cannot_be_pulled_fails_the_run_naming_the_registrys_answer(
        image, words, rlark, k8s_namespace):
    r = rlark()
    r.submit(job_yaml(pool=1, pool_image=image))
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"]) == ("Failed", "ImagePull"), job
    assert "ppo-pool-0" in job["message"] and words in job["message"], job["message"]


# --- scheduling and the capacity preflight ------------------------------------------------------------


def test_more_gpus_than_any_node_is_refused_by_the_preflight_and_unschedulable_without_it(rlark):
    text = job_yaml(pool=0, head_gpus=8)
    with pytest.raises(Invalid) as e:  # the preflight reads the test bed's real Nodes
        rlark().submit(text)
    finding = next(f for f in e.value.findings if f.code == "ExceedsNodeCapacity")
    assert "no node has 8 nvidia.com/gpu; the largest allocatable is 4" in finding.message
    r = rlark(preflight=False, env=SOON_UNSCHEDULABLE)  # past the preflight, the scheduler says no
    r.submit(text)
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"]) == ("Failed", "Unschedulable"), job
    assert "ppo-head-0" in job["message"] and "Insufficient nvidia.com/gpu" in job["message"], job["message"]


def test_node_selector_and_tolerations_are_honoured(rlark, k8s_testbed, k8s_namespace):
    key, value, effect = RESERVED_TAINT
    selector = f"      nodeSelector: {{{RESERVED_LABEL[0]}: {RESERVED_LABEL[1]}}}\n"
    tolerate = (f"      kubernetes:\n        tolerations: [{{key: {key!r}, operator: Equal, "
                f"value: {value!r}, effect: {effect}}}]\n")
    r = rlark(env={"RLARK_K8S_TOLERATIONS": f"{key}={value}:{effect}"})
    r.submit(job_yaml(pool=1, pool_extra=selector + tolerate))
    pod = wait_for("ppo-pool-0 bound", lambda: (p := pod_named(k8s_testbed, k8s_namespace, "ppo-pool-0"))
                   and p.spec.node_name and p)
    assert pod.spec.node_name == RESERVED_NODE
    # without the toleration: the preflight sees no eligible Node; past it, the scheduler agrees
    with pytest.raises(Invalid) as e:
        r.submit(job_yaml("plain", pool=1, pool_extra=selector))
    assert any(f.code == "NoEligibleNode" and "taint" in f.message for f in e.value.findings)
    r2 = rlark(preflight=False, env=SOON_UNSCHEDULABLE)
    r2.submit(job_yaml("plain", pool=1, pool_extra=selector))
    job = r2.wait_ended("plain")
    assert (job["phase"], job["reason"]) == ("Failed", "Unschedulable"), job
    assert "plain-pool-0" in job["message"] and "untolerated taint" in job["message"], job["message"]


def test_a_pvc_that_does_not_exist_is_reported(rlark):
    r = rlark(env=SOON_UNSCHEDULABLE)
    r.submit(job_yaml(pool=1, pool_extra="      mounts:\n        - {name: data, type: pvc, "
                                           "source: no-such-claim, mountPath: /data}\n"))
    job = r.wait_ended("ppo")
    assert (job["phase"], job["reason"]) == ("Failed", "Unschedulable"), job
    assert 'persistentvolumeclaim "no-such-claim" not found' in job["message"], job["message"]


# --- names ----------------------------------------------------------------------------------------------


def test_a_new_run_waits_for_names_its_previous_run_still_holds_then_takes_them_over(
        rlark, k8s_testbed, k8s_namespace, tmp_path):
    text = job_yaml(pool=1)
    workers = KwokWorkers(k8s_testbed, k8s_namespace, load_job(text)[0], tmp_path)
    admin = k8s_testbed.admin()
    r = rlark()
    r.submit(text)
    workers.wait_running()
    first = r.run_row("ppo").uid
    # another controller's finalizer keeps the pool Pod after RLark deletes it
    admin.patch_namespaced_pod("ppo-pool-0", k8s_namespace, {"metadata": {"finalizers": ["rlark.test/hold"]}})
    r.jobs.restart("ppo")
    waiting = wait_for("the new Run to wait for the names",
                       lambda: (j := r.job("ppo"))["reason"] == "WaitingForNames" and j, timeout=60)
    assert r.run_row("ppo").number == 2
    assert (f"Pod ppo-pool-0 of run {first} is still being deleted (finalizers: rlark.test/hold)"
            in waiting["message"]), waiting
    held = admin.read_namespaced_pod("ppo-pool-0", k8s_namespace)
    assert held.metadata.deletion_timestamp and held.metadata.labels[render.LABEL_RUN] == first
    admin.patch_namespaced_pod("ppo-pool-0", k8s_namespace, {"metadata": {"finalizers": None}})
    second = r.run_row("ppo").uid
    r.wait_phase("ppo", "Starting", "Running")
    pods = wait_for("the new Run's Pods", lambda: (ps := r.objects(f"{render.LABEL_RUN}={second}")["Pod"])
                    and len(ps) == 2 and ps)
    assert {p.metadata.name for p in pods} == {"ppo-head-0", "ppo-pool-0"}
    assert not r.objects(f"{render.LABEL_RUN}={first}")["Pod"]
    assert any(e["reason"] == "WaitingForNames" for e in r.events("ppo"))


def test_a_launch_tried_again_after_the_server_stopped_keeps_what_the_run_already_has(
        k8s_testbed, k8s_namespace, tmp_path):
    """A server that stopped mid-launch left the Run Pending in its store, and its ConfigMap and
    first Pods in the cluster: the next server's launch keeps them (same uids, same owner)."""
    job = load_job(job_yaml())[0]
    workers = plan_workers(job)

    def launch(rt: KubernetesRuntime, w) -> None:
        rt.launch(LaunchSpec(job=job, run_uid="r1", worker=w, env={"RLINF_NODE_RANK": str(w.node_rank)},
                             log_path=str(tmp_path / f"{w.name}.log"), place=WorkerPlace()))

    first = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace))
    try:
        first.place(job, "r1", workers, None)
        for w in workers[:2]:
            launch(first, w)
    finally:
        first.shutdown()
    admin = k8s_testbed.admin()
    before = {p.metadata.name: p.metadata.uid for p in admin.list_namespaced_pod(k8s_namespace).items}
    cm_uid = admin.read_namespaced_config_map("ppo-run-r1", k8s_namespace).metadata.uid
    second = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace))
    try:
        second.place(job, "r1", workers, None)
        for w in workers:
            launch(second, w)
    finally:
        second.shutdown()
    pods = {p.metadata.name: p for p in admin.list_namespaced_pod(k8s_namespace).items}
    assert sorted(pods) == ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"]
    assert {n: pods[n].metadata.uid for n in before} == before  # kept, not replaced
    assert all(owner_uid(p) == cm_uid for p in pods.values())
    assert admin.read_namespaced_config_map("ppo-run-r1", k8s_namespace).metadata.uid == cm_uid


def test_names_another_jobs_objects_hold_are_never_deleted_or_adopted(rlark, k8s_testbed, k8s_namespace,
                                                                      tmp_path):
    """Job "a-b" (role "c") and Job "a" (role "b-c") both name a Pod "a-b-c-0"; and a Pod
    RLark did not create holds "ppo-head-0".

    On one server the second Job is refused at preflight. A second server on a store of its own
    (it knows nothing of Job a-b) accepts it: its launch fails naming the holder, and neither its
    stop (delete by name), an adoption of the name, nor the Run's end touches the other Job's Pod."""
    from rlark.runtimes.base import AdoptSpec, WorkerRef

    admin = k8s_testbed.admin()
    r = rlark()
    r.submit(job_yaml("a-b", pool=0, head_role="c"))
    theirs = wait_for("Job a-b's Pod running", lambda: (p := pod_named(k8s_testbed, k8s_namespace, "a-b-c-0"))
                      and p.status.phase == "Running" and p)
    with pytest.raises(Invalid) as refused:
        r.submit(job_yaml("a", pool=0, head_role="b-c"))
    (f,) = [f for f in refused.value.findings if f.code == "NameCollision"]
    assert f.path == "spec.roles[0].name"
    assert "Job 'a'" in f.message and "Job 'a-b'" in f.message and "Pod a-b-c-0" in f.message, f.message
    other = rlark()  # another store: preflight cannot see Job a-b
    other.submit(job_yaml("a", pool=0, head_role="b-c"))
    job = other.wait_phase("a", "Failed")
    assert (job["phase"], job["reason"]) == ("Failed", "LaunchFailed"), job
    assert "Pod a-b-c-0 already exists" in job["message"] and "belongs to RLark Job 'a-b'" in job["message"]
    wait_for("Job a's Run to end (end_run)", lambda: other.run_row("a").record)
    # what the runtime of Job a's server does with the name: nothing to Job a-b's Pod
    ref = WorkerRef(name="a-b-c-0", handle=f"{k8s_namespace}/a-b-c-0", run_uid=other.run_row("a").uid)
    log_path = tmp_path / "a-b-c-0.log"
    other.rt.adopt(AdoptSpec(ref=ref, job=load_job(job_yaml("a", pool=0, head_role="b-c"))[0],
                             is_head=True, log_path=str(log_path)))
    follower = other.rt._followers["a-b-c-0"]
    assert follower.done.wait(10)  # its log is not followed: not Job a's Worker's
    assert not log_path.exists() or log_path.read_bytes() == b""
    seen = other.rt.observe(ref)
    assert not seen.alive and seen.exit_code is None, seen  # gone for Job a, not Running
    other.rt.signal_stop(ref)
    other.rt.kill(ref)
    assert other.rt.wait_stops_sent(30)  # the deletes are sent by the runtime's own thread
    other.rt.end_run(ref.run_uid)
    admin.create_namespaced_pod(k8s_namespace, restricted({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ppo-head-0", "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "db", "image": "registry.invalid/db:1"}],
                 "schedulingGates": [{"name": "rlark.test/hold"}]}}))
    r.submit(job_yaml(pool=0))
    job = r.wait_phase("ppo", "Failed")
    assert (job["phase"], job["reason"]) == ("Failed", "LaunchFailed"), job
    wait_for("the Run's end (end_run)", lambda: r.run_row("ppo").record)
    wait_for("what the failed launches created to be deleted", lambda: not any(
        objs for objs in r.objects(f"{render.LABEL_JOB} in (a, ppo)").values()))
    assert "Pod ppo-head-0 already exists" in job["message"] and "not created by RLark" in job["message"]
    stranger = WorkerRef(name="ppo-head-0", handle=f"{k8s_namespace}/ppo-head-0", run_uid=r.run_row("ppo").uid)
    r.rt.kill(stranger)  # the Worker's name, a Pod not RLark's: not deleted
    assert r.rt.wait_stops_sent(30)
    # both Runs ended (end_run by their run labels): the other objects are untouched
    kept = admin.read_namespaced_pod("a-b-c-0", k8s_namespace)
    assert kept.metadata.uid == theirs.metadata.uid and kept.metadata.deletion_timestamp is None
    assert kept.metadata.labels[render.LABEL_JOB] == "a-b"
    stranger = admin.read_namespaced_pod("ppo-head-0", k8s_namespace)
    assert stranger.metadata.deletion_timestamp is None and stranger.metadata.labels == {"app": "db"}
    assert r.job("a-b")["phase"] in ("Starting", "Running"), r.job("a-b")


# --- the watches ----------------------------------------------------------------------------------------


def managed_pod(name: str) -> dict:
    return restricted({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {render.LABEL_MANAGED_BY: render.MANAGED_BY}},
                       "spec": {"containers": [{"name": render.CONTAINER, "image": IMAGE}],
                                "nodeSelector": {"kubernetes.io/hostname": GPU_NODES[0]}}})


def test_the_watches_list_again_after_a_compaction_and_reconnect_after_an_api_server_restart(
        k8s_testbed, k8s_namespace):
    admin = k8s_testbed.admin()
    rt = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace))
    try:
        state = rt.watch_state["Pod"]
        assert state["lists"] == 1 and state["watches"] == 1
        admin.create_namespaced_pod(k8s_namespace, managed_pod("w-0"))
        wait_for("w-0 running in the cache", lambda: rt.container_state("w-0") == "running")
        lists = state["lists"]
        k8s_testbed.compact(restart_apiserver=True)  # the watch's resourceVersion is gone: 410
        k8s_testbed.terminate(k8s_namespace, "w-0", 3)
        wait_for("w-0 terminated in the cache", lambda: rt.container_state("w-0") == "terminated")
        assert state["lists"] > lists, state  # listed again
        watches = state["watches"]
        k8s_testbed.restart_apiserver()
        admin.create_namespaced_pod(k8s_namespace, managed_pod("w-1"))
        wait_for("w-1 running in the cache", lambda: rt.container_state("w-1") == "running")
        assert state["watches"] > watches, state  # watching again
        assert rt.watch_state["Event"]["watches"] > 1
    finally:
        rt.shutdown()
