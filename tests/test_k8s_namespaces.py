"""Projects map to Kubernetes namespaces: a Job of project ``team-a`` runs its Pods in that
project's namespace, never in the server's, and its stop and end reach the same namespace.

The controller, JobService and ProjectNamespaces are the real ones; each namespace's API layer
is a :class:`tests.k8s_fake.FakeKube` (the real API server tier comes with the Kubernetes test
bed, issue 11).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime
from rlark.services.accounts import AccountService
from rlark.services.audit import Actor
from rlark.services.auth import OPEN_PRINCIPAL, AuthService
from rlark.services.jobs import JobService
from rlark.store import RunRow, Store
from tests.k8s_fake import FakeKube
from tests.test_k8s_runtime import JOB


@pytest.fixture
def cluster(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    kubes: dict[str, FakeKube] = {}

    def runtime(ns: str) -> KubernetesRuntime:
        kubes[ns] = FakeKube(ns)
        return KubernetesRuntime(kube=kubes[ns], start=False)  # type: ignore[arg-type]

    rt = ProjectNamespaces(runtime("rl"), runtime)
    accounts = AccountService(AuthService(store), server_namespace="rl")
    accounts.create_project(OPEN_PRINCIPAL, None, "team-a")
    accounts.create_project(OPEN_PRINCIPAL, None, "team-b", namespace="lab-b")
    jobs = JobService(store, runtime="kubernetes", namespace="rl")
    yield store, kubes, Controller(store, rt), jobs
    rt.shutdown()
    store.dispose()


def test_each_project_runs_in_its_own_namespace(cluster):
    store, kubes, ctl, jobs = cluster
    jobs.create(JOB, project="team-a", actor=Actor("alice"))
    jobs.create(JOB, project="team-b", actor=Actor("bob"))  # the same Job name, another project
    jobs.create(JOB, actor=Actor("carol"))  # project default: the server's namespace
    ctl.reconcile_once()
    with store.session() as s:
        assert sorted(s.scalars(select(RunRow.namespace))) == ["lab-b", "rl", "rl-team-a"]
    for ns in ("rl", "rl-team-a", "lab-b"):
        assert kubes[ns].names("Pod") == ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"], ns
        pod = kubes[ns].obj("Pod", "ppo-head-0")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RLARK_HEAD_ADDRESS"].startswith(f"ppo-head.{ns}.svc"), env["RLARK_HEAD_ADDRESS"]


def test_stop_and_end_of_a_run_stay_in_its_namespace(cluster):
    store, kubes, ctl, jobs = cluster
    jobs.create(JOB, project="team-a")
    jobs.create(JOB)
    ctl.reconcile_once()
    jobs.stop("ppo", "team-a")
    for _ in range(5):
        ctl.reconcile_once()
    deleted = [(kind, name) for verb, kind, name in kubes["rl-team-a"].calls if verb.startswith("delete")]
    assert ("Pod", "ppo-head-0") in deleted
    assert not [c for c in kubes["rl"].calls if c[0].startswith("delete")], kubes["rl"].calls
    assert kubes["rl"].names("Pod") == ["ppo-head-0", "ppo-pool-0", "ppo-pool-1"]
