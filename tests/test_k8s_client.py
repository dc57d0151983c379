"""Every call of ``runtimes/kubernetes/client.py`` against a real API server (the test bed:
kube-apiserver, etcd, controller-manager, scheduler, kwok Nodes), as RLark's own ServiceAccount
bound by deploy/kubernetes/'s RBAC, in a fresh namespace per test set up like
deploy/kubernetes/project-namespace.example.yaml. Each call is made on a kind RLark really makes
it on (the RBAC grants nothing more: tests/test_k8s_rbac.py); what RLark may not do is done by
the admin around it.

Pods that should stay put carry a scheduling gate: neither the scheduler nor kwok touches them,
so a watch sees only the test's own changes.
"""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from tests.k8s_testbed import (
    GPU_NODES,
    RESERVED_NODE,
    RLARK_SA,
    restricted,
    setup_timeout,
    wait_for,
)
from tests.streams import ArrivingLines, close_followed, split_chunks

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client as k8s  # noqa: E402

from rlark.runtimes.kubernetes import client as kclient  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient, KubeError  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())


@pytest.fixture
def kube(k8s_testbed, k8s_namespace):
    """The API layer as the RLark server has it: RLark's ServiceAccount, the test's namespace."""
    return KubeClient(k8s_testbed.core_v1(), k8s_namespace)


def pod(name: str, *, finalizers=None, grace: int = 7, labels=None, node: str | None = None,
        gated: bool = False) -> dict:
    """A one-container Pod (``gated``: held unscheduled by a scheduling gate)."""
    spec = {"containers": [{"name": "worker", "image": "registry.invalid/rlark/test:1"}],
            "terminationGracePeriodSeconds": grace, "automountServiceAccountToken": False}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if gated:
        spec["schedulingGates"] = [{"name": "rlark.test/hold"}]
    return restricted({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": labels or {"app": "client-test"},
                                    **({"finalizers": finalizers} if finalizers else {})},
                       "spec": spec})


def service(name: str, labels=None) -> dict:
    """A headless Service like the head Service RLark renders."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"clusterIP": "None", "selector": {"app": name},
                     "ports": [{"name": "gcs", "port": 6379}]}}


def config_map(name: str, labels=None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": {"k": "v"}}


def sa_token(k8s_testbed) -> str:
    cfg = yaml.safe_load(k8s_testbed.rlark_kubeconfig.read_text())
    return cfg["users"][0]["user"]["token"]


def api_port(k8s_testbed) -> str:
    cfg = yaml.safe_load(k8s_testbed.rlark_kubeconfig.read_text())
    return cfg["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1]


# --- configuration ---------------------------------------------------------------------------------


def test_connect_with_a_kubeconfig_takes_its_context_namespace_and_leaves_the_global_default(
        k8s_testbed, monkeypatch, tmp_path):
    monkeypatch.setattr(kclient, "SERVICE_ACCOUNT_DIR", str(tmp_path / "no-service-account"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(k8s_testbed.rlark_kubeconfig))
    before = k8s.Configuration.get_default_copy().host
    kube = KubeClient.connect()
    assert kube.namespace == "rlark"  # the context's namespace (scripts/k8s-testbed writes it)
    items, rv = kube.list("Pod")
    assert isinstance(items, list) and int(rv) > 0
    assert k8s.Configuration.get_default_copy().host == before  # its own configuration
    # an explicit file and context; the argument wins over the context's namespace
    monkeypatch.delenv("KUBECONFIG")
    other = KubeClient.connect("elsewhere", context="rlark-testbed-rlark",
                               kubeconfig=str(k8s_testbed.rlark_kubeconfig))
    assert other.namespace == "elsewhere"
    with pytest.raises(KubeError) as e:
        KubeClient.connect(context="no-such-context", kubeconfig=str(k8s_testbed.rlark_kubeconfig))
    assert "no-such-context" in str(e.value)


def test_connect_in_a_pod_uses_the_service_account_files(k8s_testbed, monkeypatch, tmp_path):
    """In a Pod: KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount directory Kubernetes mounts
    (here one the test writes, through client.SERVICE_ACCOUNT_DIR); it wins over a kubeconfig."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(sa_token(k8s_testbed))
    (sa / "ca.crt").write_bytes((k8s_testbed.dir / "pki" / "ca.crt").read_bytes())
    (sa / "namespace").write_text("rlark\n")
    monkeypatch.setattr(kclient, "SERVICE_ACCOUNT_DIR", str(sa))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", api_port(k8s_testbed))
    monkeypatch.setenv("KUBECONFIG", str(k8s_testbed.kubeconfig))  # the admin's: must not be used
    kube = KubeClient.connect()
    assert kube.namespace == "rlark"
    assert int(kube.list("Pod")[1]) > 0
    # it is RLark's ServiceAccount, not the admin: Secrets are not RLark's to read
    with pytest.raises(k8s.rest.ApiException) as e:
        kube.api.list_namespaced_secret("rlark")
    assert e.value.status == 403 and RLARK_SA in e.value.body
    # without the namespace file the kubeconfig is not consulted either: "default"
    (sa / "namespace").unlink()
    assert KubeClient.connect().namespace == "default"


def test_no_configuration_names_both_reasons(monkeypatch, tmp_path):
    monkeypatch.setattr(kclient, "SERVICE_ACCOUNT_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing.kubeconfig"))
    with pytest.raises(KubeError) as e:
        KubeClient.connect()
    message = str(e.value)
    assert message.startswith("no Kubernetes configuration: not in a Pod")
    assert "Service host/port is not set" in message and "no usable kubeconfig" in message


# --- create, read, delete ----------------------------------------------------------------------------


def test_create_get_delete_and_their_errors(kube, k8s_namespace):
    stored = kube.create(service("svc-a"))
    assert stored["metadata"]["uid"] and stored["metadata"]["namespace"] == k8s_namespace
    with pytest.raises(KubeError) as e:
        kube.create(service("svc-a"))
    assert e.value.status == 409 and 'services "svc-a" already exists' in str(e.value)
    assert kube.get("Service", "svc-a")["metadata"]["uid"] == stored["metadata"]["uid"]
    assert kube.get("Service", "missing") is None
    assert kube.delete("Service", "svc-a") is True
    assert kube.delete("Service", "svc-a") is False  # already gone: not an error
    # RBAC: a refusal is a KubeError naming the verb and where RLark's rules are, never None
    with pytest.raises(KubeError) as e:
        kube.get("Event", "any")  # RLark lists and watches Events, never reads one
    assert e.value.status == 403 and 'cannot get resource "events"' in str(e.value)
    with pytest.raises(KubeError) as e:
        KubeClient(kube.api, "default").create(config_map("x"))  # no Role in "default"
    assert e.value.status == 403 and 'cannot create resource "configmaps"' in str(e.value)
    assert "deploy/kubernetes/rbac.yaml" in str(e.value)  # where to grant it


def test_pod_deletion_is_graceful_unless_grace_zero(kube, k8s_testbed, k8s_namespace):
    """A finalizer (another controller's) keeps the Pod after the delete, so the API's answer
    can be read: deletionTimestamp with the Pod's own grace period, or 0. (The Pods are bound
    to a Node nobody runs, so no kubelet or kwok acts on them; an unbound Pod has no grace.)"""
    admin = k8s_testbed.admin()
    for name, grace, expected in (("graceful", None, 7), ("at-once", 0, 0)):
        obj = pod(name, finalizers=["rlark.test/hold"], grace=7)
        obj["spec"]["nodeName"] = "rlark-test-no-such-node"
        kube.create(obj)
        assert kube.delete("Pod", name, grace_seconds=grace) is True
        held = wait_for(f"Pod {name} marked for deletion",
                        lambda: (p := kube.get("Pod", name)) and p["metadata"].get("deletionTimestamp") and p)
        assert held["metadata"]["deletionGracePeriodSeconds"] == expected
        admin.patch_namespaced_pod(name, k8s_namespace, {"metadata": {"finalizers": None}})
        if expected:  # no kubelet confirms the graceful end: force it, as `kubectl delete --force`
            admin.delete_namespaced_pod(name, k8s_namespace, grace_period_seconds=0)
        wait_for(f"Pod {name} gone once its finalizer is removed", lambda: kube.get("Pod", name) is None)


def test_delete_collection_deletes_only_what_the_label_selects(kube, k8s_testbed, k8s_namespace):
    admin = k8s_testbed.admin()
    for i, run in enumerate(("a", "a", "b")):
        kube.create(config_map(f"cm-{i}", {"rlark.io/run": run}))
        kube.create(service(f"svc-{i}", {"rlark.io/run": run}))
        kube.create(pod(f"pod-{i}", labels={"rlark.io/run": run}, gated=True))
    for kind in ("ConfigMap", "Service"):
        kube.delete_collection(kind, "rlark.io/run=a")
    kube.delete_collection("Pod", "rlark.io/run=a", grace_seconds=0)
    assert [c.metadata.name for c in admin.list_namespaced_config_map(
        k8s_namespace, label_selector="rlark.io/run").items] == ["cm-2"]
    assert [s.metadata.name for s in admin.list_namespaced_service(k8s_namespace).items] == ["svc-2"]
    wait_for("the Pods of run a gone",
             lambda: [p["metadata"]["name"] for p in kube.list("Pod")[0]] == ["pod-2"])
    kube.delete_collection("PersistentVolumeClaim", "rlark.io/run=nothing")  # nothing: fine


# --- list and watch -------------------------------------------------------------------------------------


def test_list_then_watch_from_its_resource_version_sees_each_change_in_order(kube, k8s_testbed):
    items, rv = kube.list("Pod", label_selector="app=watched")
    assert items == [] and int(rv) > 0
    seen: list[tuple[str, str, int, str]] = []
    stream = kube.watch("Pod", rv, label_selector="app=watched", timeout_seconds=30)
    done = threading.Event()

    def consume():
        for typ, obj in stream:
            meta = obj["metadata"]
            seen.append((typ, meta["name"], int(meta["resourceVersion"]),
                         (meta.get("annotations") or {}).get("step", "")))
            if typ == "DELETED":
                break
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    kube.create(pod("w", labels={"app": "watched"}, gated=True))
    kube.create(pod("not-selected", labels={"app": "other"}, gated=True))
    k8s_testbed.admin().patch_namespaced_pod("w", kube.namespace, {"metadata": {"annotations": {"step": "1"}}})
    k8s_testbed.admin().patch_namespaced_pod("w", kube.namespace, {"metadata": {"annotations": {"step": "2"}}})
    kube.delete("Pod", "w", grace_seconds=0)
    assert done.wait(30), seen
    stream.close()
    assert {name for _, name, _, _ in seen} == {"w"}  # the selector holds
    assert seen[0][0] == "ADDED" and seen[-1][0] == "DELETED"
    steps = [step for typ, _, _, step in seen if typ == "MODIFIED"]  # the delete is one too
    assert "1" in steps and steps.index("1") < steps.index("2"), seen
    versions = [v for _, _, v, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)  # in etcd's order
    assert versions[0] > int(rv)
    # a watch RBAC refuses fails when it is opened, not while iterating
    with pytest.raises(KubeError) as e:
        KubeClient(kube.api, "default").watch("Pod", "0")
    assert e.value.status == 403 and 'cannot watch resource "pods"' in str(e.value)


def test_watch_events_of_the_namespace(kube, k8s_testbed, k8s_namespace):
    """RLark's second watch: Pod Events (the scheduler's FailedScheduling, kwok's pull errors)."""
    _, rv = kube.list("Event", field_selector="involvedObject.kind=Pod")
    stream = kube.watch("Event", rv, field_selector="involvedObject.kind=Pod", timeout_seconds=30)
    kube.create(restricted(pod("too-big", labels={"app": "big"}) | {"spec": {
        "containers": [{"name": "worker", "image": "registry.invalid/rlark/test:1",
                        "resources": {"limits": {"nvidia.com/gpu": "64"}}}]}}))
    reasons = []
    for typ, obj in stream:
        reasons.append((typ, obj["reason"], obj["involvedObject"]["name"]))
        if obj["reason"] == "FailedScheduling":
            break
    stream.close()
    assert reasons[-1] == ("ADDED", "FailedScheduling", "too-big")
    assert "Insufficient nvidia.com/gpu" in obj["message"]


def test_watch_bookmarks_carry_the_resource_version_past_changes_it_did_not_select(kube, k8s_testbed):
    """allowWatchBookmarks: the API server tells a watcher the current resourceVersion (before
    its timeout and about once a minute) also when none of its objects changed, so resuming from
    it is never too old. A Pod change elsewhere moves the Pods' resourceVersion past ours."""
    _, rv = kube.list("Pod", label_selector="app=quiet")
    stream = kube.watch("Pod", rv, label_selector="app=quiet", timeout_seconds=5)
    other = k8s_testbed.admin().create_namespaced_pod(
        kube.namespace, pod("elsewhere", labels={"app": "elsewhere"}, gated=True))
    events = [(typ, obj["metadata"].get("resourceVersion")) for typ, obj in stream]
    # nothing selected changed: bookmarks only (the API server may send more than one in 5 s,
    # e.g. one soon after the watch starts); the last one carries the Pods' resourceVersion
    assert events and {t for t, _ in events} == {"BOOKMARK"}, events
    assert int(events[-1][1]) >= int(other.metadata.resource_version) > int(rv)


def test_watch_from_a_compacted_resource_version_is_410_gone_and_a_relist_recovers(kube, k8s_testbed):
    admin = k8s_testbed.admin()
    created = kube.create(pod("old", labels={"app": "compact"}, gated=True))
    old_rv = created["metadata"]["resourceVersion"]
    for i in range(3):  # etcd's revision moves past old_rv
        admin.patch_namespaced_pod("old", kube.namespace, {"metadata": {"annotations": {"i": str(i)}}})
    k8s_testbed.compact(restart_apiserver=True)  # and the API server's watch cache starts anew
    with pytest.raises(KubeError) as e:
        for _ in kube.watch("Pod", old_rv, label_selector="app=compact", timeout_seconds=10):
            pass
    assert e.value.status == 410, e.value
    items, rv = kube.list("Pod", label_selector="app=compact")  # the re-list
    assert [i["metadata"]["annotations"]["i"] for i in items] == ["2"] and int(rv) > int(old_rv)
    stream = kube.watch("Pod", rv, label_selector="app=compact", timeout_seconds=10)
    admin.patch_namespaced_pod("old", kube.namespace, {"metadata": {"annotations": {"i": "after"}}})
    typ, obj = next(iter(stream))
    stream.close()
    assert (typ, obj["metadata"]["annotations"]["i"]) == ("MODIFIED", "after")


def test_a_watch_ends_when_the_api_server_restarts_and_a_new_one_resumes(kube, k8s_testbed):
    """A restart ends an open watch (cleanly or as a broken connection: status 0, never a
    traceback); a new watch from the last resourceVersion, or a re-list on 410, sees what
    changed after it."""
    admin = k8s_testbed.admin()
    _, rv = kube.list("Pod", label_selector="app=restart")
    stream = kube.watch("Pod", rv, label_selector="app=restart", timeout_seconds=120)
    ended: list = []

    def consume():
        try:
            for _ in stream:
                pass
            ended.append("clean")
        except KubeError as exc:
            ended.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    k8s_testbed.restart_apiserver()
    reader.join(30)
    assert ended and (ended[0] == "clean" or ended[0].status in (0, 410, 500, 503)), ended
    admin.create_namespaced_pod(kube.namespace, pod("after-restart", labels={"app": "restart"}, gated=True))
    try:
        typ, obj = next(iter(kube.watch("Pod", rv, label_selector="app=restart", timeout_seconds=10)))
        assert (typ, obj["metadata"]["name"]) == ("ADDED", "after-restart")
    except KubeError as exc:  # the new watch cache has no history from before the restart
        assert exc.status == 410, exc
        assert [p["metadata"]["name"] for p in kube.list("Pod", label_selector="app=restart")[0]] == [
            "after-restart"]


# --- logs ---------------------------------------------------------------------------------------------


def test_log_stream_follows_with_timestamps_and_resumes_since(kube, k8s_testbed, k8s_namespace, tmp_path):
    """The stream gives what the log holds, then what is written while it is open: "third" is
    written only after the stream delivered "first" and "second", so it arrives only through
    following."""
    log = k8s_testbed.pod_log(k8s_namespace, "talker", tmp_path)
    log.write("first", "second", at=time.time() - 60)  # a minute ago
    kube.create(pod("talker", node=GPU_NODES[0]))
    wait_for("Pod talker running", lambda: (kube.get("Pod", "talker") or {}).get("status", {}).get("phase") == "Running")

    resp = wait_for("the log through the API server", lambda: _open(kube, "talker", None))
    try:
        stream = ArrivingLines(split_chunks(resp.stream(4096)), "the followed log of Pod talker")
        lines = stream.take(2, "the two lines the log held when the stream opened")
        log.write("third")
        lines += stream.take(1, "third, written after the stream delivered first and second")
    finally:
        close_followed(resp)
    stamps = [line.split(b" ", 1)[0] for line in lines]
    assert [line.split(b" ", 1)[1] for line in lines] == [b"first", b"second", b"third"]
    assert all(s.endswith(b"Z") and b"T" in s for s in stamps)  # RFC 3339, for LogCursor
    # sinceSeconds (how the follower resumes): only what is newer than that many seconds
    resp = kube.log_stream("talker", "worker", 30)
    try:
        newer = ArrivingLines(split_chunks(resp.stream(4096)), "the log of Pod talker since 30 s")
        assert [line.split(b" ", 1)[1] for line in newer.take(1, "the lines of the last 30 s")] == [b"third"]
    finally:
        close_followed(resp)
    with pytest.raises(KubeError) as e:
        kube.log_stream("no-such-pod", "worker")
    assert e.value.status == 404


def _open(kube: KubeClient, name: str, since):
    try:
        return kube.log_stream(name, "worker", since)
    except KubeError as exc:
        if exc.status in (400, 500):  # kwok has not seen the Logs object yet
            return None
        raise


# --- the inventory ------------------------------------------------------------------------------------


def test_nodes_and_the_pods_of_every_namespace(kube, k8s_testbed, k8s_namespace):
    nodes = {n["metadata"]["name"]: n for n in kube.list_nodes()}
    assert set(GPU_NODES) | {RESERVED_NODE} <= set(nodes)
    assert nodes[GPU_NODES[0]]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    theirs = f"theirs-{k8s_namespace}"
    k8s_testbed.admin().create_namespaced_pod("default", pod(theirs, gated=True))
    try:
        pods, basis = kube.list_pods_everywhere()  # rbac-capacity.yaml lets RLark list them
        assert basis == "cluster"
        assert theirs in {p["metadata"]["name"] for p in pods}
    finally:
        k8s_testbed.admin().delete_namespaced_pod(theirs, "default", grace_period_seconds=0)
