"""Kueue in the test bed (``scripts/k8s-testbed up --kueue``; docs/kubernetes.md, "Kueue in the
test bed"): on the real API server, scheduler and kwok Nodes, Kueue's queue objects become
Active, and a group of plain Pods (Kueue's Pod integration: labels
``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/pod-group-name``, annotation
``kueue.x-k8s.io/pod-group-total-count``) stays behind the scheduling gate
``kueue.x-k8s.io/admission`` until the whole group exists and fits the ClusterQueue's quota, then
is admitted at once and bound. What RLark itself does with Kueue is tested elsewhere; this module
proves the test bed's Kueue does what those tests will rely on."""

from __future__ import annotations

import pytest

from tests.k8s_testbed import (
    GPU_NODES,
    KUEUE_ADMISSION_GATE,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_QUEUE_LABEL,
    kueue_condition,
    make_local_queue,
    restricted,
    setup_timeout,
    wait_for,
)

pytestmark = pytest.mark.timeout(setup_timeout(kueue=True))

GROUP, VERSION = KUEUE_GROUP, KUEUE_VERSION
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GPU = "nvidia.com/gpu"
#: the ClusterQueue's quota: one kwok Node's GPUs, so two GPU Nodes could hold more than it admits
GPU_QUOTA, CPU_QUOTA = 4, 8
LOCAL_QUEUE = "team"


@pytest.fixture
def kueue_ns(k8s_kueue_testbed):
    """A namespace under Kueue's Pod integration, with a LocalQueue ``team`` of its own
    ClusterQueue (GPU_QUOTA GPUs, CPU_QUOTA CPUs of one ResourceFlavor), both Active."""
    tb = k8s_kueue_testbed
    ns = tb.kueue_namespace()
    api = tb.custom()
    flavor, cq = f"{ns}-flavor", f"{ns}-cq"
    try:
        api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor}})
        api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     "resourceGroups": [{"coveredResources": ["cpu", GPU], "flavors": [{
                         "name": flavor, "resources": [{"name": "cpu", "nominalQuota": CPU_QUOTA},
                                                       {"name": GPU, "nominalQuota": GPU_QUOTA}]}]}]}})
        make_local_queue(api, ns, LOCAL_QUEUE, cq)
        yield ns
    finally:
        tb.delete_namespace(ns)
        # the ClusterQueue keeps its finalizer until the namespace's Workloads are gone: deleted,
        # not waited for
        for plural, name in (("clusterqueues", cq), ("resourceflavors", flavor)):
            try:
                api.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except Exception as e:  # noqa: BLE001 - the object may never have been made
                if getattr(e, "status", None) != 404:
                    raise



def _pod(name: str, group: str, total: int, gpus: int) -> dict:
    """A Pod of a Kueue pod group in LocalQueue ``team``: one container asking for ``gpus`` GPUs
    and one CPU (only resources the ClusterQueue covers: Kueue refuses a Workload asking for one
    it does not)."""
    resources = {"cpu": "1", GPU: str(gpus)}
    return restricted({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {KUEUE_QUEUE_LABEL: LOCAL_QUEUE, GROUP_LABEL: group},
                     "annotations": {TOTAL_ANNOTATION: str(total)}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "example.invalid/worker:1",
                                 "resources": {"requests": resources, "limits": resources}}]},
    })


def _workload(tb, ns: str, pod: str) -> dict | None:
    """The Workload Kueue made for the group of ``pod`` (the one owned by that Pod)."""
    items = tb.custom().list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
    for wl in items:
        if any(o["kind"] == "Pod" and o["name"] == pod for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _gated(pod) -> bool:
    return any(g.name == KUEUE_ADMISSION_GATE for g in pod.spec.scheduling_gates or [])


def _admitted_and_bound(tb, ns: str, names: list[str]):
    """The group's Workload once it is Admitted and each of ``names`` is ungated and bound to a
    kwok Node (None before)."""
    wl = _workload(tb, ns, names[0])
    if wl is None or not kueue_condition(wl, "Admitted"):
        return None
    pods = [tb.admin().read_namespaced_pod(n, ns) for n in names]
    if any(_gated(p) or p.spec.node_name not in GPU_NODES for p in pods):
        return None
    return wl


def test_pod_group_is_gated_until_complete_then_admitted_and_bound(k8s_kueue_testbed, kueue_ns):
    tb, ns = k8s_kueue_testbed, kueue_ns
    core = tb.admin()
    # group "late": one of its two Pods, made before group "early" exists
    core.create_namespaced_pod(ns, _pod("late-0", "late", 2, gpus=1))
    for i in range(2):
        core.create_namespaced_pod(ns, _pod(f"early-{i}", "early", 2, gpus=1))
    early = wait_for("group early to be admitted and its Pods bound",
                     lambda: _admitted_and_bound(tb, ns, ["early-0", "early-1"]))
    assert early["spec"]["queueName"] == LOCAL_QUEUE
    # Kueue made early's Workload after late-0 was queued; late-0 alone is half a group: it has
    # quota left (2 GPUs) but is neither admitted nor let through to the scheduler
    alone = core.read_namespaced_pod("late-0", ns)
    assert _gated(alone) and alone.spec.node_name is None
    late_wl = _workload(tb, ns, "late-0")
    assert late_wl is None or not kueue_condition(late_wl, "Admitted")

    core.create_namespaced_pod(ns, _pod("late-1", "late", 2, gpus=1))
    late = wait_for("group late to be admitted once complete and its Pods bound",
                    lambda: _admitted_and_bound(tb, ns, ["late-0", "late-1"]))
    # one Workload per group, each with the whole group in it
    assert late["metadata"]["name"] != early["metadata"]["name"]
    assert sum(ps["count"] for ps in late["spec"]["podSets"]) == 2
    owners = {o["name"] for o in late["metadata"]["ownerReferences"]}
    assert owners == {"late-0", "late-1"}


def test_pod_group_larger_than_quota_stays_gated(k8s_kueue_testbed, kueue_ns):
    tb, ns = k8s_kueue_testbed, kueue_ns
    core = tb.admin()
    names = [f"big-{i}" for i in range(3)]
    for name in names:  # 3 x 2 GPUs > GPU_QUOTA, although the two GPU Nodes have 8
        core.create_namespaced_pod(ns, _pod(name, "big", 3, gpus=2))

    def judged():
        wl = _workload(tb, ns, names[0])
        return wl is not None and kueue_condition(wl, "QuotaReserved", "False") and wl

    wl = wait_for("Kueue to find no quota for group big", judged)
    assert not kueue_condition(wl, "Admitted")
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 3
    pods = [core.read_namespaced_pod(n, ns) for n in names]
    assert all(_gated(p) and p.spec.node_name is None for p in pods), \
        [(p.metadata.name, p.spec.scheduling_gates, p.spec.node_name) for p in pods]


def _pending_workloads(tb, path: str) -> dict:
    """GET ``path`` of Kueue's visibility API through the test bed's API server, as the admin."""
    import json

    resp = tb.api_client(admin=True).call_api(
        path, "GET", header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
        _preload_content=False, _return_http_data_only=True, _request_timeout=30)
    return json.loads(resp.data)


def test_the_api_server_serves_kueues_visibility_api_with_the_places_in_line(k8s_kueue_testbed, kueue_ns):
    """The aggregated API visibility.kueue.x-k8s.io reaches the local manager (APIService,
    Service without selector, EndpointSlice on this machine's address): two complete groups
    waiting behind an admitted one are listed in Kueue's order, places counted from 0."""
    tb, ns = k8s_kueue_testbed, kueue_ns
    core = tb.admin()
    for i in range(2):  # 2 x 2 GPUs of GPU_QUOTA 4: admitted
        core.create_namespaced_pod(ns, _pod(f"now-{i}", "now", 2, gpus=2))
    wait_for("group now to be admitted", lambda: _admitted_and_bound(tb, ns, ["now-0", "now-1"]))
    for group in ("next", "then"):  # each waits for the quota group now holds
        core.create_namespaced_pod(ns, _pod(f"{group}-0", group, 1, gpus=2))
        wait_for(f"group {group}'s Workload", lambda g=group: _workload(tb, ns, f"{g}-0"))
    # Kueue's order at equal priority: creation time (whole seconds), then uid
    # (pkg/cache/queue/cluster_queue.go, baseCompareFunc)
    made = [_workload(tb, ns, f"{g}-0")["metadata"] for g in ("next", "then")]
    names = [m["name"] for m in sorted(made, key=lambda m: (m["creationTimestamp"], m["uid"]))]
    path = (f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues/{LOCAL_QUEUE}"
            "/pendingworkloads")

    def listed():
        items = _pending_workloads(tb, path)["items"]
        return len(items) == 2 and items

    items = wait_for("both waiting groups in the LocalQueue's pending workloads", listed)
    assert [(i["metadata"]["name"], i["positionInLocalQueue"], i["positionInClusterQueue"])
            for i in items] == [(names[0], 0, 0), (names[1], 1, 1)]
    assert all(i["localQueueName"] == LOCAL_QUEUE for i in items)
    cq = _pending_workloads(tb, f"/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/{ns}-cq/pendingworkloads")
    assert [i["metadata"]["name"] for i in cq["items"]] == names
