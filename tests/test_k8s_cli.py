"""``rlark render``, ``rlark nodes`` and ``rlark server --runtime`` (the real command in a
subprocess; ``nodes`` against the server ``rlark server --runtime kubernetes`` builds, on the
Kubernetes test bed, whose Nodes it lists)."""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from tests.conftest import EXAMPLES
from tests.k8s_testbed import KWOK_NODE_IP, RlarkOnK8s, wait_for
from tests.server import free_port
from tests.test_cli import cli_env, error_line, rlark
from tests.test_k8s_capacity import AKS, DGX, K8S_NODE1

QUICKSTART = EXAMPLES / "quickstart" / "job.yaml"
DEPLOY = EXAMPLES.parent / "deploy" / "kubernetes"
#: the Nodes test_nodes_lists_the_inventory makes on the test bed
NAMES = [n["metadata"]["name"] for n in (K8S_NODE1, AKS, DGX)]


def test_render_prints_a_yaml_stream_kubectl_can_apply():
    proc = rlark("render", str(QUICKSTART), "--runtime", "kubernetes", "--namespace", "rl",
                 "--run-id", "abc123")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# RLark Job quickstart, run abc123: 3 Workers in namespace rl\n")
    assert ("# remove: kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -n rl "
            "-l rlark.io/run=abc123") in proc.stdout
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "quickstart-run-abc123"), ("Secret", "quickstart-run-abc123-ray"),
        ("Service", "quickstart-head"), ("NetworkPolicy", "quickstart-run-abc123"),
        ("Pod", "quickstart-head-0"), ("Pod", "quickstart-pool-0"), ("Pod", "quickstart-pool-1")]
    ranks = [{e["name"]: e.get("value") for e in d["spec"]["containers"][0]["env"]}["RLINF_NODE_RANK"]
             for d in docs[4:]]
    assert ranks == ["0", "1", "2"]
    # a Ray token of the Run's own, which every Pod takes from its Secret (never in a Pod)
    token = base64.b64decode(docs[1]["data"]["token"]).decode()
    assert len(token) >= 32 and token not in "".join(yaml.safe_dump(d) for d in docs[4:])
    for pod in docs[4:]:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "quickstart-run-abc123-ray", "key": "token"}}
    again = rlark("render", str(QUICKSTART), "--run-id", "abc123")
    assert list(yaml.safe_load_all(again.stdout))[1]["data"] != docs[1]["data"]  # new each time
    assert all(d["metadata"]["namespace"] == "rl" for d in docs)
    # the resolved workingDir is a path of this machine: said, not refused
    assert "WorkingDirInImage" in proc.stderr


def test_render_makes_a_run_id_and_refuses_other_runtimes_and_bad_jobs(tmp_path):
    proc = rlark("render", str(QUICKSTART))
    assert proc.returncode == 0
    run_id = list(yaml.safe_load_all(proc.stdout))[0]["metadata"]["labels"]["rlark.io/run"]
    assert len(run_id) == 12
    proc = rlark("render", str(QUICKSTART), "--runtime", "local")
    assert proc.returncode == 1 and "only kubernetes has objects to render" in error_line(proc)
    proc = rlark("render", str(QUICKSTART), "--run-id", "Bad_Id")
    assert proc.returncode == 1 and "run id 'Bad_Id'" in error_line(proc)
    data = yaml.safe_load(QUICKSTART.read_text())
    data["spec"]["roles"][0]["mounts"] = [{"name": "m", "type": "objectStorage",
                                           "source": "s3://bkt/p", "mountPath": "/m",
                                           "objectStorage": {"mode": "fuse"}}]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    proc = rlark("render", str(bad))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "ObjectStorageNeedsDriver" in proc.stderr and "nothing was rendered" in error_line(proc)


def test_render_applies_the_pod_policy_of_this_machines_settings(tmp_path):
    """`rlark render` refuses what a server with the same settings would (hostPath: none
    allowed by default), and renders it once the prefix is allowed."""
    data = yaml.safe_load(QUICKSTART.read_text())
    data["spec"]["roles"][0]["mounts"] = [{"name": "d", "type": "hostPath", "source": "/data/sets",
                                           "mountPath": "/d"}]
    job = tmp_path / "hostpath.yaml"
    job.write_text(yaml.safe_dump(data))
    proc = rlark("render", str(job))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "HostPathNotAllowed" in proc.stderr and "--k8s-host-path-prefix" in proc.stderr
    proc = rlark("render", str(job), env=cli_env(RLARK_K8S_HOST_PATH_PREFIXES="/data"))
    assert proc.returncode == 0, proc.stderr
    assert "path: /data/sets" in proc.stdout
    proc = rlark("render", str(job), env=cli_env(RLARK_K8S_HOST_PATH_PREFIXES="/var"))
    assert proc.returncode == 1 and "system directory /var/run" in error_line(proc)


def test_server_refuses_a_host_path_prefix_on_the_system(tmp_path):
    proc = rlark("server", "--runtime", "kubernetes", "--k8s-host-path-prefix", "/", "--port",
                 str(free_port()), env=cli_env(RLARK_HOME=str(tmp_path / "home"),
                                               KUBECONFIG=str(tmp_path / "none")))
    assert proc.returncode == 1 and "--k8s-host-path-prefix: '/'" in error_line(proc)


@pytest.mark.parametrize("args,words", [
    (("render", "--help"), ["--runtime", "--namespace", "--run-id", "kubectl apply"]),
    (("nodes", "--help"), ["--format", "--show-labels", "allocatable", "GPUs", "devices"]),
    (("server", "--help"), ["--runtime", "kubernetes", "--namespace", "--no-auth", "--allowed-host",
                            "--k8s-allow-root", "--k8s-host-path-prefix", "--k8s-service-account",
                            "--k8s-csi-driver", "--k8s-storage-class", "--k8s-toleration",
                            "$RLARK_HOME/credentials", "--leader-elect", "--no-leader-elect",
                            "rlark-controller", "takes over"]),
])
def test_help(args, words):
    proc = rlark(*args)
    assert proc.returncode == 0
    for word in words:
        assert word in proc.stdout


def test_leader_election_needs_kubernetes(tmp_path):
    proc = rlark("server", "--leader-elect", "--port", str(free_port()),
                 env=cli_env(RLARK_HOME=str(tmp_path / "home")))
    assert proc.returncode == 1
    assert "--leader-elect needs --runtime kubernetes" in error_line(proc)


def test_server_refuses_an_unknown_runtime():
    proc = rlark("server", "--runtime", "slurm", "--port", str(free_port()))
    assert proc.returncode == 1 and "--runtime 'slurm' is not supported" in error_line(proc)


def kwok_node(spec: dict) -> dict:
    """The Node object of one of tests/test_k8s_capacity.py's Node specs, for the test bed's
    API server: its labels, taints and allocatable (its capacity too), managed by kwok (the
    test bed's annotation), which reports it Ready."""
    status = spec["status"]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": spec["metadata"]["name"], "labels": spec["metadata"]["labels"],
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {**spec["spec"], "providerID": f"kwok://{spec['metadata']['name']}"},
            "status": {"allocatable": status["allocatable"], "capacity": status["allocatable"],
                       "phase": "Running",
                       # both, as scripts/k8s-testbed's Nodes: kwok empties a list of one
                       "addresses": [{"type": "InternalIP", "address": KWOK_NODE_IP},
                                     {"type": "Hostname", "address": spec["metadata"]["name"]}]}}


@pytest.fixture
def k8s_server(k8s_testbed, k8s_namespace, rlark_home):
    """The address of the server ``rlark server --runtime kubernetes`` builds (RlarkOnK8s) on the
    test bed, served over HTTP, with the Nodes K8S_NODE1, AKS and DGX made there (kwok's) and
    Ready; they are deleted afterwards. RLark is deployed without the optional
    deploy/kubernetes/rbac-capacity.yaml for the test (the test bed's ClusterRole
    ``rlark-pod-reader`` emptied, put back after): it may list Pods of its own namespace only,
    and ``rlark nodes`` says what free capacity then counts."""
    core, rbac = k8s_testbed.admin(), k8s_testbed.rbac()
    capacity = [d for d in yaml.safe_load_all((DEPLOY / "rbac-capacity.yaml").read_text())
                if d["kind"] == "ClusterRole"][0]
    made = [kwok_node(n) for n in (K8S_NODE1, AKS, DGX)]
    names = [n["metadata"]["name"] for n in made]
    rbac.replace_cluster_role(capacity["metadata"]["name"], {**capacity, "rules": []})
    for node in made:
        core.create_node(node)
    try:
        k8s_testbed.wait_rbac("list", "pods", "default", allowed=False)

        def ready():
            conditions = {n: {c.type: c.status for c in (core.read_node(n).status.conditions or [])}
                          for n in names}
            return all(c.get("Ready") == "True" for c in conditions.values())

        wait_for("the test's kwok Nodes to be Ready", ready, 60)
        server = RlarkOnK8s(k8s_testbed, k8s_namespace, rlark_home)
        try:
            yield server.serve()
        finally:
            server.close()
    finally:
        for name in names:
            core.delete_node(name)
        rbac.replace_cluster_role(capacity["metadata"]["name"], capacity)
        k8s_testbed.wait_rbac("list", "pods", "default", allowed=True)


def test_nodes_lists_the_inventory(k8s_server):
    proc = rlark("nodes", env=cli_env(RLARK_SERVER=k8s_server))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "CPU", "FREE/ALLOC", "MEMORY", "FREE/ALLOC", "GPU",
                                "FREE/ALLOC", "DEVICES", "TAINTS"]
    dgx = next(line.strip() for line in lines if line.strip().startswith("dgx-1"))
    assert dgx.split()[1:] == ["Ready", "224/224", "1968.1Gi/1968.1Gi", "8/8", "rdma/hca=1/1", "-"]
    assert "own namespace" in proc.stdout or "RLark's namespace only" in proc.stdout
    proc = rlark("nodes", "--show-labels", env=cli_env(RLARK_SERVER=k8s_server))
    assert proc.stdout.splitlines()[0].split()[-2:] == ["TAINTS", "LABELS"]
    dgx = next(line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("dgx-1"))
    assert dgx.split()[-1] == "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
    data = json.loads(rlark("nodes", "-o", "json", env=cli_env(RLARK_SERVER=k8s_server)).stdout)
    # the test bed's own Nodes are listed too: the test's three each once
    listed = [item["name"] for item in data["items"]]
    assert data["runtime"] == "kubernetes"
    assert sorted(n for n in listed if n in NAMES) == sorted(NAMES)


def test_server_without_a_kubernetes_configuration_says_so(tmp_path):
    env = {k: v for k, v in cli_env().items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "none"), RLARK_HOME=str(tmp_path / "home"))
    proc = rlark("server", "--runtime", "kubernetes", "--port", str(free_port()), env=env)
    assert proc.returncode == 1
    line = error_line(proc)
    assert "no Kubernetes configuration: not in a Pod" in line and "no usable kubeconfig" in line
