"""objectStorage mounts in copy mode on Kubernetes, without a cluster (issue 22, item 2): what
the Pods are made of (an init container copies in, the keeper copies out, the credentials only
as secretKeyRef), what preflight and the Secret policy say, how the keeper takes a Pod's
settings and the init container's results, and what a failed copy in makes of the Pod."""

from __future__ import annotations

import json

import pytest

from rlark.bootstrap import objects as keeper_objects
from rlark.bootstrap.keeper import Config
from rlark.bootstrap.relay import Channel
from rlark.controller.lifecycle import check_event, parse_lifecycle
from rlark.findings import has_errors
from rlark.preflight.job import check_job
from rlark.runtimes.kubernetes import copymounts, render
from rlark.runtimes.kubernetes.podpolicy import PodPolicy, SecretInfo, check_secret_refs
from rlark.runtimes.kubernetes.preflight import check_spec_for_kubernetes
from rlark.runtimes.kubernetes.status import interpret
from rlark.spec import parse_job
from rlark.status import Reason

ENDPOINT = "http://10.0.0.1:8333"
#: a server whose policy allows the CSI driver and StorageClass these Jobs name
POLICY = PodPolicy.checked(csi_drivers=("s3.csi.aws.com",), storage_classes=("s3",))
KEYS = {("s3", "accessKeyId"): "AKIA-VALUE-1", ("s3", "secretAccessKey"): "SECRET-VALUE-2"}


def job(mounts: list[dict], workers: int = 2):
    data = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "cp"},
            "spec": {"headRole": "head", "runScript": "true",
                     "roles": [{"name": "head", "image": "rlark/worker:1", "workers": workers,
                                "resources": {"cpu": 1, "memory": "1Gi"}, "mounts": mounts}]}}
    j, findings = parse_job(data)
    assert j is not None, findings
    return j


def data_mount(**extra) -> dict:
    return {"name": "data", "type": "objectStorage", "source": "s3://datasets/gsm8k",
            "mountPath": "/data", "readOnly": True,
            "objectStorage": {"endpoint": ENDPOINT, "secret": "s3"}, **extra}


def ckpt_mount(**extra) -> dict:
    return {"name": "ckpt", "type": "objectStorage", "source": "s3://runs/ppo/",
            "mountPath": "/ckpt", "objectStorage": {"mode": "copy", "endpoint": ENDPOINT,
                                                    "secret": "s3"}, **extra}


def pods(j, managed=KEYS):
    """The Run's Pods as the runtime renders them; ``managed``: the keys RLark holds (the
    Run's Secret has them)."""
    opts = render.RenderOptions(namespace="team", policy=POLICY)
    return [render.render_pod(j, w, render.worker_env(j, w, "r1", opts), "r1", opts,
                              managed=managed.keys()) for w in render.plan_workers(j)]


def test_every_pod_copies_in_with_an_init_container_and_its_keeper_copies_out():
    j = job([data_mount(), ckpt_mount()])
    assert not has_errors(check_job(j) + check_spec_for_kubernetes(j, PodPolicy()))
    for pod in pods(j):
        spec = pod["spec"]
        (init,) = spec["initContainers"]
        (worker,) = spec["containers"]
        assert init["name"] == copymounts.INIT_CONTAINER == "rlark-copy-in"
        assert init["image"] == worker["image"] == "rlark/worker:1"
        assert init["command"] == ["python", "-I", "/rlark/rlark-bootstrap.pyz", "objcopy-in"]
        # the same requests as the Worker: the Pod schedules as it would without the copy
        assert init["resources"] == worker["resources"]
        assert init["securityContext"] == worker["securityContext"]
        assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["m0-data"] == {"name": "m0-data", "emptyDir": {}}
        assert vols["m1-ckpt"] == {"name": "m1-ckpt", "emptyDir": {}}
        assert vols["rlark-objects"]["emptyDir"] == {"sizeLimit": "64Mi"}
        at = {m["name"]: m for m in init["volumeMounts"]}
        assert (at["m0-data"]["mountPath"], at["m1-ckpt"]["mountPath"]) == ("/data", "/ckpt")
        assert not at["rlark-objects"].get("readOnly")
        seen = {m["name"]: m for m in worker["volumeMounts"]}
        # the read-only mount is read-only to the Worker; the state is never the Worker's to write
        assert seen["m0-data"]["readOnly"] is True and seen["m1-ckpt"]["readOnly"] is False
        assert seen["rlark-objects"] == {"name": "rlark-objects", "mountPath": "/rlark-objects",
                                         "readOnly": True}
        plan = json.loads(next(e["value"] for e in init["env"] if e["name"] == "RLARK_OBJECT_STORAGE"))
        assert [(m["name"], m["bucket"], m["prefix"], m["path"], m["read_only"], m["index"],
                 m["requested"], "why" in m) for m in plan] == [
            ("data", "datasets", "gsm8k", "/data", True, 0, "auto", True),
            ("ckpt", "runs", "ppo", "/ckpt", False, 1, "copy", False)]
        assert "no CSI volume" in plan[0]["why"]
        keeper = {e["name"]: e for e in worker["env"]}
        assert json.loads(keeper["RLARK_KEEPER_OBJECT_STORAGE"]["value"]) == plan
        assert keeper["RLARK_KEEPER_OBJECTS_STATE"]["value"] == "/rlark-objects"


def test_the_keys_are_secret_references_and_the_worker_holds_only_the_writable_mounts():
    j = job([data_mount(), ckpt_mount()])
    for pod in pods(j):
        text = json.dumps(pod)
        assert "AKIA-VALUE-1" not in text and "SECRET-VALUE-2" not in text
        (init,) = pod["spec"]["initContainers"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in init["env"] if "valueFrom" in e}
        # every copied mount's keys for the copy in, from the Run's own Secret
        assert refs == {
            "RLARK_S3_0_ACCESS_KEY_ID": {"name": "cp-run-r1-env", "key": "s3.accessKeyId"},
            "RLARK_S3_0_SECRET_ACCESS_KEY": {"name": "cp-run-r1-env", "key": "s3.secretAccessKey"},
            "RLARK_S3_1_ACCESS_KEY_ID": {"name": "cp-run-r1-env", "key": "s3.accessKeyId"},
            "RLARK_S3_1_SECRET_ACCESS_KEY": {"name": "cp-run-r1-env", "key": "s3.secretAccessKey"}}
        worker = pod["spec"]["containers"][0]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in worker["env"] if "valueFrom" in e}
        # the keeper copies out the writable mount only: the read-only one's keys stay out
        assert {k: v for k, v in refs.items() if k.startswith("RLARK_KEEPER_S3_")} == {
            "RLARK_KEEPER_S3_1_ACCESS_KEY_ID": {"name": "cp-run-r1-env", "key": "s3.accessKeyId"},
            "RLARK_KEEPER_S3_1_SECRET_ACCESS_KEY": {"name": "cp-run-r1-env", "key": "s3.secretAccessKey"}}
    # a Kubernetes Secret the RLark project does not manage is named as written
    (pod, _) = pods(j, managed={})
    init = pod["spec"]["initContainers"][0]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in init["env"] if "valueFrom" in e} == {"s3"}


def test_a_role_without_copy_mode_mounts_has_no_init_container():
    j = job([{"name": "out", "type": "objectStorage", "source": "s3://runs/x", "mountPath": "/out",
              "kubernetes": {"csiDriver": "s3.csi.aws.com"}}], workers=1)
    (pod,) = pods(j)
    assert "initContainers" not in pod["spec"]
    assert not any(e["name"].startswith("RLARK_KEEPER_") for e in pod["spec"]["containers"][0]["env"])


@pytest.mark.parametrize("mount, code", [
    ({"objectStorage": {"mode": "fuse"}}, "ObjectStorageNeedsDriver"),
    ({"objectStorage": {"mode": "copy"}, "kubernetes": {"csiDriver": "s3.csi.aws.com"}},
     "ObjectStorageModeConflict"),
    ({"kubernetes": {"csiDriver": "s3.csi.aws.com", "storageClass": "s3"}}, "ObjectStorageNeedsDriver"),
    ({}, None),
    ({"objectStorage": {"mode": "copy"}}, None),
    ({"objectStorage": {"mode": "fuse"}, "kubernetes": {"storageClass": "s3"}}, None),
    ({"source": "gs://runs/x"}, "InvalidMountSource"),
    ({"source": "gs://runs/x", "kubernetes": {"storageClass": "s3"}}, None),
])
def test_preflight_says_which_mode_needs_what(mount, code):
    j = job([{"name": "m", "type": "objectStorage", "source": "s3://runs/x", "mountPath": "/m",
              **mount}], workers=1)
    found = [f for f in check_spec_for_kubernetes(j, POLICY) if f.severity.value == "error"]
    assert [f.code for f in found] == ([code] if code else [])
    if code:
        field = "source" if code == "InvalidMountSource" else "kubernetes"
        assert found[0].path == f"spec.roles[0].mounts[0].{field}" and found[0].hint


def test_a_kubernetes_secret_for_a_mount_must_be_allowed_for_the_project():
    j = job([ckpt_mount()], workers=1)
    lookups = []

    def lookup(name):
        lookups.append(name)
        return SecretInfo(labels={}, keys=frozenset({"accessKeyId", "secretAccessKey"}))

    (f,) = check_secret_refs(j, [], "team-a", "team", lookup)
    assert (f.code, f.path) == ("SecretNotAllowed", "spec.roles[0].mounts[0].objectStorage.secret")
    assert "mount 'ckpt'" in f.message and "kubectl label secret s3" in f.hint
    assert lookups == ["s3"]
    # RLark's own secret: nothing to look up
    assert check_secret_refs(j, KEYS.keys(), "team-a", "team", lookup) == [] and lookups == ["s3"]


def test_the_keeper_of_a_pod_takes_the_keys_out_of_what_the_workload_gets(tmp_path):
    plan = copymounts.copy_entries(job([data_mount(), ckpt_mount()]).spec.roles[0])
    own = {"RLARK_KEEPER_OBJECT_STORAGE": json.dumps(plan), "RLARK_KEEPER_OBJECTS_STATE": "/rlark-objects",
           "RLARK_KEEPER_S3_1_ACCESS_KEY_ID": "AK", "RLARK_KEEPER_S3_1_SECRET_ACCESS_KEY": "SK",
           "RLARK_KEEPER_S3_7_ACCESS_KEY_ID": "stray", "RLARK_RUN_SCRIPT": "true", "PATH": "/bin"}
    cfg = Config(own, None, str(tmp_path / "b.pyz"))
    assert cfg.objects_state == "/rlark-objects"
    assert [(m["name"], m.get("access_key_id"), m.get("secret_access_key")) for m in cfg.objects] \
        == [("data", None, None), ("ckpt", "AK", "SK")]
    # a Pod's keeper and workload share one environment: nothing of the copy is left in it
    assert not any(k.startswith(("RLARK_KEEPER_S3_", "RLARK_KEEPER_OBJECT")) for k in cfg.env)
    assert "AK" not in cfg.env.values() and "SK" not in cfg.env.values()


def emitted() -> tuple[list[dict], Channel]:
    lines: list[dict] = []

    def write(data: bytes) -> None:
        lines.extend(parse_lifecycle(data, 0)[0])
    return lines, Channel(write)


def test_the_keeper_says_what_the_init_container_copied_in_and_keeps_its_manifest(tmp_path):
    plan = copymounts.copy_entries(job([data_mount(), ckpt_mount()]).spec.roles[0])
    (tmp_path / "mount-0.json").write_text(json.dumps(
        {"ok": True, "files": 3, "bytes": 4096, "skipped": 0, "seconds": 1.25,
         "manifest": {"a.parquet": [4000, 1], "b": [96, 2], "c": [0, 3]}}))
    (tmp_path / "mount-1.json").write_text(json.dumps(
        {"ok": True, "files": 1, "bytes": 7, "seconds": 0.5, "manifest": {"step-1/x": [7, 9]}}))
    lines, chan = emitted()
    mounts = keeper_objects.ObjectMounts(plan, "python", "b.pyz", {}, chan, state_dir=str(tmp_path))
    assert mounts.copy_in(lambda: False) is None
    said = [(e["name"], e["direction"], e["files"], e["bytes"], e["seconds"]) for e in lines]
    assert said == [("data", "in", 3, 4096, 1.25), ("ckpt", "in", 1, 7, 0.5)]
    assert all(check_event(e) is not None for e in lines)
    assert mounts.manifests["ckpt"] == {"step-1/x": [7, 9]} and mounts.writable()


def test_a_missing_copy_in_result_fails_the_worker_instead_of_running_without_its_data(tmp_path):
    plan = copymounts.copy_entries(job([data_mount()]).spec.roles[0])
    lines, chan = emitted()
    mounts = keeper_objects.ObjectMounts(plan, "python", "b.pyz", {}, chan, state_dir=str(tmp_path))
    why = mounts.copy_in(lambda: False)
    assert why is not None and "mount 'data'" in why and "left no result" in why and lines == []


def failed_pod(message: str, code: int = 1) -> dict:
    return {"metadata": {"name": "cp-head-0", "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"nodeName": "real-node", "containers": [{"name": "worker", "image": "rlark/worker:1"}]},
            "status": {"phase": "Failed", "hostIP": "10.0.0.2", "initContainerStatuses": [
                {"name": "rlark-copy-in", "state": {"terminated": {
                    "exitCode": code, "reason": "Error", "message": message}}}],
                "containerStatuses": [{"name": "worker", "state": {"waiting": {
                    "reason": "PodInitializing"}}}]}}


def test_a_failed_copy_in_is_mount_failed_with_the_s3_code_and_the_mount():
    last = json.dumps({"mount": "data", "source": "s3://datasets/gsm8k", "ok": False,
                       "code": "InvalidAccessKeyId",
                       "message": "The AWS Access Key Id you provided does not exist in our records."})
    st = interpret(failed_pod('{"mount": "other", "ok": true}\n' + last), now=1e10)
    assert not st.alive and st.failure is not None
    reason, message = st.failure
    assert reason == Reason.MountFailed
    assert message.startswith("Pod cp-head-0: mount 'data' (s3://datasets/gsm8k): copy in failed: "
                              "InvalidAccessKeyId: The AWS Access Key Id")
    # a copier that died without its line: the exit code and the log's end
    st = interpret(failed_pod("Traceback ...\nMemoryError", 137), now=1e10)
    assert st.failure[0] == Reason.MountFailed and "exit code 137" in st.failure[1] \
        and "MemoryError" in st.failure[1]


def test_the_image_pull_of_the_init_container_is_the_pods():
    pod = failed_pod("")
    pod["status"] = {"phase": "Pending", "hostIP": "10.0.0.2", "initContainerStatuses": [
        {"name": "rlark-copy-in", "state": {"waiting": {"reason": "ErrImageNeverPull",
                                                        "message": "image not present"}}}],
        "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "PodInitializing"}}}]}
    st = interpret(pod, now=1e10)
    assert st.alive and st.failure is not None and st.failure[0] == Reason.ImagePull


def test_a_pod_deleted_during_its_copy_in_is_lost_not_mount_failed():
    pod = failed_pod("", 143)
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:05Z"
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    pod["status"]["phase"] = "Pending"
    st = interpret(pod, now=1e10)
    assert st.failure is not None and st.failure[0] == Reason.WorkerLost, st.failure
    assert "being deleted (not by RLark)" in st.failure[1]
    assert interpret(pod, now=1e10, deleted_by_rlark=True).failure is None
