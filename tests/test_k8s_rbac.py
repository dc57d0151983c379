"""RLark's RBAC (deploy/kubernetes/) is sufficient and minimal, on the test bed's real authorizer.

The table is read from the manifests themselves: every verb of every rule of RLark's Role
(project-namespace.example.yaml, the same rules as rbac.yaml's), of its leader election Role
(rbac.yaml, the server's namespace only), of its ClusterRole (nodes) and of the optional
rbac-capacity.yaml. With all of them, each scenario below runs without a failure
(sufficient). With one verb taken away, the scenario that needs it ends in a named failure - a
Run reason, an Event or an error message naming the refused verb and resource, never a
traceback (minimal: no verb is there for nothing). A verb added to the manifests without a
scenario here fails the table.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException
import yaml

from tests.k8s_testbed import (
    LEADER_ROLE,
    LEASE,
    PROJECT_TEMPLATE,
    PROJECT_TEMPLATE_NS,
    KwokWorkers,
    RlarkOnK8s,
    setup_timeout,
    wait_for,
)

pytest.importorskip("kubernetes")

from rlark.ranks import plan_workers  # noqa: E402
from rlark.runtimes.base import LaunchSpec, WorkerPlace  # noqa: E402
from rlark.runtimes.kubernetes import render  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient, KubeError  # noqa: E402
from rlark.runtimes.kubernetes.podpolicy import PodPolicy  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.runtimes.kubernetes.status import StatusPolicy  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: ppo}
spec:
  headRole: head
  terminationGracePeriodSeconds: 5
  runScript: python train.py
  roles:
    - name: head
      workers: 1
      image: docker.io/rlinf/rlinf:0.3.0
      env: [{name: WANDB_API_KEY, valueFrom: {secretKeyRef: {name: wandb, key: api_key}}}]
    - name: pool
      workers: 1
      image: docker.io/rlinf/rlinf:0.3.0
      mounts:
        - {name: models, type: objectStorage, source: "s3://models/llama", mountPath: /models,
           readOnly: true, kubernetes: {storageClass: csi-s3, size: 100Gi}}
"""
#: the pool Worker's PVC (a StorageClass nobody provisions) keeps it unscheduled: a long timeout
POLICY = StatusPolicy(image_pull_grace_seconds=1.0, mount_grace_seconds=1.0, pending_timeout_seconds=600)
#: the same for the server (rlark.runtimes.kubernetes.settings), and the StorageClass allowed
SERVER_ENV = {"RLARK_K8S_IMAGE_PULL_GRACE": "1", "RLARK_K8S_MOUNT_GRACE": "1",
              "RLARK_K8S_PENDING_TIMEOUT": "600", "RLARK_K8S_STORAGE_CLASSES": "csi-s3"}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _role(path: Path, kind: str, name: str) -> dict:
    return next(d for d in _docs(path) if d["kind"] == kind and d["metadata"]["name"] == name)


def _rows() -> list[tuple[str, str, str]]:
    """``(where, resource, verb)`` for every verb the manifests grant: ``where`` is
    ``namespace`` (the Role), or the ClusterRole's name."""
    rows = []
    for rule in _role(PROJECT_TEMPLATE, "Role", "rlark")["rules"]:
        rows += [("namespace", res, verb) for res in rule["resources"] for verb in rule["verbs"]]
    for rule in _role(DEPLOY / "rbac.yaml", "Role", LEADER_ROLE)["rules"]:
        rows += [(LEADER_ROLE, res, verb) for res in rule["resources"] for verb in rule["verbs"]]
    for path, name in ((DEPLOY / "rbac.yaml", "rlark-node-reader"),
                       (DEPLOY / "rbac-capacity.yaml", "rlark-pod-reader")):
        for rule in _role(path, "ClusterRole", name)["rules"]:
            rows += [(name, res, verb) for res in rule["resources"] for verb in rule["verbs"]]
    return rows


def _without(rules: list[dict], resource: str, verb: str) -> list[dict]:
    """``rules`` with ``verb`` taken away from ``resource`` only."""
    out = []
    for rule in rules:
        if resource in rule["resources"] and verb in rule["verbs"]:
            others = [r for r in rule["resources"] if r != resource]
            if others:
                out.append({**rule, "resources": others})
            verbs = [v for v in rule["verbs"] if v != verb]
            if verbs:
                out.append({**rule, "resources": [resource], "verbs": verbs})
        else:
            out.append(rule)
    return out


#: resources of another API group than the core one
GROUPS = {"networkpolicies": "networking.k8s.io"}


def _split(resource: str) -> tuple[str, str]:
    res, _, sub = resource.partition("/")
    return res, sub


# --- the scenarios: each returns the named failure it ended in, or None ----------------------------


def run_a_job(tb, ns: str, home: Path, tmp_path: Path) -> str | None:
    """The server's whole path for one Run: preflight, start the watches of the project's
    namespace (at the Run's launch: the server's own are in its namespace, rlark), launch
    (ConfigMap, the Run's Secret, Service, PVC, Pods), follow the head's log, stop, end (delete
    by label)."""
    try:
        r = RlarkOnK8s(tb, ns, home, env=SERVER_ENV)
    except ValueError as exc:  # what `rlark server` prints before it exits
        return f"start: {exc}"
    try:
        workers = KwokWorkers(tb, ns, load_job(JOB)[0], tmp_path)
        r.set_secret("wandb", {"api_key": "wb-value"})  # the Run's Secret holds it
        r.submit(JOB)
        job = r.wait_phase("ppo", "Starting", "Failed")
        if job["phase"] == "Failed":
            return f"{job['reason']}: {job['message']}"

        def head_running_or_failed():
            # the Run is Starting once its plan is committed, before its Pods are created: a
            # refused create fails it with no Pod to read
            job = r.job("ppo")
            if job["phase"] == "Failed":
                return job
            try:
                pod = tb.admin().read_namespaced_pod("ppo-head-0", ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                return None
            return pod.status.phase == "Running" and pod
        found = wait_for("the head's Pod to run, or the Run to fail", head_running_or_failed)
        if isinstance(found, dict):
            return f"{found['reason']}: {found['message']}"
        try:
            token = workers.token()
        except ApiException as exc:
            if exc.status != 404:
                raise
            # the Run already failed (e.g. its log was refused) and RLark deleted the head's Pod
            job = r.wait_phase("ppo", "Failed")
            return f"{job['reason']}: {job['message']}"
        workers.logs["ppo-head-0"].event(token, "facts", hostname="ppo-head-0", ip="10.0.0.1")

        def head_read_or_failed():
            job = r.job("ppo")
            head = next(w for w in job["currentRun"]["workers"] if w["name"] == "ppo-head-0")
            return (job["phase"] == "Failed" or head["host"] == "ppo-head-0") and job
        job = wait_for("the head's log line to be read, or the Run to fail", head_read_or_failed)
        if job["phase"] == "Failed":
            return f"{job['reason']}: {job['message']}"
        r.jobs.stop("ppo")

        def stopped_or_refused():
            refused = [e for e in r.events("ppo") if e["reason"] == "StopFailed"]
            return refused or (r.job("ppo")["phase"] == "Stopped" and r.run_row("ppo").record is not None)
        found = wait_for("the Run to stop, or its stop to be refused", stopped_or_refused)
        if isinstance(found, list):
            return f"StopFailed: {found[0]['message']}"
        cleanup = [e for e in r.events("ppo") if e["reason"] in ("CleanupFailed", "CapacityUnknown")]
        if cleanup:
            return f"{cleanup[0]['reason']}: {cleanup[0]['message']}"
        wait_for("the Run's objects to be deleted", lambda: not any(
            r.objects(f"{render.LABEL_JOB}=ppo").values()))
        return None
    finally:
        r.close()


def launch_again(tb, ns: str, home: Path, tmp_path: Path) -> str | None:
    """A launch tried again (the server stopped mid-launch): every object of the Run exists
    already and is read to be kept (its Ray Secret too)."""
    job = load_job(JOB)[0]
    pool = plan_workers(job)[1]
    spec = LaunchSpec(job=job, run_uid="r1", worker=pool, env={"RLINF_NODE_RANK": "1"},
                      log_path=str(tmp_path / "pool.log"), place=WorkerPlace(),
                      secrets={("wandb", "api_key"): "wb-value"}, ray_token="ray-token-of-r1")
    for attempt in ("first", "again"):
        rt = KubernetesRuntime(kube=KubeClient(tb.core_v1(), ns), policy=POLICY,
                               pod_policy=PodPolicy.checked(storage_classes=("csi-s3",)))
        try:
            rt.place(job, "r1", [pool], None)
            rt.launch(spec)
        except KubeError as exc:
            return f"launch ({attempt}): {exc}"
        finally:
            rt.shutdown()
    return None


def free_a_leftover_service(tb, ns: str, home: Path, tmp_path: Path) -> str | None:
    """An earlier Run of the Job left its head Service (its end was refused, or the server
    stopped): the next Run deletes it before it starts."""
    job = load_job(JOB)[0]
    tb.admin().create_namespaced_service(ns, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ppo-head", "labels": {render.LABEL_MANAGED_BY: render.MANAGED_BY,
                                                    render.LABEL_JOB: "ppo", render.LABEL_RUN: "r0"}},
        "spec": {"clusterIP": "None", "selector": {render.LABEL_RUN: "r0"}, "ports": [{"port": 6379}]}})
    rt = KubernetesRuntime(kube=KubeClient(tb.core_v1(), ns), policy=POLICY)
    try:
        rt.place(job, "r1", plan_workers(job), None)
    except KubeError as exc:
        return f"place: {exc}"
    finally:
        rt.shutdown()
    wait_for("the leftover Service gone", lambda: not tb.admin().list_namespaced_service(ns).items)
    return None


def read_the_inventory(tb, ns: str, home: Path, tmp_path: Path) -> str | None:
    """``rlark nodes`` and the capacity preflight: the Nodes, and the Pods of every namespace."""
    rt = KubernetesRuntime(kube=KubeClient(tb.core_v1(), ns), start=False)
    nodes, basis, error = rt.inventory()
    if error:
        return f"CapacityUnknown: {error}"
    assert nodes
    if basis != "cluster":
        return f"free capacity counted from the Pods of namespace {ns} only ({basis})"
    return None


def elect_a_leader(tb, ns: str, home: Path, tmp_path: Path) -> str | None:
    """A replica's server (``server.build_app`` with leader election, ``ns`` as its namespace)
    reads the Lease at start, creates it, leads, renews it, and releases it when it shuts down."""
    import os

    from rlark.api.security import SecurityPolicy
    from rlark.server import build_app

    before = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(tb.rlark_kubeconfig)
    try:
        app = build_app(f"sqlite:///{home / 'rlark.db'}", runtime="kubernetes", namespace=ns,
                        policy=SecurityPolicy(auth=False))
    except ValueError as exc:  # what `rlark server` prints before it exits
        return f"start: {exc}"
    finally:
        if before is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = before
    leadership = app.state.controller
    leadership.start()
    try:
        def renewed():  # the Lease as stored: renewed since it was acquired
            try:
                spec = tb.coordination().read_namespaced_lease(LEASE, ns).spec
            except ApiException as exc:
                if exc.status != 404:
                    raise
                return False
            return spec.renew_time > spec.acquire_time

        def renewed_or_failed():
            status = leadership.status()
            return (status["error"] or (status["reconciling"] and renewed())) and status
        status = wait_for("the Lease to be created and renewed, or a Lease call to fail",
                          renewed_or_failed)
        if status["error"]:  # what /api/v1/server and the log say
            return f"LeaderElection: {status['error']}"
    finally:
        leadership.shutdown()
        app.state.jobs.store.dispose()
    lease = tb.coordination().read_namespaced_lease(LEASE, ns)
    if lease.spec.holder_identity:
        return f"the Lease still names {lease.spec.holder_identity} after the shutdown"
    return None


SCENARIOS = {f.__name__: f for f in (run_a_job, launch_again, free_a_leftover_service, read_the_inventory,
                                     elect_a_leader)}

#: (where, resource, verb) -> the scenario that needs it, and the words of its named failure
NEEDS = {
    ("namespace", "pods", "create"): ("run_a_job", ["LaunchFailed", 'cannot create resource "pods"']),
    ("namespace", "pods", "get"): ("launch_again", ['cannot get resource "pods"']),
    ("namespace", "pods", "list"): ("run_a_job", ["LaunchFailed: RLark cannot watch the Pods and Events",
                                                  'cannot list resource "pods"']),
    ("namespace", "pods", "watch"): ("run_a_job", ["LaunchFailed: RLark cannot watch the Pods and Events",
                                                   'cannot watch resource "pods"']),
    ("namespace", "pods", "delete"): ("run_a_job", ["StopFailed", 'cannot delete resource "pods"']),
    ("namespace", "pods", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "pods"', "kubectl delete"]),
    ("namespace", "pods/log", "get"): ("run_a_job", ["Forbidden", "may not read the log of Pod ppo-head-0",
                                                     'cannot get resource "pods/log"']),
    ("namespace", "services", "create"): ("run_a_job", ["LaunchFailed", 'cannot create resource "services"']),
    ("namespace", "services", "get"): ("run_a_job", ["LaunchFailed", 'cannot get resource "services"']),
    ("namespace", "services", "delete"): ("free_a_leftover_service", ['cannot delete resource "services"']),
    ("namespace", "services", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "services"']),
    ("namespace", "configmaps", "create"): ("run_a_job", ["LaunchFailed", 'cannot create resource "configmaps"']),
    ("namespace", "configmaps", "get"): ("launch_again", ['cannot get resource "configmaps"']),
    ("namespace", "configmaps", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "configmaps"']),
    ("namespace", "persistentvolumeclaims", "create"): ("run_a_job", [
        "LaunchFailed", 'cannot create resource "persistentvolumeclaims"']),
    ("namespace", "persistentvolumeclaims", "get"): ("launch_again", [
        'cannot get resource "persistentvolumeclaims"']),
    ("namespace", "persistentvolumeclaims", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "persistentvolumeclaims"']),
    ("namespace", "secrets", "create"): ("run_a_job", ["LaunchFailed", 'cannot create resource "secrets"']),
    ("namespace", "secrets", "get"): ("launch_again", ['cannot get resource "secrets"']),
    ("namespace", "secrets", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "secrets"']),
    ("namespace", "networkpolicies", "create"): ("run_a_job", [
        "LaunchFailed", 'cannot create resource "networkpolicies"']),
    ("namespace", "networkpolicies", "get"): ("launch_again", ['cannot get resource "networkpolicies"']),
    ("namespace", "networkpolicies", "deletecollection"): ("run_a_job", [
        "CleanupFailed", 'cannot deletecollection resource "networkpolicies"']),
    ("namespace", "events", "list"): ("run_a_job", ["LaunchFailed: RLark cannot watch the Pods and Events",
                                                    'cannot list resource "events"']),
    ("namespace", "events", "watch"): ("run_a_job", ["LaunchFailed: RLark cannot watch the Pods and Events",
                                                     'cannot watch resource "events"']),
    ("rlark-node-reader", "nodes", "list"): ("read_the_inventory", [
        "CapacityUnknown", 'cannot list resource "nodes"', "deploy/kubernetes/rbac.yaml"]),
    ("rlark-pod-reader", "pods", "list"): ("read_the_inventory", [
        "free capacity counted from the Pods of namespace", "only (namespace)"]),
    (LEADER_ROLE, "leases", "get"): ("elect_a_leader", [
        "start: leader election: read Lease", 'cannot get resource "leases"', "deploy/kubernetes/rbac.yaml"]),
    (LEADER_ROLE, "leases", "create"): ("elect_a_leader", [
        "LeaderElection: leader election: create Lease", 'cannot create resource "leases"']),
    (LEADER_ROLE, "leases", "update"): ("elect_a_leader", [
        "LeaderElection: leader election: update Lease", 'cannot update resource "leases"']),
}


def test_the_project_namespace_role_is_the_servers_role():
    """project-namespace.example.yaml gives RLark in a project's namespace exactly what
    rbac.yaml gives it in its own."""
    assert (_role(PROJECT_TEMPLATE, "Role", "rlark")["rules"]
            == _role(DEPLOY / "rbac.yaml", "Role", "rlark")["rules"])


def test_project_default_has_its_own_namespace_in_the_deploy_files():
    """No project runs in the server's namespace (rlark, where RLark's own Secrets are): the
    deploy files make project default's namespace, rlark-default, exactly as the template
    makes any project's, and kustomize moves nothing into rlark."""
    template = yaml.safe_dump_all(_docs(PROJECT_TEMPLATE)).replace(PROJECT_TEMPLATE_NS, "rlark-default")
    assert _docs(DEPLOY / "project-default.yaml") == list(yaml.safe_load_all(template))
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert "project-default.yaml" in kustomization["resources"] and "namespace" not in kustomization
    for name in kustomization["resources"]:  # every object names its namespace itself
        for doc in _docs(DEPLOY / name):
            if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                assert doc["metadata"]["namespace"] in ("rlark", "rlark-default"), (name, doc["kind"])


def test_every_granted_verb_has_a_scenario_that_needs_it():
    assert sorted(_rows()) == sorted(NEEDS)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_rules_are_sufficient(scenario, k8s_testbed, k8s_namespace, rlark_home, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    k8s_testbed.grant_leader_election(k8s_namespace)  # the test's namespace is the server's
    assert SCENARIOS[scenario](k8s_testbed, k8s_namespace, rlark_home, tmp_path) is None


@pytest.mark.parametrize("where,resource,verb", sorted(NEEDS), ids=lambda v: str(v))
def test_each_verb_taken_away_is_a_named_failure(where, resource, verb, k8s_testbed, k8s_namespace,
                                                 rlark_home, tmp_path, caplog):
    caplog.set_level(logging.CRITICAL, logger="rlark")
    rbac = k8s_testbed.rbac()
    res, sub = _split(resource)
    restore: list[tuple[dict, str | None]] = []  # ClusterRoles to put back, where to check

    def take_from_cluster_role(path: Path, name: str, check_ns: str | None) -> None:
        original = _role(path, "ClusterRole", name)
        if not any(resource in r["resources"] and verb in r["verbs"] for r in original["rules"]):
            return
        changed = copy.deepcopy(original)
        changed["rules"] = _without(changed["rules"], resource, verb)
        rbac.replace_cluster_role(name, changed)
        restore.append((original, check_ns))
        k8s_testbed.wait_rbac(verb, res, check_ns, allowed=False, subresource=sub)

    try:
        if where == LEADER_ROLE:  # the test's namespace is the server's
            rules = _without(_role(DEPLOY / "rbac.yaml", "Role", LEADER_ROLE)["rules"], resource, verb)
            k8s_testbed.grant_leader_election(k8s_namespace, rules)
            k8s_testbed.wait_rbac(verb, res, k8s_namespace, allowed=False, group="coordination.k8s.io",
                                  name=LEASE)
        elif where == "namespace":
            role = _role(PROJECT_TEMPLATE, "Role", "rlark")
            role = yaml.safe_load(yaml.safe_dump(role).replace(PROJECT_TEMPLATE_NS, k8s_namespace))
            role["rules"] = _without(role["rules"], resource, verb)
            rbac.replace_namespaced_role("rlark", k8s_namespace, role)
            # the optional rbac-capacity.yaml lists Pods everywhere: without it, as it may be
            take_from_cluster_role(DEPLOY / "rbac-capacity.yaml", "rlark-pod-reader", "default")
            k8s_testbed.wait_rbac(verb, res, k8s_namespace, allowed=False, subresource=sub,
                                  group=GROUPS.get(res, ""))
        else:  # a ClusterRole: the whole test bed's, put back after the test
            path = DEPLOY / ("rbac.yaml" if where == "rlark-node-reader" else "rbac-capacity.yaml")
            take_from_cluster_role(path, where, None if res == "nodes" else "default")
        scenario, words = NEEDS[(where, resource, verb)]
        failure = SCENARIOS[scenario](k8s_testbed, k8s_namespace, rlark_home, tmp_path)
        assert failure is not None, f"{scenario} did not need {verb} {resource}"
        assert "Traceback" not in failure
        for w in words:
            assert w in failure, failure
    finally:
        for original, check_ns in restore:
            rbac.replace_cluster_role(original["metadata"]["name"], original)
            k8s_testbed.wait_rbac(verb, res, check_ns, allowed=True, subresource=sub)
