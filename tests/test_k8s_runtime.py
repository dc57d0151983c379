"""KubernetesRuntime above the API layer: what it creates, in which order, with which owner; how
it takes over names an earlier Run left; what stop, kill and end_run delete.

The controller and runtime are the real ones; the API layer is :class:`tests.k8s_fake.FakeKube`
(no API server can run here). Pod states come from saved real Pod objects (tests/data/k8s).
"""

from __future__ import annotations

import copy
import logging
import time

import pytest
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.runtimes.kubernetes import render
from rlark.runtimes.kubernetes.client import KubeError
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime
from rlark.services.jobs import JobService
from rlark.store import RunRow, Store
from tests.k8s_fake import FakeKube
from tests.test_k8s_status import load

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: ppo}
spec:
  headRole: head
  terminationGracePeriodSeconds: 5
  runScript: python train.py
  roles:
    - {name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {gpu: 1}}
    - name: pool
      workers: 2
      image: docker.io/rlinf/rlinf:0.3.0
      mounts:
        - {name: models, type: objectStorage, source: "s3://models/llama", mountPath: /models,
           readOnly: true, kubernetes: {storageClass: csi-s3, size: 100Gi}}
"""


@pytest.fixture
def k8s(rlark_home, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    kube = FakeKube("rl")
    rt = KubernetesRuntime(kube=kube, start=False)  # type: ignore[arg-type]
    ctl = Controller(store, rt)
    ctl.reconcile_once()
    yield store, kube, rt, ctl, JobService(store, runtime="kubernetes")
    rt.shutdown()
    store.dispose()


def run_uid(store: Store, number: int = 1) -> str:
    with store.session() as s:
        return s.scalar(select(RunRow.uid).where(RunRow.number == number))


def creates(kube: FakeKube) -> list[tuple[str, str]]:
    return [(kind, name) for verb, kind, name in kube.calls if verb == "create"]


def owner_uid(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0]["uid"] if refs else None


def test_a_run_creates_its_configmap_first_then_owned_objects_then_pods_by_rank(k8s):
    store, kube, rt, ctl, svc = k8s
    svc.create(JOB)
    ctl.reconcile_once()
    uid = run_uid(store)
    cm = f"ppo-run-{uid}"
    assert creates(kube) == [("ConfigMap", cm), ("Service", "ppo-head"),
                             ("PersistentVolumeClaim", f"ppo-pool-models-{uid}"),
                             ("Pod", "ppo-head-0"), ("Pod", "ppo-pool-0"), ("Pod", "ppo-pool-1")]
    owner = kube.obj("ConfigMap", cm)["metadata"]["uid"]
    assert owner_uid(kube.obj("ConfigMap", cm)) is None
    for kind, name in creates(kube)[1:]:
        obj = kube.obj(kind, name)
        assert owner_uid(obj) == owner, (kind, name)
        assert obj["metadata"]["labels"][render.LABEL_RUN] == uid
    ranks = {name: kube.obj("Pod", name)["metadata"]["labels"][render.LABEL_RANK]
             for name in kube.names("Pod")}
    assert ranks == {"ppo-head-0": "0", "ppo-pool-0": "1", "ppo-pool-1": "2"}
    env = {e["name"]: e["value"] for e in kube.obj("Pod", "ppo-pool-1")["spec"]["containers"][0]["env"]}
    assert env["RLINF_NODE_RANK"] == "2" and env["RLARK_RUN_ID"] == uid
    # deleting the owner removes the whole Run (what `kubectl delete configmap` does)
    kube.delete("ConfigMap", cm)
    assert not any(kube.names(k) for k in ("Pod", "Service", "PersistentVolumeClaim"))


def test_stop_deletes_the_pods_then_end_run_deletes_every_object_of_the_run(k8s):
    store, kube, rt, ctl, svc = k8s
    other = kube.put({"kind": "Pod", "metadata": {"name": "someone-else", "labels": {
        render.LABEL_MANAGED_BY: render.MANAGED_BY, render.LABEL_RUN: "other"}}})
    svc.create(JOB)
    ctl.reconcile_once()
    uid = run_uid(store)
    svc.stop("ppo")
    kube.calls.clear()
    ctl.reconcile_once()
    assert sorted(name for verb, kind, name in kube.calls if verb == "delete" and kind == "Pod") == [
        "ppo-head-0", "ppo-pool-0", "ppo-pool-1"]
    # the kubelet ends the containers; the watch says the Pods are gone
    for name in ("ppo-head-0", "ppo-pool-0", "ppo-pool-1"):
        rt.apply_watch_event("Pod", "DELETED", {"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while svc.get("ppo")["phase"] != "Stopped":
        assert time.monotonic() < deadline, svc.get("ppo")
        ctl.reconcile_once()
        time.sleep(0.1)
    ctl.reconcile_once()
    selector = f"{render.LABEL_RUN}={uid}"
    assert [(kind, sel) for verb, kind, sel in kube.calls if verb == "delete_collection"] == [
        ("Pod", selector), ("Service", selector), ("PersistentVolumeClaim", selector),
        ("ConfigMap", selector)]
    assert [name for _, name in kube.objects] == ["someone-else"]  # another Run's Pod stays
    assert kube.obj("Pod", "someone-else") == other


def test_a_new_run_takes_over_names_its_previous_run_left(k8s):
    store, kube, rt, ctl, svc = k8s
    left = {"metadata": {"labels": {render.LABEL_MANAGED_BY: render.MANAGED_BY,
                                    render.LABEL_RUN: "oldrun"}}}
    kube.put({"kind": "Service", "metadata": {"name": "ppo-head", **left["metadata"]}})
    kube.put({"kind": "Pod", "metadata": {"name": "ppo-pool-0", **left["metadata"]}})
    svc.create(JOB)
    ctl.reconcile_once()
    uid = run_uid(store)
    deleted = [(kind, name) for verb, kind, name in kube.calls if verb == "delete"]
    assert deleted == [("Service", "ppo-head"), ("Pod", "ppo-pool-0")]
    assert kube.obj("Service", "ppo-head")["metadata"]["labels"][render.LABEL_RUN] == uid
    assert kube.obj("Pod", "ppo-pool-0")["metadata"]["labels"][render.LABEL_RUN] == uid


def test_a_name_taken_by_something_rlark_did_not_create_fails_the_launch_and_is_kept(k8s):
    store, kube, rt, ctl, svc = k8s
    theirs = kube.put({"kind": "Pod", "metadata": {"name": "ppo-pool-1", "labels": {"app": "db"}}})
    svc.create(JOB)
    ctl.reconcile_once()
    assert kube.obj("Pod", "ppo-pool-1") == theirs  # never deleted
    assert ("delete", "Pod", "ppo-pool-1") not in kube.calls
    deadline = time.monotonic() + 30
    while svc.get("ppo")["phase"] not in ("Failed",):
        assert time.monotonic() < deadline, svc.get("ppo")
        ctl.reconcile_once()
        time.sleep(0.1)
    job = svc.get("ppo")
    assert job["reason"] == "LaunchFailed"
    assert "Pod ppo-pool-1 already exists in namespace rl and was not created by RLark" in job["message"]
    assert kube.obj("Pod", "ppo-pool-1") == theirs


def test_relaunch_after_a_server_restart_reuses_what_the_run_already_has(k8s, tmp_path):
    """A server that died mid-launch: the ConfigMap and a Pod of this Run exist; a new runtime
    (empty caches) finds them by name and keeps them instead of failing or deleting."""
    store, kube, rt, ctl, svc = k8s
    svc.create(JOB)
    ctl.reconcile_once()
    uid = run_uid(store)
    job = svc.validate(JOB)[0]
    fresh = KubernetesRuntime(kube=kube, start=False)  # type: ignore[arg-type]
    kube.calls.clear()
    from rlark.ranks import plan_workers
    from rlark.runtimes.base import LaunchSpec, WorkerPlace

    worker = plan_workers(job)[1]
    fresh.launch(LaunchSpec(job=job, run_uid=uid, worker=worker, env={"RLINF_NODE_RANK": "1"},
                            log_path=str(tmp_path / "pool-0.log"), place=WorkerPlace()))
    fresh.shutdown()
    assert ("delete", "Pod", "ppo-pool-0") not in kube.calls
    assert [c for c in kube.calls if c[0] == "create"][0] == ("create", "ConfigMap", f"ppo-run-{uid}")
    assert all(owner_uid(kube.obj(k, n)) == kube.obj("ConfigMap", f"ppo-run-{uid}")["metadata"]["uid"]
               for k, n in (("Pod", "ppo-pool-0"), ("Service", "ppo-head")))


def test_kill_deletes_at_once_and_the_pod_state_names_it_as_rlarks_doing(k8s):
    store, kube, rt, ctl, svc = k8s
    svc.create(JOB)
    ctl.reconcile_once()
    from rlark.runtimes.base import WorkerRef

    ref = WorkerRef(name="ppo-pool-0", handle="rl/ppo-pool-0")
    pod = copy.deepcopy(load("pod-succeeded-exit0"))
    pod["metadata"]["name"] = "ppo-pool-0"
    rt.apply_watch_event("Pod", "ADDED", pod)
    rt.kill(ref)
    assert not [n for n in kube.names("Pod") if n == "ppo-pool-0"]
    rt.apply_watch_event("Pod", "DELETED", pod)
    assert rt.pod_status(ref).failure is None  # deleted by RLark: not a lost Worker


def test_an_api_error_on_launch_names_the_object_and_the_status(k8s):
    store, kube, rt, ctl, svc = k8s

    def forbidden(obj):
        raise KubeError(f"create {obj['kind']} {obj['metadata']['name']}: 403 configmaps is "
                        "forbidden: User \"system:serviceaccount:rl:rlark\" cannot create resource", 403)

    kube.create = forbidden  # type: ignore[method-assign]
    svc.create(JOB)
    deadline = time.monotonic() + 30
    while svc.get("ppo")["phase"] != "Failed":
        assert time.monotonic() < deadline, svc.get("ppo")
        ctl.reconcile_once()
        time.sleep(0.1)
    job = svc.get("ppo")
    assert job["reason"] == "LaunchFailed" and "403 configmaps is forbidden" in job["message"]
    assert kube.objects == {}
