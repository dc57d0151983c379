"""Worker Pods on Kubernetes (issue 13, items 4 and 5): the secure defaults every Pod is rendered
with, the server's Pod policy (root, hostPath prefixes, ServiceAccounts) refusing what a Job asks
beyond it, the Run's NetworkPolicy, and object names another Job already has.

Pure: rendering and Findings without a cluster; the collision check through the JobService on a
real SQLite store. What the API server makes of them (Pod Security admission, the NetworkPolicy
and its garbage collection, the runtime leaving another Job's Pod alone) is in
tests/test_k8s_pod_security.py and tests/test_k8s_runtime.py, on the test bed.
"""

from __future__ import annotations

import copy

import pytest

from rlark import settings
from rlark.findings import has_errors
from rlark.runtimes.kubernetes import render
from rlark.runtimes.kubernetes.podpolicy import (PodPolicy, PolicyDenied, check_pod_policy,
                                                 normalise_host_path, system_path)
from rlark.runtimes.kubernetes.preflight import check_for_kubernetes, check_name_collisions
from rlark.services.jobs import JobService
from rlark.spec import Job, job_to_dict
from tests.k8s_jobs import BASE

OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ppo-run-r1",
         "uid": "6f1c2a52-1f0e-4f5e-9d0c-3a4b5c6d7e8f"}


def make_job(name: str = "ppo", roles: list[dict] | None = None, **head) -> Job:
    """A Job named ``name`` with ``roles`` (default: one head role with ``head``'s fields)."""
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = name
    if roles is not None:
        data["spec"]["roles"] = roles
        data["spec"]["headRole"] = roles[0]["name"]
    else:
        data["spec"]["roles"][0].update(head)
    return Job.model_validate(data)


def pods(job: Job, opts: render.RenderOptions | None = None) -> list[dict]:
    return [o for o in render.render_run(job, "r1", opts) if o["kind"] == "Pod"]


def errors(findings, code: str):
    return [f for f in findings if f.code == code and f.severity == "error"]


# --- secure defaults ----------------------------------------------------------------------------------


def test_every_worker_pod_drops_all_capabilities_and_runs_as_a_numeric_non_root_user():
    job = make_job(roles=[{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0"},
                          {"name": "pool", "workers": 3, "image": "docker.io/rlinf/rlinf:0.3.0"}])
    for pod in pods(job):
        spec = pod["spec"]
        assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000,
                                           "seccompProfile": {"type": "RuntimeDefault"}}
        (c,) = spec["containers"]
        assert c["securityContext"] == {"privileged": False, "allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}
        assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)


def test_a_role_or_the_server_chooses_the_user_id():
    job = make_job(roles=[{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                           "kubernetes": {"runAsUser": 4242}},
                          {"name": "pool", "image": "docker.io/rlinf/rlinf:0.3.0"}])
    head, pool = pods(job, render.RenderOptions(run_as_user=2000))
    assert head["spec"]["securityContext"]["runAsUser"] == 4242
    assert pool["spec"]["securityContext"]["runAsUser"] == 2000


@pytest.mark.parametrize("user", [0, -1])
def test_a_run_as_user_of_root_is_refused(user):
    job = make_job(kubernetes={"runAsUser": user})
    (f,) = errors(check_pod_policy(job, PodPolicy()), "InvalidRunAsUser")
    assert f.path == "spec.roles[0].kubernetes.runAsUser" and str(user) in f.message


def test_root_is_refused_unless_the_server_allows_it():
    job = make_job(kubernetes={"runAsRoot": True})
    (f,) = errors(check_pod_policy(job, PodPolicy()), "RootNotAllowed")
    assert f.path == "spec.roles[0].kubernetes.runAsRoot"
    assert "--k8s-allow-root" in f.hint and "RLARK_K8S_ALLOW_ROOT" in f.hint
    # the renderer refuses it too: no path renders a Pod the policy forbids
    with pytest.raises(PolicyDenied, match="RootNotAllowed: spec.roles.0..kubernetes.runAsRoot"):
        pods(job)
    # allowed: user 0, still without capabilities or privilege escalation
    assert not check_pod_policy(job, PodPolicy(allow_root=True))
    (pod,) = pods(job, render.RenderOptions(allow_root=True))
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is False
    assert pod["spec"]["securityContext"]["runAsUser"] == 0
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


# --- hostPath ----------------------------------------------------------------------------------------

DATA = PodPolicy(host_path_prefixes=("/data",))


def host_path_job(source: str) -> Job:
    return make_job(mounts=[{"name": "d", "type": "hostPath", "source": source, "mountPath": "/d"}])


@pytest.mark.parametrize("source,words", [
    ("/", "system directory /etc"),          # holds every system directory
    ("//", "system directory"),
    ("/etc", "is the node's system directory /etc"),
    ("/etc/", "system directory /etc"),
    ("/etc/kubernetes/pki", "lies under the node's system directory /etc"),
    ("/data/../etc", "'..'"),               # lexically /etc; through a symlink anything
    ("/data/./../../", "'..'"),
    ("/data/link/..", "'..'"),
    ("/var", "holds the node's system directory /var/run"),
    ("/var/run/docker.sock", "/var/run"),
    ("/run/containerd/containerd.sock", "/run"),
    ("/var/lib/kubelet/pods", "/var/lib/kubelet"),
    ("/proc/1/root", "/proc"),
    ("/sys/fs/cgroup", "/sys"),
    ("/dev", "/dev"),
    ("/root/.ssh", "/root"),
    ("/usr/bin", "/usr"),
    ("/lib64", "/lib64"),
    ("//etc//./passwd", "/etc"),
    ("data/sets", "not an absolute path"),
    ("./data", "not an absolute path"),
    ("/database", "under no directory this server lets hostPath mounts use (allowed: /data)"),
    ("/srv/data", "allowed: /data"),
])
def test_a_host_path_outside_the_allowed_prefixes_or_on_the_system_is_refused(source, words):
    (f,) = errors(check_pod_policy(host_path_job(source), DATA), "HostPathNotAllowed")
    assert f.path == "spec.roles[0].mounts[0].source"
    assert f.message.startswith(f"spec.roles[0].mounts[0].source = {source!r}") and words in f.message
    assert f.hint


def test_no_host_path_at_all_by_default():
    (f,) = errors(check_pod_policy(host_path_job("/data/sets"), PodPolicy()), "HostPathNotAllowed")
    assert "(allowed: none)" in f.message and "--k8s-host-path-prefix" in f.hint


@pytest.mark.parametrize("source,rendered", [
    ("/data", "/data"), ("/data/sets", "/data/sets"), ("//data//sets/./v1/", "/data/sets/v1"),
])
def test_a_host_path_under_an_allowed_prefix_is_rendered_normalised(source, rendered):
    job = host_path_job(source)
    assert not check_pod_policy(job, DATA)
    (pod,) = pods(job, render.RenderOptions(policy=DATA))
    vol = next(v for v in pod["spec"]["volumes"] if "hostPath" in v)
    assert vol["hostPath"] == {"path": rendered, "type": "Directory"}


def test_render_refuses_a_host_path_preflight_would_have_refused():
    with pytest.raises(ValueError, match="'..'"):
        render.render_run(host_path_job("/data/../etc"), "r1")


@pytest.mark.parametrize("prefix", ["/", "/etc", "/var", "/var/run", "/usr/local", "relative",
                                    "/data/../etc"])
def test_the_server_refuses_a_host_path_prefix_that_would_expose_the_system(prefix, monkeypatch):
    monkeypatch.setenv("RLARK_K8S_HOST_PATH_PREFIXES", f"/data,{prefix}")
    with pytest.raises(ValueError, match="RLARK_K8S_HOST_PATH_PREFIXES"):
        settings.k8s_pod_policy()


def test_the_policy_from_the_servers_settings(monkeypatch):
    assert settings.k8s_pod_policy() == PodPolicy()  # nothing allowed by default
    monkeypatch.setenv("RLARK_K8S_HOST_PATH_PREFIXES", "/data/, //scratch")
    monkeypatch.setenv("RLARK_K8S_SERVICE_ACCOUNTS", "rl-worker")
    monkeypatch.setenv("RLARK_K8S_ALLOW_ROOT", "1")
    monkeypatch.setenv("RLARK_K8S_RUN_AS_USER", "2000")
    assert settings.k8s_pod_policy() == PodPolicy(allow_root=True, host_path_prefixes=("/data", "/scratch"),
                                                  service_accounts=("rl-worker",), run_as_user=2000)
    for var, value in (("RLARK_K8S_SERVICE_ACCOUNTS", "Not A Name"), ("RLARK_K8S_ALLOW_ROOT", "maybe"),
                       ("RLARK_K8S_RUN_AS_USER", "0")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError, match=var):
                settings.k8s_pod_policy()


def test_system_paths_are_judged_after_normalising():
    assert normalise_host_path("//a//b/./c/") == "/a/b/c"
    assert system_path("/") == "/etc" and system_path("/data") is None
    assert system_path("/variable") is None  # /var/run's parent is /var, not /variable


# --- ServiceAccounts -----------------------------------------------------------------------------------


def test_a_service_account_must_be_on_the_servers_allow_list():
    job = make_job(kubernetes={"serviceAccountName": "cluster-admin-sa"})
    (f,) = errors(check_pod_policy(job, PodPolicy()), "ServiceAccountNotAllowed")
    assert f.path == "spec.roles[0].kubernetes.serviceAccountName"
    assert "'cluster-admin-sa'" in f.message and "(allowed: none)" in f.message
    assert "--k8s-service-account" in f.hint
    allowed = PodPolicy(service_accounts=("rl-worker",))
    assert errors(check_pod_policy(job, allowed), "ServiceAccountNotAllowed")
    ok = make_job(kubernetes={"serviceAccountName": "rl-worker"})
    assert not check_pod_policy(ok, allowed)
    (pod,) = pods(ok, render.RenderOptions(policy=allowed))
    assert pod["spec"]["serviceAccountName"] == "rl-worker"


def test_the_pod_policy_is_part_of_the_kubernetes_preflight():
    """One list of checks: check_for_kubernetes (what check, submit and the console's review
    run on a Kubernetes server) includes the policy's Findings."""
    job = make_job(kubernetes={"runAsRoot": True, "serviceAccountName": "x"},
                   mounts=[{"name": "d", "type": "hostPath", "source": "/", "mountPath": "/d"}])
    codes = {f.code for f in check_for_kubernetes(job, None, policy=PodPolicy())}
    assert {"RootNotAllowed", "ServiceAccountNotAllowed", "HostPathNotAllowed"} <= codes


# --- the Run's network ----------------------------------------------------------------------------------


def test_a_run_has_a_network_policy_letting_only_its_own_pods_in():
    job = make_job()
    objs = render.render_run(job, "r1", render.RenderOptions(namespace="rl", owner=OWNER))
    (np,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert np["apiVersion"] == "networking.k8s.io/v1"
    assert np["metadata"]["name"] == "ppo-run-r1" and np["metadata"]["namespace"] == "rl"
    assert np["metadata"]["labels"] == render.run_labels(job, "r1")
    assert np["metadata"]["ownerReferences"] == [OWNER]
    run_pods = {"matchLabels": {render.LABEL_RUN: "r1"}}
    assert np["spec"] == {"podSelector": run_pods, "policyTypes": ["Ingress"],
                          "ingress": [{"from": [{"podSelector": run_pods}]}]}
    for pod in (o for o in objs if o["kind"] == "Pod"):  # every Pod of the Run is selected
        assert pod["metadata"]["labels"][render.LABEL_RUN] == "r1"
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert [p["port"] for p in svc["spec"]["ports"]] == [render.RAY_GCS_PORT]


# --- names another Job has --------------------------------------------------------------------------------


def roles(*names: str, workers: int = 1) -> list[dict]:
    return [{"name": n, "workers": workers, "image": "docker.io/rlinf/rlinf:0.3.0"} for n in names]


def test_colliding_pod_names_are_refused_naming_both_jobs_and_the_object():
    mine = make_job("a", roles("b-c"))
    theirs = job_to_dict(make_job("a-b", roles("c")))
    (f,) = check_name_collisions(mine, [("default", "a-b", theirs)])
    assert (f.code, f.severity, f.path) == ("NameCollision", "error", "spec.roles[0].name")
    assert "Job 'a' would create Pod a-b-c-0" in f.message and "Job 'a-b' (project 'default')" in f.message
    assert "role 'b-c', Worker 0 here, role 'c', Worker 0 there" in f.message
    # and the other way round
    (f,) = check_name_collisions(make_job("a-b", roles("c")), [("default", "a", job_to_dict(mine))])
    assert "Pod a-b-c-0" in f.message and "Job 'a'" in f.message


def test_names_that_only_look_alike_do_not_collide():
    mine = make_job("a", roles("b-c", "d", workers=4))
    others = [("default", "a-b", job_to_dict(make_job("a-b", roles("d")))),     # a-b-d-0
              ("default", "ab", job_to_dict(make_job("ab", roles("c")))),       # cannot collide
              ("default", "a-b-c", job_to_dict(make_job("a-b-c", roles("x"))))]  # a-b-c-x-0
    assert check_name_collisions(mine, others) == []


def test_a_job_of_the_same_name_in_another_project_of_the_namespace_collides_on_everything():
    mine = make_job("ppo", roles("head", workers=8))
    (f,) = check_name_collisions(mine, [("team-b", "ppo", job_to_dict(mine))])
    assert f.path == "spec.roles[0].name"
    assert "Pod ppo-head-0, Pod ppo-head-1, Pod ppo-head-2 and 6 more" in f.message  # 8 Pods, 1 Service
    assert "project 'team-b'" in f.message


@pytest.fixture
def k8s_service(tmp_path):
    from rlark.store import ProjectRow, Store

    store = Store(f"sqlite:///{tmp_path / 'rlark.db'}")
    with store.session() as s:  # team-b shares default's namespace; team-c has its own
        s.add(ProjectRow(name="team-b", namespace="rl-default"))
        s.add(ProjectRow(name="team-c"))
    yield JobService(store, runtime="kubernetes", namespace="rl", pod_policy=PodPolicy())
    store.dispose()


def doc(name: str, *role_names: str) -> dict:
    return job_to_dict(make_job(name, roles(*role_names)))


def test_the_job_service_refuses_a_job_whose_names_another_job_of_the_namespace_has(k8s_service):
    from rlark.services.errors import Invalid

    svc = k8s_service
    svc.create(doc("a-b", "c"))
    job, findings = svc.preflight(doc("a", "b-c"), rlinf=False)
    (f,) = errors(findings, "NameCollision")
    assert "Pod a-b-c-0" in f.message and "Job 'a-b'" in f.message
    with pytest.raises(Invalid) as refused:
        svc.create(doc("a", "b-c"))
    assert [f.code for f in refused.value.findings if f.severity == "error"] == ["NameCollision"]
    # the same Job in a project that shares the namespace, and one that does not
    assert errors(svc.preflight(doc("a", "b-c"), rlinf=False, project="team-b")[1], "NameCollision")
    assert not has_errors(svc.preflight(doc("a", "b-c"), rlinf=False, project="team-c")[1])
    # a Job is not its own neighbour: a new spec of Job a-b keeps its names
    svc.replace("a-b", doc("a-b", "c"))
    assert not has_errors(svc.preflight(doc("a-b", "c"), rlinf=False)[1])
