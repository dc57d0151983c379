"""The Kubernetes test bed itself (scripts/k8s-testbed, tests/k8s_testbed.py) against the real
control plane: kwok Nodes and Pods, the real scheduler, garbage collector, RBAC and etcd
compaction. Everything as RLark's own ServiceAccount (deploy/kubernetes/ RBAC) unless it says
admin. Waits poll a condition with a deadline, or use a bounded watch."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from tests import waits
from tests.k8s_testbed import (
    DEVICE_RESOURCE,
    GPU_NODE_DEVICES,
    GPU_NODE_GPUS,
    GPU_NODES,
    KWOK_NODE_IP,
    RESERVED_LABEL,
    RESERVED_NODE,
    RESERVED_TAINT,
    RESTRICTED_CONTAINER_SECURITY,
    RESTRICTED_POD_SECURITY,
    SCRIPT,
    setup_timeout,
)

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from kubernetes.watch.watch import iter_resp_lines  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

NS = "rlark"
WAIT = 120  # seconds: bound of every wait below (a busy 2-core CI machine once took over 60)


def wait_until(what: str, predicate, timeout: float = WAIT):
    """tests.waits.wait_until, bounded by this module's WAIT s by default."""
    return waits.wait_until(what, predicate, timeout)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod_body(pod_name: str, *, node_selector=None, tolerations=None, gpus: int = 0,
             owner: client.V1OwnerReference | None = None) -> client.V1Pod:
    resources = client.V1ResourceRequirements(
        requests={"cpu": "100m", "memory": "64Mi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
        limits={"nvidia.com/gpu": str(gpus)} if gpus else None,
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=pod_name, labels={"app": "testbed-smoke"},
                                     owner_references=[owner] if owner else None),
        spec=client.V1PodSpec(
            # namespace rlark enforces Pod Security "restricted" (deploy/kubernetes/namespace.yaml)
            containers=[client.V1Container(name="main", image="registry.invalid/rlark/smoke:1",
                                           resources=resources,
                                           security_context=RESTRICTED_CONTAINER_SECURITY)],
            security_context=RESTRICTED_POD_SECURITY,
            node_selector=node_selector,
            tolerations=tolerations,
            automount_service_account_token=False,
            termination_grace_period_seconds=5,
        ),
    )


def watch_pod_until_running(api: client.CoreV1Api, pod_name: str, resource_version: str,
                            wait: float = WAIT) -> client.V1Pod:
    """Watch one Pod from ``resource_version`` until it is Running (bounded by ``wait`` s)."""
    w = watch.Watch()
    deadline = time.monotonic() + wait
    seen = []
    while time.monotonic() < deadline:
        for event in w.stream(api.list_namespaced_pod, NS, field_selector=f"metadata.name={pod_name}",
                              resource_version=resource_version, timeout_seconds=max(1, int(deadline - time.monotonic()))):
            pod = event["object"]
            resource_version = pod.metadata.resource_version
            seen.append((event["type"], pod.status.phase))
            if pod.status.phase == "Running":
                w.stop()
                return pod
    pytest.fail(f"Pod {pod_name} not Running within {wait} s; events seen: {seen}")


def scheduling_failures(api: client.CoreV1Api, pod_name: str) -> list[str]:
    events = api.list_namespaced_event(NS, field_selector=f"involvedObject.name={pod_name},reason=FailedScheduling")
    return [e.message for e in events.items]


def delete_pod(api: client.CoreV1Api, pod_name: str) -> None:
    try:
        api.delete_namespaced_pod(pod_name, NS)
    except ApiException as e:
        if e.status != 404:
            raise


def gone(read) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


@pytest.fixture
def api(k8s_testbed) -> client.CoreV1Api:
    return k8s_testbed.core_v1()


def test_nodes_have_the_configured_capacity(api):
    nodes = {n.metadata.name: n for n in api.list_node().items}  # RLark's SA may read Nodes
    assert set(GPU_NODES) | {RESERVED_NODE} <= set(nodes)
    for node_name in GPU_NODES:
        node = nodes[node_name]
        assert node.status.capacity["nvidia.com/gpu"] == GPU_NODE_GPUS
        assert node.status.allocatable["nvidia.com/gpu"] == GPU_NODE_GPUS
        assert node.status.capacity[DEVICE_RESOURCE] == GPU_NODE_DEVICES
        assert node.status.capacity["cpu"] == "16"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.status.conditions
    reserved = nodes[RESERVED_NODE]
    assert reserved.metadata.labels[RESERVED_LABEL[0]] == RESERVED_LABEL[1]
    assert [(t.key, t.value, t.effect) for t in reserved.spec.taints] == [RESERVED_TAINT]
    assert reserved.status.capacity["nvidia.com/gpu"] == "1"


def test_a_kwok_node_that_was_not_ready_keeps_its_addresses(k8s_testbed):
    """kwok's node-initialize Stage runs again for a Node whose Ready is not True (after an API
    server restart that outlasted its heartbeats, say): the test bed's Nodes must come out of
    it with their InternalIP, or the API server can serve no Pod log from them ("no preferred
    addresses found"), and every later test that reads one fails (scripts/k8s-testbed,
    add_node)."""
    admin, node = k8s_testbed.admin(), GPU_NODES[1]

    def addresses() -> list[tuple[str, str]]:
        return [(a.type, a.address) for a in admin.read_node(node).status.addresses or []]

    def ready() -> str:
        return next(c.status for c in admin.read_node(node).status.conditions if c.type == "Ready")

    before = addresses()
    assert ("InternalIP", KWOK_NODE_IP) in before and ("Hostname", node) in before, before
    admin.patch_node_status(node, {"status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "a test"}]}})
    waits.wait_until(f"kwok to make {node} Ready again", lambda: ready() == "True", timeout=60)
    assert addresses() == before


def test_pod_on_a_kwok_node_becomes_running(api):
    pod_name = name("smoke-run")
    created = api.create_namespaced_pod(NS, pod_body(pod_name, node_selector={"kubernetes.io/hostname": GPU_NODES[1]}, gpus=2))
    try:
        pod = watch_pod_until_running(api, pod_name, created.metadata.resource_version)
        assert pod.spec.node_name == GPU_NODES[1]
        assert pod.status.container_statuses[0].state.running is not None
        assert pod.status.pod_ip  # kwok gives it an address from its CIDR
    finally:
        delete_pod(api, pod_name)
    wait_until(f"Pod {pod_name} to be deleted (kwok's pod-delete stage)",
               lambda: gone(lambda: api.read_namespaced_pod(pod_name, NS)))


def test_taints_and_tolerations_are_honoured(api):
    selector = {RESERVED_LABEL[0]: RESERVED_LABEL[1]}
    key, value, effect = RESERVED_TAINT
    tolerated, untolerated = name("smoke-tol"), name("smoke-notol")
    api.create_namespaced_pod(NS, pod_body(tolerated, node_selector=selector, tolerations=[
        client.V1Toleration(key=key, operator="Equal", value=value, effect=effect)]))
    api.create_namespaced_pod(NS, pod_body(untolerated, node_selector=selector))
    try:
        pod = wait_until(f"Pod {tolerated} Running on {RESERVED_NODE}",
                         lambda: (p := api.read_namespaced_pod(tolerated, NS)).status.phase == "Running" and p)
        assert pod.spec.node_name == RESERVED_NODE
        messages = wait_until(f"a FailedScheduling event for {untolerated}",
                              lambda: scheduling_failures(api, untolerated))
        assert any("untolerated taint" in m for m in messages), messages
        assert api.read_namespaced_pod(untolerated, NS).spec.node_name is None
    finally:
        delete_pod(api, tolerated)
        delete_pod(api, untolerated)


def test_more_gpus_than_any_node_fails_scheduling(api):
    pod_name = name("smoke-gpus")
    api.create_namespaced_pod(NS, pod_body(pod_name, gpus=int(GPU_NODE_GPUS) + 1))
    try:
        messages = wait_until(f"a FailedScheduling event for {pod_name} from kube-scheduler",
                              lambda: scheduling_failures(api, pod_name))
        assert any("Insufficient nvidia.com/gpu" in m for m in messages), messages
        # The scheduler sends the event and patches the Pod's status separately, in no set
        # order: wait for the condition too rather than read it once.
        cond = wait_until(f"Pod {pod_name}'s PodScheduled condition from kube-scheduler",
                          lambda: [c for c in api.read_namespaced_pod(pod_name, NS).status.conditions or []
                                   if c.type == "PodScheduled"])
        assert cond[0].status == "False" and cond[0].reason == "Unschedulable", cond
        assert api.read_namespaced_pod(pod_name, NS).status.phase == "Pending"
    finally:
        delete_pod(api, pod_name)


def test_owner_deletion_garbage_collects_dependents(api, k8s_testbed):
    admin = k8s_testbed.admin()  # RLark's ServiceAccount never deletes one ConfigMap (rbac.yaml)
    owner_name, pod_name = name("smoke-owner"), name("smoke-dependent")
    owner = admin.create_namespaced_config_map(NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=owner_name), data={"k": "v"}))
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=owner_name, uid=owner.metadata.uid)
    api.create_namespaced_pod(NS, pod_body(pod_name, node_selector={"kubernetes.io/hostname": GPU_NODES[0]}, owner=ref))
    try:
        wait_until(f"Pod {pod_name} Running", lambda: api.read_namespaced_pod(pod_name, NS).status.phase == "Running")
        admin.delete_namespaced_config_map(owner_name, NS)  # background propagation: the GC deletes the Pod
        wait_until(f"the garbage collector to delete Pod {pod_name} after its owner went",
                   lambda: gone(lambda: api.read_namespaced_pod(pod_name, NS)))
    finally:
        delete_pod(api, pod_name)


def test_rbac_forbids_what_deploy_kubernetes_does_not_grant(api, k8s_testbed):
    with pytest.raises(ApiException) as e:
        api.list_namespaced_secret(NS)
    assert e.value.status == 403
    assert "system:serviceaccount:rlark:rlark" in e.value.body
    with pytest.raises(ApiException) as e:  # cluster-wide Pods: list only (rbac-capacity.yaml)
        api.read_namespaced_pod("anything", "kube-system")
    assert e.value.status == 403
    assert api.list_pod_for_all_namespaces(limit=1) is not None
    # the same question to the API server's authorizer, as the admin
    out = k8s_testbed.kubectl("auth", "can-i", "create", "pods", "-n", NS, "--as", "system:serviceaccount:rlark:rlark")
    assert out.strip() == "yes"
    out = k8s_testbed.kubectl("auth", "can-i", "update", "pods", "-n", NS, "--as", "system:serviceaccount:rlark:rlark",
                              check=False)
    assert out.strip() == "no"


def test_compaction_makes_older_resource_versions_410_gone(api, k8s_testbed):
    """RLark's ServiceAccount lists and watches Pods (it may not patch them: the admin does)."""
    admin = k8s_testbed.core_v1(admin=True)
    pod_name = name("smoke-compact")
    old_rv = api.create_namespaced_pod(NS, pod_body(pod_name)).metadata.resource_version
    try:
        for i in range(3):  # move etcd's revision past old_rv
            admin.patch_namespaced_pod(pod_name, NS, {"metadata": {"labels": {"i": str(i)}}})
        # compaction, then a fresh API server (its watch cache no longer holds old_rv either)
        revision = k8s_testbed.compact(restart_apiserver=True)
        assert revision > int(old_rv)
        # a list at the compacted resourceVersion: etcd answers 410 (Expired)
        with pytest.raises(ApiException) as e:
            api.list_namespaced_pod(NS, resource_version=old_rv, resource_version_match="Exact")
        assert e.value.status == 410
        # the raw watch stream: its first event is an ERROR carrying Status 410 (Gone)
        resp = api.list_namespaced_pod(NS, watch=True, resource_version=old_rv, timeout_seconds=10,
                                       _preload_content=False)
        try:
            line = next(iter_resp_lines(resp))
        finally:
            resp.close()
            resp.release_conn()
        event = json.loads(line)
        assert event["type"] == "ERROR", event
        assert event["object"]["code"] == 410, event
        # the client library's watch raises it as an ApiException(410)
        with pytest.raises(ApiException) as e:
            for _ in watch.Watch().stream(api.list_namespaced_pod, NS, resource_version=old_rv, timeout_seconds=10):
                pass
        assert e.value.status == 410
        # a re-list gives a resourceVersion a watch can start from again
        current = api.list_namespaced_pod(NS).metadata.resource_version
        admin.patch_namespaced_pod(pod_name, NS, {"metadata": {"labels": {"after": "compaction"}}})
        w = watch.Watch()
        seen = []
        for ev in w.stream(api.list_namespaced_pod, NS, resource_version=current,
                           field_selector=f"metadata.name={pod_name}", timeout_seconds=15):
            seen.append((ev["type"], (ev["object"].metadata.labels or {}).get("after")))
            if seen[-1] == ("MODIFIED", "compaction"):
                w.stop()
        assert ("MODIFIED", "compaction") in seen, seen
    finally:
        delete_pod(api, pod_name)


def test_pod_logs_stream_through_the_api_server_from_kwok(api, k8s_testbed, tmp_path):
    """kwok serves a Pod's log from a file (a kwok Logs object, made by the admin); RLark's SA
    reads it through the API server's pods/log, which proxies to kwok's kubelet endpoint."""
    pod_name = name("smoke-logs")
    log_file = tmp_path / "main.log"  # CRI log format, as a kubelet would have written it
    log_file.write_text("2026-01-01T00:00:00.000000000Z stdout F hello from kwok\n"
                        "2026-01-01T00:00:01.000000000Z stderr F second line\n")
    custom = client.CustomObjectsApi(k8s_testbed.api_client(admin=True))
    custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", NS, "logs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod_name},
        "spec": {"logs": [{"containers": ["main"], "logsFile": str(log_file), "follow": False}]},
    })
    created = api.create_namespaced_pod(NS, pod_body(pod_name, node_selector={"kubernetes.io/hostname": GPU_NODES[0]}))
    try:
        watch_pod_until_running(api, pod_name, created.metadata.resource_version)
        text = wait_until(f"the log of Pod {pod_name} through the API server",
                          lambda: _read_log(api, pod_name))
        assert text.splitlines() == ["hello from kwok", "second line"]
    finally:
        delete_pod(api, pod_name)
        custom.delete_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", NS, "logs", pod_name)


def _read_log(api: client.CoreV1Api, pod_name: str) -> str | None:
    try:
        return api.read_namespaced_pod_log(pod_name, NS, container="main") or None
    except ApiException as e:
        if e.status in (400, 404, 500, 502):  # kwok has not picked up the Logs object yet
            return None
        raise


def test_api_server_restart_keeps_the_data(api, k8s_testbed):
    admin = k8s_testbed.admin()  # RLark's ServiceAccount never deletes one ConfigMap (rbac.yaml)
    cm_name = name("smoke-restart")
    api.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=cm_name),
                                                             data={"k": "v"}))
    try:
        k8s_testbed.stop_apiserver()
        with pytest.raises(Exception):  # noqa: B017 - connection refused, whatever the library calls it
            api.read_namespaced_config_map(cm_name, NS, _request_timeout=5)
        k8s_testbed.start_apiserver()
        assert api.read_namespaced_config_map(cm_name, NS).data == {"k": "v"}
        k8s_testbed.restart_apiserver()
        assert api.read_namespaced_config_map(cm_name, NS).data == {"k": "v"}
        # the rest of the control plane reconnects: a new Pod is scheduled and run by kwok
        pod_name = name("smoke-after-restart")
        created = api.create_namespaced_pod(NS, pod_body(pod_name))
        try:
            # kube-scheduler's and kwok's informers re-list after a lost watch with client-go's
            # backoff (up to 30 s per try), twice here: a longer bound than one Pod start needs
            pod = watch_pod_until_running(api, pod_name, created.metadata.resource_version, wait=3 * WAIT)
            assert pod.spec.node_name
        finally:
            delete_pod(api, pod_name)
    finally:
        admin.delete_namespaced_config_map(cm_name, NS)


@pytest.mark.parametrize("value", ["0", "fast", "-5"])
def test_a_scheduler_qps_that_is_not_a_whole_number_above_0_is_refused_before_anything_starts(value, tmp_path):
    """``up --scheduler-qps`` (the scheduler's client limit, for bench/k8s_scale.py) refuses a
    value it cannot pass to ``--kube-api-qps`` before it starts a component (the directory stays
    empty)."""
    out = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(tmp_path / "tb"), "--scheduler-qps", value],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "--scheduler-qps must be a whole number above 0" in out.stderr + out.stdout
    assert not (tmp_path / "tb").exists() or not any((tmp_path / "tb").iterdir())
