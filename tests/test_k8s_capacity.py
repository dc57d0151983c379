"""Capacity preflight from the node inventory (pure functions over Node and Pod objects).

Node amounts are those of nodes people posted (``kubectl describe node`` in NVIDIA/k8s-device-plugin
#165: cpu 4, memory 16306144Ki, 1 GPU; #245 on AKS: cpu 5840m, memory 51573948Ki, 1 GPU) and of
an 8-GPU server.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from rlark.server import create_app
from rlark.findings import Severity
from rlark.runtimes.kubernetes.capacity import (
    check_capacity,
    format_amount,
    node_view,
    parse_nodes,
    pod_requests,
    tolerates,
)
from rlark.services.errors import Invalid
from rlark.services.jobs import JobService
from rlark.spec import Job, Toleration
from rlark.store import Store
from tests.access import admin_token, api_client


def node(name, cpu, memory, gpu=None, labels=None, taints=None, cordoned=False, ready=True, **extra):
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "885028912506"}
    if gpu is not None:
        alloc["nvidia.com/gpu"] = str(gpu)
    alloc.update(extra)
    spec = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


K8S_NODE1 = node("k8s-node1", "4", "16306144Ki", 1)
AKS = node("aks-gpunp-98036146-vmss000004", "5840m", "51573948Ki", 1,
           **{"attachable-volumes-azure-disk": "24"})
DGX = node("dgx-1", "224", "2063731580Ki", 8, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
           **{"rdma/hca": "1"})


#: a cordoned, NotReady, tainted CPU node (for the inventory views)
CPU7_CORDONED = node("cpu-7", "32", "128Gi", labels={"pool": "cpu"}, cordoned=True, ready=False,
                     taints=[{"key": "dedicated", "value": "rl", "effect": "NoSchedule"}])


def pod(node_name, requests=None, limits=None, phase="Running", init=None):
    c = {"name": "c", "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}
    spec = {"nodeName": node_name, "containers": [c]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"spec": spec, "status": {"phase": phase}}


def four_node_inventory():
    """K8S_NODE1, AKS, DGX (a Pod there requests 16 cpu, 64Gi, 3 GPUs) and CPU7_CORDONED."""
    return parse_nodes([K8S_NODE1, AKS, DGX, CPU7_CORDONED],
                       [pod("dgx-1", {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "3"})])


def job(*roles) -> Job:
    return Job.model_validate({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "cap"},
        "spec": {"headRole": roles[0]["name"], "runScript": "true",
                 "roles": [{"image": "docker.io/rlinf/rlinf:0.3.0", **r} for r in roles]},
    })


def codes(findings):
    return [(f.code, f.severity.value) for f in findings]


def test_parse_nodes_amounts_and_requests():
    nodes = parse_nodes([K8S_NODE1, AKS, DGX], [
        pod("dgx-1", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"}),
        pod("dgx-1", limits={"nvidia.com/gpu": "1"}),  # a limit alone is the request
        pod("dgx-1", {"cpu": "100"}, phase="Succeeded"),  # finished: not counted
        pod(None, {"cpu": "100"}),  # not bound: not counted
    ])
    aks = next(n for n in nodes if n.name.startswith("aks"))
    assert aks.allocatable == {"cpu": Decimal("5.84"), "memory": Decimal(51573948 * 1024),
                               "nvidia.com/gpu": Decimal(1)}
    dgx = next(n for n in nodes if n.name == "dgx-1")
    assert dgx.requested == {"cpu": Decimal(8), "memory": Decimal(64 * 1024**3), "nvidia.com/gpu": Decimal(3)}
    assert dgx.free["nvidia.com/gpu"] == 5 and dgx.free["rdma/hca"] == 1


def test_pod_requests_init_containers_and_limits():
    p = pod("n", {"cpu": "1"}, limits={"memory": "1Gi"}, init={"cpu": "4"})
    assert pod_requests(p) == {"cpu": Decimal(4), "memory": Decimal(1024**3)}


def test_refuses_more_gpus_than_any_node_has():
    findings = check_capacity(job({"name": "actor", "resources": {"gpu": 9}}),
                              parse_nodes([K8S_NODE1, AKS, DGX]))
    (f,) = findings
    assert (f.code, f.severity, f.path) == ("ExceedsNodeCapacity", Severity.error,
                                            "spec.roles[0].resources.gpu")
    assert f.message == ("spec.roles[0].resources.gpu: no node has 9 nvidia.com/gpu; the largest "
                         "allocatable is 8 (node dgx-1)")


def test_refuses_gpus_on_a_cluster_without_gpus():
    (f,) = check_capacity(job({"name": "a", "resources": {"gpu": 1}}),
                          parse_nodes([node("cpu-1", "8", "32Gi")]))
    assert f.message.endswith("the largest allocatable is 0 (no schedulable node advertises "
                              "nvidia.com/gpu; is the NVIDIA device plugin installed?)")


def test_refuses_memory_and_devices_beyond_any_node():
    j = job({"name": "a", "resources": {"memory": "64Gi", "devices": {"rdma/hca": 2}}})
    findings = check_capacity(j, parse_nodes([K8S_NODE1, AKS]))
    by_path = {f.path: f.message for f in findings}
    assert by_path["spec.roles[0].resources.memory"] == (
        "spec.roles[0].resources.memory: no node has 64Gi memory; the largest allocatable is "
        "49.2Gi (node aks-gpunp-98036146-vmss000004)")
    assert "no node has 2 rdma/hca; the largest allocatable is 0 (no schedulable node advertises " \
           "rdma/hca)" in by_path["spec.roles[0].resources.devices.rdma/hca"]


def test_cordoned_not_ready_selector_and_taints():
    nodes = parse_nodes([
        node("a", "8", "32Gi", cordoned=True),
        node("b", "8", "32Gi", ready=False),
        node("c", "8", "32Gi", labels={"pool": "cpu"}),
        node("d", "8", "32Gi", 1, labels={"pool": "gpu"},
             taints=[{"key": "dedicated", "value": "rl", "effect": "NoSchedule"}]),
    ])
    j = job({"name": "a", "nodeSelector": {"pool": "gpu"}})
    (f,) = check_capacity(j, nodes)
    assert f.code == "NoEligibleNode" and f.path == "spec.roles[0].nodeSelector"
    assert f.message == ("spec.roles[0] (a): no node may run its Workers (4 nodes: 1 cordoned, 1 not "
                         "Ready, 1 other labels than its nodeSelector, 1 taints it does not tolerate); "
                         "e.g. taint dedicated=rl:NoSchedule")
    tolerated = job({"name": "a", "nodeSelector": {"pool": "gpu"},
                     "kubernetes": {"tolerations": [{"key": "dedicated", "value": "rl"}]}})
    assert check_capacity(tolerated, nodes) == []


def test_a_gpu_taint_is_tolerated_by_workers_that_request_gpus():
    gpu_node = node("g", "32", "256Gi", 8, taints=[{"key": "nvidia.com/gpu", "value": "present",
                                                     "effect": "NoSchedule"}])
    assert check_capacity(job({"name": "a", "resources": {"gpu": 1}}), parse_nodes([gpu_node])) == []
    (f,) = check_capacity(job({"name": "a"}), parse_nodes([gpu_node]))
    assert f.code == "NoEligibleNode"


@pytest.mark.parametrize("tol,ok", [
    ({"operator": "Exists"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, False),
    ({"key": "k", "value": "v"}, True),
    ({"key": "k", "value": "w"}, False),
])
def test_toleration_matching(tol, ok):
    assert tolerates([Toleration.model_validate(tol)], {"key": "k", "value": "v", "effect": "NoExecute"}) is ok


def test_no_single_node_holds_a_whole_worker():
    nodes = parse_nodes([node("big-cpu", "128", "512Gi"), node("gpu", "8", "64Gi", 8)])
    (f,) = check_capacity(job({"name": "a", "resources": {"cpu": 64, "gpu": 8}}), nodes)
    assert f.code == "NoNodeFitsWorker"
    assert f.message == ("spec.roles[0].resources: no single node has 64 cpu, 8 nvidia.com/gpu "
                         "together (checked 2 eligible nodes)")


def test_warns_when_the_job_exceeds_free_capacity():
    nodes = parse_nodes([DGX], [pod("dgx-1", {"nvidia.com/gpu": "6"})])
    j = job({"name": "head", "resources": {"cpu": 4}},
            {"name": "actor", "workers": 3, "resources": {"gpu": 1}})
    (f,) = check_capacity(j, nodes, pending_timeout=300)
    assert (f.code, f.severity) == ("ExceedsFreeCapacity", Severity.warning)
    assert f.message == ("spec.roles: 3 of 4 Workers fit in the nodes' free capacity now; 1 of role "
                         "actor would wait as Pending; Workers still Pending after 300 s fail the Run "
                         "as Unschedulable")
    assert "own namespace only" in check_capacity(j, nodes, free_basis="namespace")[0].message
    assert check_capacity(job({"name": "a", "workers": 2, "resources": {"gpu": 1}}), nodes) == []


def test_64_workers_packed_over_many_nodes():
    nodes = parse_nodes([node(f"g{i}", "96", "1Ti", 8) for i in range(8)])
    fits = job({"name": "a", "workers": 64, "resources": {"cpu": 12, "memory": "128Gi", "gpu": 1}})
    assert check_capacity(fits, nodes) == []
    too_many = job({"name": "a", "workers": 65, "resources": {"gpu": 1}})
    assert codes(check_capacity(too_many, nodes)) == [("ExceedsFreeCapacity", "warning")]


def test_empty_inventory_is_a_warning():
    assert codes(check_capacity(job({"name": "a"}), [])) == [("CapacityUnknown", "warning")]


def test_format_amount():
    assert format_amount("memory", Decimal(16306144 * 1024)) == "15.6Gi"
    assert format_amount("memory", Decimal(64 * 1024**3)) == "64Gi"
    assert format_amount("cpu", Decimal("5.84")) == "5.84"
    assert format_amount("nvidia.com/gpu", Decimal(8)) == "8"


def test_node_view():
    (v,) = [node_view(n) for n in parse_nodes([AKS], [pod(AKS["metadata"]["name"], {"cpu": "840m"})])]
    # pods, ephemeral-storage, attachable volumes: not Worker resources, left out
    assert v["allocatable"] == {"cpu": 5.84, "memory": 51573948 * 1024, "nvidia.com/gpu": 1}
    assert v["free"]["cpu"] == 5 and v["requested"] == {"cpu": 0.84}
    assert v["ready"] and v["schedulable"] and v["taints"] == []


# --- JobService and the REST API -----------------------------------------------------------------

JOB_9_GPUS = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: big}
spec:
  headRole: head
  runScript: python train.py
  roles: [{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {gpu: 9}}]
"""


@pytest.fixture
def k8s_service(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    nodes = parse_nodes([K8S_NODE1, AKS, DGX])
    yield JobService(store, runtime="kubernetes", inventory=lambda: (nodes, "cluster", None),
                     pending_timeout=300)
    store.dispose()


def test_submit_is_refused_when_no_node_can_hold_a_worker(k8s_service):
    with pytest.raises(Invalid) as exc:
        k8s_service.create(JOB_9_GPUS)
    assert any(f.message.endswith("no node has 9 nvidia.com/gpu; the largest allocatable is 8 "
                                  "(node dgx-1)") for f in exc.value.findings)
    created = k8s_service.create(JOB_9_GPUS.replace("gpu: 9", "gpu: 8"))
    assert created["currentRun"]["runtime"] == "kubernetes"


def test_unreadable_inventory_is_a_warning_not_a_refusal(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        svc = JobService(store, runtime="kubernetes",
                         inventory=lambda: (None, "none", "list nodes: 403 forbidden"))
        _, findings = svc.preflight(JOB_9_GPUS)
    finally:
        store.dispose()
    (f,) = [f for f in findings if f.code == "CapacityUnknown"]
    assert f.severity == Severity.warning and "403 forbidden" in f.message


def test_nodes_endpoint_kubernetes_and_local(k8s_service, rlark_home):
    token = admin_token(k8s_service.store)
    api = api_client(create_app(k8s_service), token)
    data = api.get("/api/v1/nodes").json()
    assert data["runtime"] == "kubernetes" and data["error"] is None
    assert [n["name"] for n in data["items"]] == ["aks-gpunp-98036146-vmss000004", "dgx-1", "k8s-node1"]
    assert data["totals"]["nvidia.com/gpu"] == 10
    local = api_client(create_app(JobService(k8s_service.store, runtime="local",
                                             host={"cpu": 2, "memory": 24 * 1024**3, "gpu": 0})),
                       token)
    (item,) = local.get("/api/v1/nodes").json()["items"]
    assert item["allocatable"] == {"cpu": 2, "memory": 24 * 1024**3, "nvidia.com/gpu": 0}
