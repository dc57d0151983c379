"""The test bed's real node (``scripts/k8s-testbed up --real-node``): a kubelet that runs Pods in
containers (containerd, runc, a CNI bridge, CoreDNS), with the Worker image the test bed built
from Debian's packages and PyPI (no registry: ``imagePullPolicy: IfNotPresent``).

Each test proves one link of the chain RLark's Kubernetes runtime relies on, through RLark's own
code where it has some: a restricted Pod runs and its log comes back through the API server;
RLark's rendered Run (headless Service, Pods, bootstrap) forms a 2-node Ray cluster across two
Pods, the second finding the head by the Service's DNS name; the Pod status carries the image
digest, Pod IP and node (RLark's ``facts_of``); a container killed from outside ends with a
non-zero exit code (RLark's ``interpret``).

The module is marked ``ray`` (it starts Ray nodes, in Pods) and uses the real-node test bed, so
it runs in the ``k8s`` serial group, one test at a time (tests/xdist_groups.py).
"""

from __future__ import annotations

import ipaddress
import json
import signal
import time
import uuid

import pytest

from tests import waits
from tests.k8s_testbed import REAL_NODE, restricted, setup_timeout

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client.rest import ApiException  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(setup_timeout(real_node=True))]

WAIT = 180  # seconds: bound of each wait for a Pod (a cold container start on 2 busy cores)


def wait_until(what: str, predicate, timeout: float = WAIT):
    """tests.waits.wait_until, bounded by this module's WAIT s by default."""
    return waits.wait_until(what, predicate, timeout)


def pod_dict(tb, namespace: str, name: str) -> dict | None:
    """The Pod as RLark's own client reads it (a dict, as the API returns it), as RLark's
    ServiceAccount; None once it is gone."""
    from rlark.runtimes.kubernetes.client import KubeClient

    return KubeClient(tb.core_v1(), namespace).get("Pod", name)


def existing_pod(tb, namespace: str, name: str) -> dict:
    """:func:`pod_dict` of a Pod that must exist (fails naming it otherwise)."""
    pod = pod_dict(tb, namespace, name)
    if pod is None:
        pytest.fail(f"Pod {namespace}/{name} does not exist", pytrace=False)
    return pod


def phase(tb, namespace: str, name: str) -> str | None:
    pod = pod_dict(tb, namespace, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


def wait_phase(tb, namespace: str, name: str, phases: tuple[str, ...], timeout: float = WAIT) -> str:
    """The Pod's phase once it is one of ``phases`` (fails naming the last phase seen)."""
    return wait_until(f"Pod {name} to be {' or '.join(phases)}",
                      lambda: (p := phase(tb, namespace, name)) in phases and p, timeout)


def describe(tb, namespace: str, name: str) -> str:
    """The Pod's status and Events, for a failure message."""
    pod = pod_dict(tb, namespace, name) or {}
    events = tb.admin().list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    lines = [f"{e.reason}: {e.message}" for e in events]
    return json.dumps(pod.get("status"), indent=1)[:3000] + "\nevents:\n" + "\n".join(lines)


def worker_pod(tb, name: str, command: list[str]) -> dict:
    """A Pod of one container ``worker`` (RLark's container name) running ``command`` in the test
    bed's Worker image, with the "restricted" securityContext RLark's Pods have."""
    return restricted({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "worker", "image": tb.image, "imagePullPolicy": "IfNotPresent",
                            "command": command}],
        },
    })


@pytest.fixture
def real_ns(k8s_real_node):
    """A fresh project namespace (Pod Security "restricted" enforced, RLark's Role bound) on the
    real-node test bed, deleted with everything in it afterwards."""
    name = k8s_real_node.project_namespace()
    try:
        yield name
    finally:
        k8s_real_node.delete_namespace(name)


def test_restricted_pod_runs_and_its_log_comes_back_through_the_api_server(k8s_real_node, real_ns):
    """A Pod as restricted as RLark's (uid 1000, no capabilities, seccomp RuntimeDefault, no
    privilege escalation), created as RLark's ServiceAccount in a namespace enforcing Pod Security
    "restricted", runs its command on the real node in the test bed's image; what the process saw
    of itself comes back as its log through the API server (and the kubelet)."""
    tb = k8s_real_node
    # what the container itself sees of its identity and confinement
    probe = ("import json, os; s = dict(l.split(':', 1) for l in open('/proc/self/status'));"
             "print('PROBE ' + json.dumps({'uid': os.getuid(), 'gid': os.getgid(),"
             " 'cap_eff': s['CapEff'].strip(), 'seccomp': s['Seccomp'].strip(),"
             " 'no_new_privs': s['NoNewPrivs'].strip(), 'hostname': os.uname().nodename}))")
    body = worker_pod(tb, "plain", ["python", "-c", probe])
    tb.core_v1().create_namespaced_pod(real_ns, body)  # as RLark's ServiceAccount
    ended = wait_phase(tb, real_ns, "plain", ("Succeeded", "Failed"))
    assert ended == "Succeeded", describe(tb, real_ns, "plain")

    log = tb.core_v1().read_namespaced_pod_log("plain", real_ns, container="worker")
    probes = [json.loads(line.split(" ", 1)[1]) for line in log.splitlines() if line.startswith("PROBE ")]
    assert probes == [{"uid": 1000, "gid": 1000, "cap_eff": "0000000000000000", "seccomp": "2",
                       "no_new_privs": "1", "hostname": "plain"}], log
    assert existing_pod(tb, real_ns, "plain")["spec"]["nodeName"] == REAL_NODE


def test_cluster_dns_answers_a_headless_services_names_inside_pods(k8s_real_node, real_ns):
    """CoreDNS (the kubelet's clusterDNS, the Pods' resolv.conf search list): a headless
    Service's short and namespaced names and its Pod's own name (hostname.subdomain) answer the
    Pod's IP from another Pod; a name nobody has does not resolve."""
    tb = k8s_real_node
    admin = tb.admin()
    admin.create_namespaced_service(real_ns, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "hl"},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "hl"},
                 "ports": [{"name": "gcs", "port": 6379}]}})
    member = worker_pod(tb, "member", ["python", "-c", "import time; time.sleep(600)"])
    member["metadata"]["labels"] = {"app": "hl"}
    member["spec"].update(hostname="m0", subdomain="hl")
    admin.create_namespaced_pod(real_ns, member)
    wait_phase(tb, real_ns, "member", ("Running",))
    member_ip = existing_pod(tb, real_ns, "member")["status"]["podIP"]
    names = ["hl", f"hl.{real_ns}.svc", f"hl.{real_ns}.svc.cluster.local", "m0.hl",
             f"m0.hl.{real_ns}.svc.cluster.local", f"nosuch.{real_ns}.svc"]
    # bounded retries inside the Pod: the EndpointSlice reaches CoreDNS a moment after the Pod's IP
    lookup = ("import json, socket, sys, time\n"
              "def ip(n):\n"
              "    try: return socket.gethostbyname(n)\n"
              "    except OSError: return None\n"
              "deadline = time.time() + 60\n"
              "while not ip(sys.argv[1]) and time.time() < deadline: time.sleep(0.2)\n"
              "print('DNS ' + json.dumps({n: ip(n) for n in sys.argv[1:]}))\n")
    admin.create_namespaced_pod(real_ns, worker_pod(tb, "asker", ["python", "-c", lookup, *names]))
    ended = wait_phase(tb, real_ns, "asker", ("Succeeded", "Failed"))
    log = tb.core_v1().read_namespaced_pod_log("asker", real_ns, container="worker")
    assert ended == "Succeeded", log
    answers = [json.loads(line[4:]) for line in log.splitlines() if line.startswith("DNS ")]
    assert answers == [{**{n: member_ip for n in names[:-1]}, names[-1]: None}], log


def test_ray_cluster_forms_across_two_pods_through_the_headless_service(k8s_real_node, real_ns):
    """RLark's rendered Run (as ``rlark render`` makes it, created as RLark's ServiceAccount):
    the bootstrap starts Ray's head in one Pod; the other Pod's ``ray start`` finds it through
    the headless Service's DNS name (CoreDNS); the head's join barrier sees both ranks and its
    run script sees a 2-node cluster, one node per Pod IP."""
    from rlark.runtimes.kubernetes.client import KubeClient
    from rlark.runtimes.kubernetes.render import RenderOptions, head_address, render_run
    from rlark.runtimes.kubernetes.status import facts_of
    from rlark.spec import Job

    tb = k8s_real_node
    script = ("python -c \"import json, ray; ray.init(); "
              "print('NODES ' + json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))\"")
    resources = {"cpu": 1, "objectStoreMemory": "100Mi"}
    job = Job.model_validate({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": f"rn-{uuid.uuid4().hex[:6]}"},
        "spec": {"headRole": "head", "runScript": script, "roles": [
            {"name": "head", "workers": 1, "image": tb.image, "resources": resources},
            {"name": "worker", "workers": 1, "image": tb.image, "resources": resources},
        ]},
    })
    run_id = uuid.uuid4().hex[:12]
    objs = render_run(job, run_id, RenderOptions(namespace=real_ns))
    kube = KubeClient(tb.core_v1(), real_ns)
    for obj in objs:
        kube.create(obj)
    pods = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"]
    head, other = pods
    host = head_address(job, real_ns).rsplit(":", 1)[0]
    assert host == f"{job.name}-head.{real_ns}.svc"

    ended = wait_phase(tb, real_ns, head, ("Succeeded", "Failed"), timeout=300)
    head_log = tb.core_v1().read_namespaced_pod_log(head, real_ns, container="worker")
    assert ended == "Succeeded", f"{describe(tb, real_ns, head)}\nhead log:\n{head_log[-4000:]}\n" \
        f"other log:\n{tb.core_v1().read_namespaced_pod_log(other, real_ns, container='worker')[-4000:]}"

    ips = {name: facts_of(existing_pod(tb, real_ns, name))["podIP"] for name in pods}
    assert len(set(ips.values())) == 2, ips
    nodes = [json.loads(line.split(" ", 1)[1]) for line in head_log.splitlines() if line.startswith("NODES ")]
    assert nodes == [sorted(ips.values())], head_log[-4000:]
    # the bootstrap's join barrier: both ranks, each from its own Pod
    joined = [json.loads(line.split(" ", 1)[1]) for line in head_log.splitlines()
              if line.startswith("RLARK_EVENT ") and '"event": "nodes"' in line]
    assert joined and sorted((n["node_rank"], n["ip"]) for n in joined[-1]["joined"]) == \
        [(0, ips[head]), (1, ips[other])], joined


def test_pod_status_names_the_image_digest_pod_ip_and_node(k8s_real_node, real_ns):
    """RLark's run-record facts (``facts_of``) from a Pod the real kubelet reports: the image's
    manifest digest (the one the test bed imported), a Pod IP from the node's bridge network, the
    node and its address."""
    from rlark.runtimes.kubernetes.status import facts_of

    tb = k8s_real_node
    tb.core_v1().create_namespaced_pod(real_ns, worker_pod(tb, "facts", ["python", "-c", "print('ok')"]))
    ended = wait_phase(tb, real_ns, "facts", ("Succeeded", "Failed"))
    assert ended == "Succeeded", describe(tb, real_ns, "facts")
    facts = facts_of(existing_pod(tb, real_ns, "facts"))
    assert facts["image"] == tb.image
    assert facts["imageDigest"] == tb.image_digest
    assert facts["imageID"].endswith("@" + tb.image_digest)
    assert facts["node"] == REAL_NODE
    node = tb.admin().read_node(REAL_NODE)
    node_ip = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    assert facts["hostIP"] == node_ip
    assert ipaddress.ip_address(facts["podIP"]) in ipaddress.ip_network(f"{node_ip}/24", strict=False)
    assert facts["podIP"] != node_ip


def test_a_pods_cpu_limit_sets_no_quota_and_its_request_sets_its_share(k8s_real_node, real_ns):
    """The real node's kubelet runs with ``cpuCFSQuota: false`` (docs/kubernetes.md, "CPU:
    requests, not quotas"): a container limited to 500m has no CFS quota in its cgroup
    (``cpu.cfs_quota_us`` -1), and its request of 250m still sets its ``cpu.shares`` (250 x
    1024 / 1000 = 256, the kubelet's MilliCPUToShares)."""
    tb = k8s_real_node
    probe = ("print('CPU', open('/sys/fs/cgroup/cpu/cpu.cfs_quota_us').read().strip(),"
             " open('/sys/fs/cgroup/cpu/cpu.shares').read().strip())")
    body = worker_pod(tb, "cpu", ["python", "-c", probe])
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "250m", "memory": "64Mi"},
                                                  "limits": {"cpu": "500m", "memory": "256Mi"}}
    tb.core_v1().create_namespaced_pod(real_ns, body)
    ended = wait_phase(tb, real_ns, "cpu", ("Succeeded", "Failed"))
    assert ended == "Succeeded", describe(tb, real_ns, "cpu")
    log = tb.core_v1().read_namespaced_pod_log("cpu", real_ns, container="worker")
    assert [line.split()[1:] for line in log.splitlines() if line.startswith("CPU ")] == [["-1", "256"]], log


def test_container_killed_from_outside_ends_with_a_non_zero_exit_code(k8s_real_node, real_ns):
    """SIGKILL to the container's process on the node (not through the API): the kubelet reports
    the container terminated with exit code 137 (128 + 9) and the Pod Failed; RLark's
    ``interpret`` reads the exit code and that the Worker is no longer alive."""
    from rlark.runtimes.kubernetes.status import PodState, interpret

    tb = k8s_real_node
    tb.core_v1().create_namespaced_pod(real_ns, worker_pod(
        tb, "victim", ["python", "-c", "import time; print('READY', flush=True); time.sleep(600)"]))

    def ready():
        if phase(tb, real_ns, "victim") != "Running":
            return False
        try:
            return "READY" in tb.core_v1().read_namespaced_pod_log("victim", real_ns, container="worker")
        except ApiException:
            return False
    wait_until("Pod victim to print READY", ready)
    tb.kill_container(real_ns, "victim", "worker", signal.SIGKILL)

    ended = wait_phase(tb, real_ns, "victim", ("Succeeded", "Failed"), timeout=60)
    pod = existing_pod(tb, real_ns, "victim")
    assert ended == "Failed", describe(tb, real_ns, "victim")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137, terminated
    status = interpret(pod, now=time.time())
    assert status.phase == PodState.Failed and not status.alive and status.exit_code == 137, status


def test_a_root_pod_overwriting_the_images_files_leaves_the_shared_image_store_as_it_was(k8s_real_node):
    """``up`` gave this node's containerd a copy of the unpacked image store whose files are hard
    links into the build cache (scripts/k8s-testbed.d/image-store.sh). A root Pod that overwrites,
    appends to and deletes files of the Worker image changes only its own container: the store's
    files keep their bytes, and the next Pod of the image sees the image as built."""
    import hashlib
    import re
    from pathlib import Path

    tb = k8s_real_node
    if tb.attached:
        pytest.fail("an attached test bed (RLARK_TESTBED_ATTACH) has no `up` output to say where "
                    "its images came from: run this test with a test bed of its own", pytrace=False)
    found = re.search(r"images from the unpacked store (\S+) in", tb.up_output)
    assert found, "`up` imported the images instead of copying the store:\n" + tb.up_output[-3000:]
    store = Path(found.group(1))
    targets = ("opt/venv/pyvenv.cfg", "etc/os-release")
    stored = [p for rel in targets
              for p in store.glob(f"root/io.containerd.snapshotter.v1.overlayfs/snapshots/*/fs/{rel}")]
    assert {p.as_posix().split("/fs/", 1)[1] for p in stored} == set(targets), stored
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in stored}

    ns = f"root-{uuid.uuid4().hex[:6]}"
    admin = tb.admin()
    admin.create_namespace({"metadata": {"name": ns}})
    try:
        spoil = ("echo spoiled > /opt/venv/pyvenv.cfg && echo spoiled >> /etc/os-release "
                 "&& rm -f /opt/venv/bin/python3 && echo DONE")
        admin.create_namespaced_pod(ns, {
            "metadata": {"name": "spoiler"},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 1,
                     "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                     "containers": [{"name": "worker", "image": tb.image, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", spoil]}]}})
        def ended(name: str) -> str:  # as the admin: RLark's ServiceAccount reads no such namespace
            return wait_until(f"Pod {name} to end", lambda: (
                p := admin.read_namespaced_pod(name, ns).status.phase) in ("Succeeded", "Failed") and p)

        assert ended("spoiler") == "Succeeded", admin.read_namespaced_pod("spoiler", ns).status
        assert "DONE" in admin.read_namespaced_pod_log("spoiler", ns, container="worker")
        after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in stored}
        assert after == before, "a Pod's writes reached the shared image store"
        admin.create_namespaced_pod(ns, worker_pod(tb, "reader", [
            "sh", "-c", "grep -c spoiled /opt/venv/pyvenv.cfg /etc/os-release; test -x /opt/venv/bin/python3 && echo INTACT"]))
        ended("reader")
        log = admin.read_namespaced_pod_log("reader", ns, container="worker")
        assert "/opt/venv/pyvenv.cfg:0" in log and "/etc/os-release:0" in log and "INTACT" in log, log
    finally:
        tb.delete_namespace(ns)
