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

from rlark.findings import has_errors
from rlark.runtimes.kubernetes import render
from rlark.runtimes.kubernetes import settings as k8s_settings
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
        k8s_settings.pod_policy()


def test_the_policy_from_the_servers_settings(monkeypatch):
    assert k8s_settings.pod_policy() == PodPolicy()  # nothing allowed by default
    monkeypatch.setenv("RLARK_K8S_HOST_PATH_PREFIXES", "/data/, //scratch")
    monkeypatch.setenv("RLARK_K8S_SERVICE_ACCOUNTS", "rl-worker")
    monkeypatch.setenv("RLARK_K8S_ALLOW_ROOT", "1")
    monkeypatch.setenv("RLARK_K8S_RUN_AS_USER", "2000")
    assert k8s_settings.pod_policy() == PodPolicy(allow_root=True, host_path_prefixes=("/data", "/scratch"),
                                                  service_accounts=("rl-worker",), run_as_user=2000)
    for var, value in (("RLARK_K8S_SERVICE_ACCOUNTS", "Not A Name"), ("RLARK_K8S_ALLOW_ROOT", "maybe"),
                       ("RLARK_K8S_RUN_AS_USER", "0")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError, match=var):
                k8s_settings.pod_policy()


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


# --- CSI drivers, StorageClasses, tolerations: allow-lists, none allowed by default -------------------


def object_storage_job(**k8s) -> Job:
    return make_job(mounts=[{"name": "m", "type": "objectStorage", "source": "s3://b/p",
                             "mountPath": "/m", "kubernetes": k8s}])


def test_an_inline_csi_driver_must_be_on_the_servers_allow_list():
    job = object_storage_job(csiDriver="smb.csi.k8s.io", volumeAttributes={"source": "//fs/share"})
    (f,) = errors(check_pod_policy(job, PodPolicy()), "CsiDriverNotAllowed")
    assert f.path == "spec.roles[0].mounts[0].kubernetes.csiDriver"
    assert "'smb.csi.k8s.io'" in f.message and "(allowed: none)" in f.message
    assert "--k8s-csi-driver" in f.hint and "RLARK_K8S_CSI_DRIVERS" in f.hint
    assert errors(check_pod_policy(job, PodPolicy(csi_drivers=("gcsfuse.csi.storage.gke.io",))),
                  "CsiDriverNotAllowed")
    allowed = PodPolicy(csi_drivers=("smb.csi.k8s.io",))
    assert not check_pod_policy(job, allowed)
    (pod,) = pods(job, render.RenderOptions(policy=allowed))
    assert next(v for v in pod["spec"]["volumes"] if "csi" in v)["csi"]["driver"] == "smb.csi.k8s.io"


def test_a_storage_class_must_be_on_the_servers_allow_list_and_render_makes_no_claim_of_another():
    job = object_storage_job(storageClass="premium-rwx", size="10Ti")
    (f,) = errors(check_pod_policy(job, PodPolicy()), "StorageClassNotAllowed")
    assert f.path == "spec.roles[0].mounts[0].kubernetes.storageClass"
    assert "'premium-rwx'" in f.message and "--k8s-storage-class" in f.hint
    with pytest.raises(PolicyDenied, match="StorageClassNotAllowed"):
        render.render_claims(job, "r1", render.RenderOptions())
    allowed = PodPolicy(storage_classes=("premium-rwx",))
    (claim,) = render.render_claims(job, "r1", render.RenderOptions(policy=allowed))
    assert claim["spec"]["storageClassName"] == "premium-rwx"
    # a pvc mount names a claim that exists already: its class was chosen by whoever made it
    assert not check_pod_policy(make_job(mounts=[{"name": "c", "type": "pvc", "source": "ckpt",
                                                  "mountPath": "/c"}]), PodPolicy())


@pytest.mark.parametrize("toleration,rule,allowed", [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, "nvidia.com/gpu", True),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, "nvidia.com/gpu", True),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, "nvidia.com/gpu:NoSchedule", False),  # every effect
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, "nvidia.com/gpu:NoSchedule", False),
    ({"key": "pool", "value": "rl", "effect": "NoSchedule"}, "pool=rl:NoSchedule", True),
    ({"key": "pool", "value": "other", "effect": "NoSchedule"}, "pool=rl:NoSchedule", False),
    ({"key": "pool", "operator": "Exists", "effect": "NoSchedule"}, "pool=rl", False),  # every value
    ({"key": "pool", "value": "rl"}, "pool=rl", True),
    ({"operator": "Exists"}, "nvidia.com/gpu", False),  # an empty key tolerates every taint
    ({"operator": "Exists"}, "*", True),
    ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}, "nvidia.com/gpu", False),
])
def test_a_toleration_must_be_covered_by_the_servers_allow_list(toleration, rule, allowed):
    job = make_job(kubernetes={"tolerations": [toleration]})
    policy = PodPolicy.checked(tolerations=(rule,))
    found = errors(check_pod_policy(job, policy), "TolerationNotAllowed")
    assert bool(found) is not allowed
    if found:
        assert found[0].path == "spec.roles[0].kubernetes.tolerations[0]"
        assert f"(allowed: {rule})" in found[0].message and "--k8s-toleration" in found[0].hint


def test_no_toleration_at_all_by_default_and_the_renderer_refuses_one():
    job = make_job(kubernetes={"tolerations": [{"key": "rlark.io/reserved", "operator": "Exists"}]})
    (f,) = errors(check_pod_policy(job, PodPolicy()), "TolerationNotAllowed")
    assert "rlark.io/reserved (Exists) (every effect)" in f.message and "(allowed: none)" in f.message
    with pytest.raises(PolicyDenied, match="TolerationNotAllowed"):
        pods(job)
    (pod,) = pods(job, render.RenderOptions(policy=PodPolicy.checked(tolerations=("rlark.io/reserved",))))
    assert pod["spec"]["tolerations"] == [{"key": "rlark.io/reserved", "operator": "Exists"}]


def test_the_allow_lists_from_the_servers_settings(monkeypatch):
    monkeypatch.setenv("RLARK_K8S_CSI_DRIVERS", "gcsfuse.csi.storage.gke.io, s3.csi.aws.com")
    monkeypatch.setenv("RLARK_K8S_STORAGE_CLASSES", "csi-s3")
    monkeypatch.setenv("RLARK_K8S_TOLERATIONS", "nvidia.com/gpu:NoSchedule,pool=rl,*")
    policy = k8s_settings.pod_policy()
    assert policy.csi_drivers == ("gcsfuse.csi.storage.gke.io", "s3.csi.aws.com")
    assert policy.storage_classes == ("csi-s3",)
    assert [str(r) for r in policy.tolerations] == ["nvidia.com/gpu:NoSchedule", "pool=rl", "*"]
    for var, value in (("RLARK_K8S_CSI_DRIVERS", "-bad"), ("RLARK_K8S_STORAGE_CLASSES", "Not A Class"),
                       ("RLARK_K8S_TOLERATIONS", "gpu:Sometimes"),
                       ("RLARK_K8S_TOLERATIONS", "bad key!")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError, match=var):
                k8s_settings.pod_policy()


def test_the_allow_lists_are_part_of_the_kubernetes_preflight():
    job = make_job(kubernetes={"tolerations": [{"key": "x", "operator": "Exists"}]},
                   mounts=[{"name": "a", "type": "objectStorage", "source": "s3://b/p",
                            "mountPath": "/a", "kubernetes": {"csiDriver": "s3.csi.aws.com"}},
                           {"name": "b", "type": "objectStorage", "source": "s3://b/q",
                            "mountPath": "/b", "kubernetes": {"storageClass": "csi-s3"}}])
    codes = {f.code for f in check_for_kubernetes(job, None, policy=PodPolicy())}
    assert {"TolerationNotAllowed", "CsiDriverNotAllowed", "StorageClassNotAllowed"} <= codes


# --- no path renders a forbidden Pod ------------------------------------------------------------------


@pytest.mark.parametrize("head,code", [
    ({"mounts": [{"name": "r", "type": "hostPath", "source": "/", "mountPath": "/host"}]},
     "HostPathNotAllowed"),
    ({"kubernetes": {"serviceAccountName": "cluster-admin-sa"}}, "ServiceAccountNotAllowed"),
    ({"kubernetes": {"runAsRoot": True}}, "RootNotAllowed"),
    ({"kubernetes": {"tolerations": [{"operator": "Exists"}]}}, "TolerationNotAllowed"),
])
def test_every_render_path_refuses_a_job_beyond_the_policy(head, code):
    """render_run (`rlark render`), render_pod (the runtime's launch, one Pod at a time) and
    the runtime's own check before it creates anything all raise, naming the field."""
    from rlark.ranks import plan_workers
    from rlark.runtimes.kubernetes.podpolicy import enforce

    job = make_job(**head)
    opts = render.RenderOptions(namespace="rl", owner=OWNER)
    for attempt in (lambda: render.render_run(job, "r1", opts),
                    lambda: render.render_pod(job, plan_workers(job)[0], {}, "r1", opts),
                    lambda: enforce(job, PodPolicy())):
        with pytest.raises(PolicyDenied) as refused:
            attempt()
        assert [f.code for f in refused.value.findings] == [code]
        assert str(refused.value).startswith("PolicyDenied: ") and "nothing was created" in str(refused.value)


# --- Kubernetes Secrets a Job may name ---------------------------------------------------------------


def secret_job() -> Job:
    return make_job(env=[
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}},
        {"name": "STOLEN", "valueFrom": {"secretKeyRef": {"name": "rlark-secret-key", "key": "nope"}}},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "RLARK_X", "valueFrom": {"secretKeyRef": {"name": "ignored", "key": "k"}}},
    ])


def test_a_kubernetes_secret_is_allowed_only_when_labelled_for_the_project():
    from rlark.runtimes.kubernetes.podpolicy import SecretInfo, check_secret_refs

    secrets = {
        # RLark's own Secret: exists, not labelled; its keys must never show
        "rlark-secret-key": SecretInfo({"app": "rlark"}, frozenset({"key", "fernet-old"})),
        "hf": SecretInfo({"rlark.io/project": "team-a"}, frozenset({"token"})),
    }
    looked: list[str] = []

    def lookup(name):
        looked.append(name)
        return secrets.get(name)

    managed = {("wandb", "api_key")}  # RLark's own secret of the project: not looked up
    found = check_secret_refs(secret_job(), managed, "team-a", "rlark-team-a", lookup)
    assert [(f.code, f.path) for f in found] == [
        ("SecretNotAllowed", "spec.roles[0].env[1].valueFrom.secretKeyRef.name")]
    assert looked == ["rlark-secret-key", "hf"]  # each once; RLARK_X is never rendered
    found = check_secret_refs(secret_job(), managed, "team-b", "rlark-team-b", secrets.get)
    assert [f.path for f in found] == ["spec.roles[0].env[1].valueFrom.secretKeyRef.name",
                                       "spec.roles[0].env[2].valueFrom.secretKeyRef.name"]
    # a namespace's runtime knows the projects mapped there, not the Job's: any of them will do
    assert check_secret_refs(secret_job(), managed, "team-a", "ns", secrets.get,
                             projects=["team-b", "team-a"])[0].path.endswith("env[1].valueFrom.secretKeyRef.name")


def test_an_unlabelled_secret_reads_exactly_like_a_missing_one():
    from rlark.runtimes.kubernetes.podpolicy import SecretInfo, check_secret_refs

    job = make_job(env=[{"name": "STOLEN", "valueFrom": {"secretKeyRef": {
        "name": "rlark-secret-key", "key": "nope"}}}])
    exists = {"rlark-secret-key": SecretInfo({}, frozenset({"key", "fernet-old"}))}
    (a,) = check_secret_refs(job, (), "default", "rlark-default", exists.get)
    (b,) = check_secret_refs(job, (), "default", "rlark-default", lambda name: None)
    labelled_elsewhere = {"rlark-secret-key": SecretInfo({"rlark.io/project": "other"},
                                                         frozenset({"key"}))}
    (c,) = check_secret_refs(job, (), "default", "rlark-default", labelled_elsewhere.get)
    assert a == b == c
    assert (a.code, a.severity, a.path) == ("SecretNotAllowed", "error",
                                            "spec.roles[0].env[0].valueFrom.secretKeyRef.name")
    text = a.message + a.hint
    assert "'rlark-secret-key'" in text and "fernet-old" not in text and "'key'" not in text
    assert "kubectl label secret rlark-secret-key -n rlark-default rlark.io/project=default" in a.hint
    assert "rlark secret set rlark-secret-key" in a.hint


def test_an_allowed_secret_must_have_the_key_but_its_keys_are_not_listed():
    from rlark.runtimes.kubernetes.podpolicy import SecretInfo, check_secret_refs

    job = make_job(env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tokn"}}}])
    allowed = {"hf": SecretInfo({"rlark.io/project": "default"}, frozenset({"token", "other"}))}
    (f,) = check_secret_refs(job, (), "default", "rlark-default", allowed.get)
    assert (f.code, f.path) == ("SecretNotFound", "spec.roles[0].env[0].valueFrom.secretKeyRef.key")
    assert "'tokn'" in f.message
    assert "token" not in f.message + f.hint and "other" not in f.message + f.hint  # no key listed
    ok = make_job(env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}])
    assert check_secret_refs(ok, (), "default", "rlark-default", allowed.get) == []


def test_a_secret_rlark_could_not_read_is_not_allowed():
    from rlark.runtimes.kubernetes.client import KubeError
    from rlark.runtimes.kubernetes.podpolicy import check_secret_refs

    def refused(name):
        raise KubeError('secrets "hf" is forbidden', 403)

    job = make_job(env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}])
    with pytest.raises(KubeError):
        check_secret_refs(job, (), "default", "rlark-default", refused)


# --- the policy at every launch path of the JobService -------------------------------------------------


def test_start_and_restart_hold_the_stored_spec_to_todays_policy(tmp_path):
    """A Job stored while a laxer policy held (or written into the store directly) is refused
    at start and restart under the server's policy now, and no Run is made."""
    from sqlalchemy import func, select

    from rlark.services.errors import Invalid
    from rlark.store import JobRow, RunRow, Store

    store = Store(f"sqlite:///{tmp_path / 'rlark.db'}")
    try:
        lax = JobService(store, runtime="kubernetes", namespace="rl",
                         pod_policy=PodPolicy.checked(tolerations=("*",)))
        tolerant = job_to_dict(make_job("tolerant", kubernetes={"tolerations": [{"operator": "Exists"}]}))
        lax.create(tolerant)
        with store.session() as s:  # hostPath / can never pass a submit: written directly
            row = s.scalar(select(JobRow).where(JobRow.name == "tolerant"))
            evil = job_to_dict(make_job("evil", mounts=[{"name": "r", "type": "hostPath",
                                                          "source": "/", "mountPath": "/host"}]))
            s.add(JobRow(project_id=row.project_id, name="evil", spec=evil, labels={},
                         findings=[], phase="Stopped"))
        strict = JobService(store, runtime="kubernetes", namespace="rl", pod_policy=PodPolicy())
        with store.session() as s:
            runs = s.scalar(select(func.count()).select_from(RunRow))
        for name, code in (("tolerant", "TolerationNotAllowed"), ("evil", "HostPathNotAllowed")):
            for action in (strict.start, strict.restart):
                with pytest.raises(Invalid) as refused:
                    action(name)
                assert [f.code for f in refused.value.findings] == [code], (name, action)
                assert "cannot start a new Run on this server" in refused.value.message
        with store.session() as s:
            assert s.scalar(select(func.count()).select_from(RunRow)) == runs
        assert lax.restart("tolerant")["currentRun"]["number"] == 2  # the lax server still may
    finally:
        store.dispose()
