"""A Pod of another namespace cannot join a Run's Ray cluster without its token (issue 18 item 7),
on the test bed's real node, where Pods run Ray for real.

RLark's own parts (controller, Kubernetes runtime, as ``rlark server --runtime kubernetes``
wires them) start a one-Worker Run in one project's namespace; its GCS takes only the Run's
token (a per-Run Secret). From another project's namespace, a Pod of the same image tries
``ray start --address=<the Run's head>`` without a token and with a wrong one: neither joins.
The same Pod with the Run's own token (read by the test from the Run's Secret) joins: the network
reaches the head (the real node enforces no NetworkPolicy), so only the token keeps the others
out. The node table the head's driver reads then holds the head and the last Pod, nothing else.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests import waits
from tests.k8s_testbed import RlarkOnK8s, restricted, setup_timeout

pytestmark = [pytest.mark.ray, pytest.mark.timeout(setup_timeout(real_node=True))]

WAIT = 240

#: what the Pod of the other namespace does: join the head as a Ray node (bounded), then, when it
#: joined, list the cluster's nodes from a driver on its own node
INTRUDE = r"""
set +e
echo "IP $(hostname -i)"
timeout 60 ray start --address="$HEAD" --num-cpus=0 --disable-usage-stats > /tmp/start.log 2>&1
code=$?
echo "START $code"
tail -n 5 /tmp/start.log | sed 's/^/start: /'
if [ $code = 0 ]; then
  python -c "import json, ray; ray.init(address='auto'); print('NODES ' + json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))"
fi
"""


def pod(tb, name: str, head: str, env: dict[str, str]) -> dict:
    return restricted({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "worker", "image": tb.image, "imagePullPolicy": "IfNotPresent",
                                 "command": ["bash", "-c", INTRUDE],
                                 "env": [{"name": "HEAD", "value": head}]
                                 + [{"name": k, "value": v} for k, v in env.items()]}]},
    })


def wait_until(what: str, predicate, timeout: float = WAIT, interval: float = 0.3):
    """tests.waits.wait_until, bounded by this module's WAIT s by default."""
    return waits.wait_until(what, predicate, timeout, interval)


def run_pods(tb, namespace: str, *bodies: dict) -> list[str]:
    """Create the Pods (as the cluster's admin) all at once, wait for each to end, return their
    logs in the same order."""
    names = [body["metadata"]["name"] for body in bodies]
    for body in bodies:
        tb.admin().create_namespaced_pod(namespace, body)
    for name in names:
        wait_until(f"Pod {name} to end", lambda: tb.admin().read_namespaced_pod(name, namespace)
                   .status.phase in ("Succeeded", "Failed"))
    return [tb.admin().read_namespaced_pod_log(name, namespace, container="worker") for name in names]


def test_a_pod_of_another_namespace_cannot_join_a_runs_ray_cluster_without_its_token(
        k8s_real_node, rlark_home):
    tb = k8s_real_node
    victim_ns, other_ns = tb.project_namespace(), tb.project_namespace()
    home = rlark_home
    rlark = RlarkOnK8s(tb, victim_ns, home, preflight=False)
    try:
        rlark.submit(json.dumps({
            "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "victim"},
            "spec": {"headRole": "head", "runScript": "echo victim-up; sleep 600",
                     "failurePolicy": {"joinTimeoutSeconds": 180},
                     "roles": [{"name": "head", "workers": 1, "image": tb.image,
                                "resources": {"cpu": 1, "memory": "1Gi",
                                              "objectStoreMemory": "100Mi"}}]}}))
        job = rlark.wait_phase("victim", "Running", timeout=WAIT)
        uid = job["currentRun"]["uid"]
        secret = tb.admin().read_namespaced_secret(f"victim-run-{uid}-ray", victim_ns)
        token = base64.b64decode(secret.data["token"]).decode()
        head = f"victim-head.{victim_ns}.svc:6379"
        head_ip = tb.admin().read_namespaced_pod("victim-head-0", victim_ns).status.pod_ip

        # the two refused ones at once (each a whole `ray start` that Ray turns away)
        no_token, wrong = run_pods(tb, other_ns, pod(tb, "no-token", head, {}), pod(
            tb, "wrong-token", head, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 43}))
        for log in (no_token, wrong):
            assert "START 0" not in log and "NODES" not in log, log
            # it reached the head and was refused by Ray's token authentication
            assert "START 1" in log and "InvalidAuthToken" in log, log
        [right] = run_pods(tb, other_ns, pod(tb, "with-token", head,
                                             {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}))
        assert "START 0" in right, right
        nodes = [json.loads(line[6:]) for line in right.splitlines() if line.startswith("NODES ")]
        intruder_ip = next(line.split()[1] for line in right.splitlines() if line.startswith("IP "))
        # the Run's head and the one Pod that had the token: the two refused never joined
        assert head_ip and nodes == [sorted([head_ip, intruder_ip])], (head_ip, right)
        assert rlark.job("victim")["phase"] == "Running"
    finally:
        rlark.close()
        for ns in (victim_ns, other_ns):
            tb.delete_namespace(ns)
