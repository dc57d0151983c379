"""A Run's Pods stopped together on the test bed (tests/k8s_testbed.py): the runtime sends one
collection delete by the Run's label, sparing the Pods not asked to stop, instead of one delete
per Pod (issue 23: a 1,000-Worker stop cost 1,000 requests), from its own thread (the
controller's pass never waits on the API). The API server's own request counter
(``apiserver_request_total``, read from ``/metrics`` as the admin) counts the deletes.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.k8s_testbed import setup_timeout, wait_for
from tests.test_k8s_logfollow import RUN, launch_all, running
from tests.test_k8s_runtime import job_yaml

pytest.importorskip("kubernetes")

from rlark.runtimes.base import WorkerRef  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.runtimes.kubernetes.stopplan import MIN_BATCH  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

PODS = MIN_BATCH + 4


def pod_deletes(tb) -> Counter:
    """Pod deletes the API server has answered since it started (all users), by scope:
    ``collection`` (one request for every Pod a label selector selects: the metric's
    ``verb="DELETE", scope="namespace"``) and ``one`` (a Pod by name: ``scope="resource"``;
    kwok sends these too, to finish each Pod's deletion as a kubelet does)."""
    seen: Counter = Counter()
    for line in tb.kubectl("get", "--raw", "/metrics", timeout=60).splitlines():
        if (line.startswith("apiserver_request_total{") and 'resource="pods"' in line
                and 'subresource=""' in line and 'verb="DELETE"' in line):
            scope = "collection" if 'scope="namespace"' in line else "one"
            seen[scope] += int(float(line.rsplit(" ", 1)[1]))
    return seen


def no_namespace_terminating(tb) -> None:
    """Until no namespace is being deleted: the namespace controller empties one with collection
    deletes of its Pods, which :func:`pod_deletes` would count (an earlier test's namespace,
    deleted at its teardown, made a count of 2 here)."""
    wait_for("earlier tests' namespaces to be deleted", lambda: not [
        n.metadata.name for n in tb.admin().list_namespace().items if n.status.phase == "Terminating"],
        timeout=120)


def deleting(tb, namespace: str, name: str) -> bool:
    """Whether Pod ``name`` is gone or being deleted."""
    pods = {p.metadata.name: p for p in tb.admin().list_namespaced_pod(namespace).items}
    return name not in pods or pods[name].metadata.deletion_timestamp is not None


def test_a_runs_pods_stopped_together_go_in_one_collection_delete_that_spares_the_head(
        k8s_testbed, k8s_namespace, tmp_path):
    tb = k8s_testbed
    job = load_job(job_yaml("many", pool=PODS - 1))[0]
    rt = KubernetesRuntime(kube=KubeClient(tb.core_v1(), k8s_namespace))
    try:
        workers = launch_all(rt, job, tmp_path / "logs")
        head, pool = workers[0], workers[1:]
        wait_for(f"the {PODS} Pods to run", running(tb, k8s_namespace, [w.name for w in workers]))
        refs = {w.name: WorkerRef(name=w.name, handle=f"{k8s_namespace}/{w.name}", run_uid=RUN)
                for w in workers}
        no_namespace_terminating(tb)
        before = pod_deletes(tb)
        for w in pool:  # the head (its run script finished, say) is left to end on its own
            rt.signal_stop(refs[w.name])
        assert rt.wait_stops_sent(60), "the stops asked were not sent within 60 s"
        wait_for("every pool Pod to be deleted", lambda: all(
            deleting(tb, k8s_namespace, w.name) for w in pool), timeout=60)
        assert not deleting(tb, k8s_namespace, head.name), "the head was deleted with the pool"
        # the 11 Pods in one request (before: 11 deletes by name, no collection delete)
        assert (pod_deletes(tb) - before)["collection"] == 1, pod_deletes(tb) - before
        before = pod_deletes(tb)
        rt.kill(refs[head.name])  # a group of one: by name (and uid)
        assert rt.wait_stops_sent(60)
        wait_for("the head Pod to be deleted", lambda: deleting(tb, k8s_namespace, head.name), timeout=60)
        assert (pod_deletes(tb) - before)["collection"] == 0
        assert rt.observe(refs[pool[0].name]).failure is None
    finally:
        rt.shutdown()
