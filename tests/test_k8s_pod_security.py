"""Worker Pods under Pod Security admission, on the test bed's real API server (issue 13, item 4).

The test bed's namespaces are made from deploy/kubernetes/project-namespace.example.yaml, which
labels them ``pod-security.kubernetes.io/enforce: restricted``; the API server runs its default
admission plugins, PodSecurity among them. A Run's Pods, created by RLark's runtime as RLark's
ServiceAccount, are admitted there; a Pod rendered with the settings RLark used before (root
allowed, capabilities kept), one with a hostPath volume and one running as root are refused by
admission, whoever sends them. The uid precondition RLark's deletes carry keeps a Pod made
under the same name from being deleted.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.k8s_testbed import PROJECT_TEMPLATE, setup_timeout

pytest.importorskip("kubernetes")

from kubernetes.client.rest import ApiException  # noqa: E402

from rlark.ranks import plan_workers  # noqa: E402
from rlark.runtimes.base import LaunchSpec, WorkerPlace  # noqa: E402
from rlark.runtimes.kubernetes import render  # noqa: E402
from rlark.runtimes.kubernetes.podpolicy import PodPolicy  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: psa}
spec:
  headRole: head
  runScript: python train.py
  roles:
    - {name: head, workers: 1, image: docker.io/rlinf/rlinf:0.3.0}
    - {name: pool, workers: 1, image: docker.io/rlinf/rlinf:0.3.0, kubernetes: {runAsUser: 4242}}
"""


def refusal(create) -> str:
    """The API server's message for a create it refused (403), else a failure."""
    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.status == 403, refused.value
    return json.loads(refused.value.body)["message"]


def test_a_runs_pods_are_admitted_under_restricted_and_pods_with_the_old_defaults_are_refused(
        k8s_testbed, k8s_namespace, tmp_path):
    admin = k8s_testbed.admin()
    labels = admin.read_namespace(k8s_namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for mode in ("warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    assert "pod-security.kubernetes.io/enforce: restricted" in PROJECT_TEMPLATE.read_text()
    job = load_job(JOB)[0]
    rt = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace), start=False)
    workers = plan_workers(job)
    rt.place(job, "r1", workers, None)
    for w in workers:  # as RLark's ServiceAccount, through the runtime: admitted
        rt.launch(LaunchSpec(job=job, run_uid="r1", worker=w, env={"RLINF_NODE_RANK": str(w.node_rank)},
                             log_path=str(tmp_path / f"{w.name}.log"), place=WorkerPlace()))
    rt.shutdown()
    stored = {p.metadata.name: p for p in admin.list_namespaced_pod(
        k8s_namespace, label_selector=f"{render.LABEL_RUN}=r1").items}
    assert sorted(stored) == ["psa-head-0", "psa-pool-0"]
    assert stored["psa-pool-0"].spec.security_context.run_as_user == 4242
    assert stored["psa-head-0"].spec.containers[0].security_context.capabilities.drop == ["ALL"]

    # the same Pod as RLark rendered it before: root allowed, the runtime's capabilities kept
    pod = render.render_run(job, "r2", render.RenderOptions(namespace=k8s_namespace))[-1]
    old = copy.deepcopy(pod)
    old["spec"]["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    old["spec"]["containers"][0]["securityContext"] = {"privileged": False, "allowPrivilegeEscalation": False}
    message = refusal(lambda: admin.create_namespaced_pod(k8s_namespace, old, dry_run="All"))
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "unrestricted capabilities" in message and "runAsNonRoot != true" in message
    # root (a server allowing it needs the namespace at "baseline") and hostPath ("privileged")
    root = render.render_run(load_job(JOB.replace("{runAsUser: 4242}", "{runAsRoot: true}"))[0], "r2",
                             render.RenderOptions(namespace=k8s_namespace, allow_root=True))[-1]
    assert "runAsNonRoot != true" in refusal(
        lambda: admin.create_namespaced_pod(k8s_namespace, root, dry_run="All"))
    mounted = JOB.replace("{runAsUser: 4242}", "{}, mounts: [{name: d, type: hostPath, source: /data, "
                                                "mountPath: /d}]")
    host = render.render_run(load_job(mounted)[0], "r2", render.RenderOptions(
        namespace=k8s_namespace, policy=PodPolicy.checked(host_path_prefixes=("/data",))))[-1]
    assert 'uses restricted volume type "hostPath"' in refusal(
        lambda: admin.create_namespaced_pod(k8s_namespace, host, dry_run="All"))
    # and what RLark renders now passes the same admission as the admin too
    pod["metadata"]["name"] = "psa-pool-dry-run"
    admin.create_namespaced_pod(k8s_namespace, pod, dry_run="All")


def test_a_delete_with_a_uid_precondition_spares_a_pod_made_since_under_the_name(k8s_testbed, k8s_namespace):
    """What the runtime's deletes send (KubeClient.delete(uid=...)): the object it saw, not
    whatever holds the name now."""
    job = load_job(JOB)[0]
    kube = KubeClient(k8s_testbed.core_v1(), k8s_namespace)
    pod = render.render_run(job, "r1", render.RenderOptions(namespace=k8s_namespace))[-1]
    pod["spec"]["schedulingGates"] = [{"name": "rlark.test/hold"}]
    first = kube.create(pod)["metadata"]["uid"]
    assert kube.delete("Pod", "psa-pool-0", grace_seconds=0, uid=first) is True
    second = kube.create(pod)["metadata"]["uid"]
    assert kube.delete("Pod", "psa-pool-0", grace_seconds=0, uid=first) is False  # 409: not that one
    kept = kube.get("Pod", "psa-pool-0")
    assert kept is not None and kept["metadata"]["uid"] == second
    assert not kept["metadata"].get("deletionTimestamp")
