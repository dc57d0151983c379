"""``rlark render``, ``rlark nodes`` and ``rlark server --runtime`` (the real command in a
subprocess; ``nodes`` against a real HTTP server)."""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from rlark.runtimes.kubernetes.capacity import parse_nodes
from rlark.services.jobs import JobService
from rlark.store import Store
from tests.conftest import EXAMPLES
from tests.server import ThreadedServer, free_port
from tests.test_cli import cli_env, error_line, rlark
from tests.test_k8s_capacity import AKS, DGX, K8S_NODE1

QUICKSTART = EXAMPLES / "quickstart" / "job.yaml"


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
                                           "source": "s3://b/p", "mountPath": "/m"}]
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


@pytest.fixture
def k8s_server(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    nodes = parse_nodes([K8S_NODE1, AKS, DGX])
    server = ThreadedServer(JobService(store, runtime="kubernetes",
                                       inventory=lambda: (nodes, "namespace", None))).start()
    yield server.url
    server.stop()
    store.dispose()


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
    assert data["runtime"] == "kubernetes" and len(data["items"]) == 3


def test_server_without_a_kubernetes_configuration_says_so(tmp_path):
    env = {k: v for k, v in cli_env().items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(tmp_path / "none"), RLARK_HOME=str(tmp_path / "home"))
    proc = rlark("server", "--runtime", "kubernetes", "--port", str(free_port()), env=env)
    assert proc.returncode == 1
    line = error_line(proc)
    assert "no Kubernetes configuration: not in a Pod" in line and "no usable kubeconfig" in line
