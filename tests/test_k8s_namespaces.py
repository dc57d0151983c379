"""Projects map to Kubernetes namespaces: a Job of project ``team-a`` runs its Pods in that
project's namespace, never in the server's (not even project ``default``), and its stop and end
reach the same namespace.

The controller, JobService and ProjectNamespaces are the real ones, against the test bed's API
server: four namespaces set up like deploy/kubernetes/project-namespace.example.yaml (the
server's, ``<server's>-default`` and ``<server's>-team-a`` as RLark derives them, and one given
explicitly to team-b).
"""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select

from tests.k8s_testbed import setup_timeout, wait_for
from tests.test_k8s_runtime import job_yaml

pytest.importorskip("kubernetes")

from rlark.controller.loop import Controller  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.services.accounts import AccountService  # noqa: E402
from rlark.services.audit import Actor  # noqa: E402
from rlark.services.auth import OPEN_PRINCIPAL, AuthService  # noqa: E402
from rlark.services.jobs import JobService  # noqa: E402
from rlark.store import RunRow, Store  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

JOB = job_yaml()
PODS = ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"]


@pytest.fixture
def cluster(k8s_testbed, rlark_home, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    server = k8s_testbed.project_namespace()
    default = k8s_testbed.project_namespace(f"{server}-default")
    team_a = k8s_testbed.project_namespace(f"{server}-team-a")
    lab_b = k8s_testbed.project_namespace()
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    api = k8s_testbed.core_v1()

    def runtime(ns: str) -> KubernetesRuntime:
        return KubernetesRuntime(kube=KubeClient(api, ns))

    rt = ProjectNamespaces(runtime(server), runtime)
    accounts = AccountService(AuthService(store), server_namespace=server)
    accounts.create_project(OPEN_PRINCIPAL, None, "team-a")
    accounts.create_project(OPEN_PRINCIPAL, None, "team-b", namespace=lab_b)
    jobs = JobService(store, runtime="kubernetes", namespace=server)
    try:
        yield store, (server, default, team_a, lab_b), Controller(store, rt, stop_runs_on_exit=True), jobs
    finally:
        rt.shutdown()
        store.dispose()
        for ns in (server, default, team_a, lab_b):
            k8s_testbed.delete_namespace(ns)


def pods(tb, ns: str) -> dict:
    return {p.metadata.name: p for p in tb.admin().list_namespaced_pod(ns).items}


def test_each_project_runs_in_its_own_namespace(cluster, k8s_testbed):
    store, (server, default, team_a, lab_b), ctl, jobs = cluster
    jobs.create(JOB, project="team-a", actor=Actor("alice"))
    jobs.create(JOB, project="team-b", actor=Actor("bob"))  # the same Job name, another project
    jobs.create(JOB, actor=Actor("carol"))  # project default: <server>-default, not the server's
    ctl.reconcile_once()
    with store.session() as s:
        assert sorted(s.scalars(select(RunRow.namespace))) == sorted([default, team_a, lab_b])
    assert not pods(k8s_testbed, server)  # RLark's own Secrets' namespace: no Pod of a project
    for ns in (default, team_a, lab_b):
        found = pods(k8s_testbed, ns)
        assert sorted(found) == PODS, ns
        env = {e.name: e.value for e in found["ppo-head-0"].spec.containers[0].env}
        assert env["RLARK_HEAD_ADDRESS"].startswith(f"ppo-head.{ns}.svc"), env["RLARK_HEAD_ADDRESS"]


def test_stop_and_end_of_a_run_stay_in_its_namespace(cluster, k8s_testbed):
    store, (_, default, team_a, _), ctl, jobs = cluster
    jobs.create(JOB, project="team-a")
    jobs.create(JOB)
    ctl.reconcile_once()
    kept = {name: p.metadata.uid for name, p in pods(k8s_testbed, default).items()}
    assert sorted(kept) == PODS
    jobs.stop("ppo", "team-a")

    def stopped():
        ctl.reconcile_once()
        return jobs.get("ppo", "team-a")["phase"] == "Stopped" and not pods(k8s_testbed, team_a)
    wait_for("team-a's Run to stop and its Pods to go", stopped, timeout=60)
    after = pods(k8s_testbed, default)
    assert {name: p.metadata.uid for name, p in after.items()} == kept
    assert all(p.metadata.deletion_timestamp is None for p in after.values())
    assert jobs.get("ppo")["phase"] in ("Starting", "Running")


def test_no_new_run_starts_in_the_servers_namespace(cluster, k8s_testbed):
    """A Run that names the server's namespace (one left Pending by an older server, when
    project default still mapped there) fails before anything of it is created."""
    from sqlalchemy import update

    store, (server, default, _, _), ctl, jobs = cluster
    jobs.create(JOB)
    with store.session() as s:
        s.execute(update(RunRow).values(namespace=server))
    ctl.reconcile_once()
    job = jobs.get("ppo")
    assert (job["phase"], job["reason"]) == ("Failed", "ServerNamespace"), job
    assert f"namespace {server} is the RLark server's own" in job["message"], job
    assert not pods(k8s_testbed, server) and not pods(k8s_testbed, default)
    assert not k8s_testbed.admin().list_namespaced_config_map(server, label_selector="rlark.io/run").items
    jobs.start("ppo")  # a new Run goes to the project's namespace
    ctl.reconcile_once()
    assert sorted(pods(k8s_testbed, default)) == PODS and not pods(k8s_testbed, server)
