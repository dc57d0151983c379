"""RLark's production code path on the test bed's real node (issue 21 item 2): a real ``rlark
server --runtime kubernetes`` process (leader election on, as deployed), driven through its
HTTP API and the ``rlark`` CLI, runs Jobs whose Workers are Pods that really run (kubelet,
containerd, runc, the CNI bridge, CoreDNS) in the test bed's Worker image (Ray 2.60, torch
2.13.0 and rlinf 0.3.0: scripts/k8s-testbed.d/image.sh).

* the README's quickstart (3 Workers: head + 2 pool, RLinf's placement check) Succeeds;
* faults, each on the fewest Workers that show it: a container killed from outside, a Pod
  deleted by someone else, a prepare failure, an image not in the store, ``rlark stop``, the
  server killed with SIGKILL while a Run runs, a run script past its container's memory limit
  (``OOMKilled``: the kernel kills the run script, not the container's first process, so the
  container lives on and the Worker's keeper says so from its memory cgroup's OOM-kill count);
* the same Jobs on the local runtime and on the real node give the same reasons and Events.

How the quickstart's code reaches the Pods: its directory is a ``hostPath`` mount at the same
path (the test bed's node is this machine), which the server's Pod policy allows for that one
directory (``RLARK_K8S_HOST_PATH_PREFIXES``) and whose namespace an administrator labelled for
Pod Security ``privileged``, as docs/kubernetes.md says a hostPath needs. So ``workingDir: .``
means the same directory on both runtimes, the server checks the RLinf config there
(``RLARK_CONFIG_ROOTS``), and what the Run writes (``results/``) outlives its Pods.

The module is marked ``ray`` (it starts Ray nodes in Pods, and on the local runtime) and uses
the machine's one real node, so it runs in the ``k8s`` serial group, one test at a time
(tests/xdist_groups.py).
"""

from __future__ import annotations

import json
import signal

import pytest
import yaml

from tests.k8s_real import SMALL, WAIT, RealRlark, one_worker, quickstart_copy, wait_until
from tests.k8s_testbed import REAL_NODE, setup_timeout
from tests.server import serve

kubernetes = pytest.importorskip("kubernetes")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(setup_timeout(real_node=True) + 1800)]

#: bound of the quickstart (3 Ray nodes, RLinf importing torch in each of its processes)
QUICKSTART_WAIT = 900


@pytest.fixture(scope="module")
def real(k8s_real_node, tmp_path_factory):
    rlark = RealRlark(k8s_real_node, tmp_path_factory.mktemp("real-run"))
    try:
        yield rlark
    finally:
        rlark.close()


def test_the_quickstart_succeeds_on_the_real_node(real):
    """The README's quickstart through ``rlark submit``: 3 Pods on the real node with node ranks
    0, 1, 2; the pool Workers find the head through the headless Service's DNS name and Ray
    forms one cluster of the three Pod IPs; RLinf's placement check passes in the head Pod;
    the logs read through RLark's API while the Run runs and after its Pods are gone; the record
    holds each Worker's Pod IP, node and image digest, and no check fails."""
    tb = real.tb
    job_file = quickstart_copy(real.shared, tb.image)
    submitted = real.server.cli("submit", str(job_file))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr

    job = real.wait_phase("quickstart", "Running", timeout=QUICKSTART_WAIT)
    run = job["currentRun"]
    # while it runs: 3 Pods on the real node, ranks 0..2, each finding the head by DNS name
    pods = {w["name"]: real.pod(w["name"]) for w in run["workers"]}
    assert sorted(int(p.metadata.labels["rlark.io/node-rank"]) for p in pods.values()) == [0, 1, 2]
    head_address = f"quickstart-head.{real.pns}.svc:6379"
    for p in pods.values():
        assert p.spec.node_name == REAL_NODE
        env = {e.name: e.value for e in p.spec.containers[0].env}
        assert env["RLARK_HEAD_ADDRESS"] == head_address
        assert env["RLINF_NODE_RANK"] == p.metadata.labels["rlark.io/node-rank"]
    running_logs = real.logs("quickstart", lifecycle="true")
    assert sorted(running_logs) == sorted(pods)
    assert any('"event": "running"' in line for line in running_logs["quickstart-head-0"]), running_logs

    job = real.wait_phase("quickstart", "Succeeded", "Failed", timeout=QUICKSTART_WAIT)
    logs = real.logs("quickstart", role="head")["quickstart-head-0"]
    assert job["phase"] == "Succeeded", (job["reason"], job["message"], logs[-40:])
    job = real.wait_ended("quickstart")
    wait_until("the Run's objects to be deleted", lambda: not real.objects(run["uid"]), timeout=60)

    # after the Pods are gone, the logs still read through RLark's API
    logs = real.logs("quickstart", role="head")["quickstart-head-0"]
    summary = [json.loads(line.split(" ", 1)[1]) for line in logs if line.startswith("RLINF_PLACEMENT_SUMMARY ")]
    assert summary == [{"workers": 7, "mismatches": 0, "node_ranks_used": [0, 1, 2]}], logs[-40:]
    placed = [json.loads(line.split(" ", 1)[1]) for line in logs if line.startswith("RLINF_PLACEMENT ")]
    assert placed and all(p["ok"] for p in placed), placed
    assert json.loads((job_file.parent / "results" / "placement.json").read_text())["mismatches"] == 0

    rec = real.record("quickstart")
    items = sorted(rec["workers"]["items"], key=lambda w: w["nodeRank"])
    assert [w["nodeRank"] for w in items] == [0, 1, 2]
    ips = [w["facts"]["podIP"] for w in items]
    assert len(set(ips)) == 3 and all(ips), ips
    for w in items:
        assert w["facts"]["node"] == REAL_NODE
        assert w["facts"]["imageDigest"] == tb.image_digest
        assert w["rayReportedRank"] == {"label": str(w["nodeRank"]), "rayletEnv": str(w["nodeRank"])}
    # the Ray cluster the head's join barrier saw: one node per Pod IP
    head_lines = real.logs("quickstart", role="head", lifecycle="true")["quickstart-head-0"]
    joined = [json.loads(line.split(" ", 1)[1]) for line in head_lines
              if line.startswith("RLARK_EVENT ") and '"event": "nodes"' in line]
    assert joined and sorted((n["node_rank"], n["ip"]) for n in joined[-1]["joined"]) == list(enumerate(ips))
    checks = {c["id"]: c for c in rec["checks"]["items"]}
    assert {k: c["evidence"] for k, c in checks.items() if c["status"] == "fail"} == {}
    assert rec["checks"]["status"] in ("pass", "warn"), rec["checks"]
    print("\nquickstart record checks:", {k: (c["status"], c["evidence"][:1]) for k, c in checks.items()})


# -- faults on the real node ---------------------------------------------------------------------

def reason_and_message(job: dict) -> tuple[str, str]:
    return job["reason"], job["message"] or ""


def test_a_container_killed_from_outside_is_worker_lost_naming_its_rank(real):
    """SIGKILL to the pool Worker's container on the node (not through the API): the Run fails
    ``WorkerLost`` naming rank 1 and its Pod."""
    tb = real.tb
    doc = one_worker("killed", tb.image, "echo up; sleep 600")
    doc["spec"]["roles"].append({"name": "pool", "workers": 1, "image": tb.image, "resources": dict(SMALL)})
    real.submit(doc)
    real.wait_phase("killed", "Running")
    tb.kill_container(real.pns, "killed-pool-0", "worker", signal.SIGKILL)
    job = real.wait_phase("killed", "Failed", timeout=60)
    reason, message = reason_and_message(job)
    assert reason == "WorkerLost" and "rank 1" in message and "killed-pool-0" in message, (reason, message)
    job = real.wait_ended("killed")
    assert not real.objects(job["currentRun"]["uid"])


def test_a_pod_deleted_by_someone_else_is_named_as_such(real):
    """The head's Pod deleted through the API by someone other than RLark (the admin): the Run
    fails ``HeadLost`` saying the Pod was deleted, not by RLark."""
    tb = real.tb
    real.submit(one_worker("deleted", tb.image, "echo up; sleep 600"))
    real.wait_phase("deleted", "Running")
    tb.admin().delete_namespaced_pod("deleted-head-0", real.pns)
    job = real.wait_phase("deleted", "Failed", timeout=90)
    reason, message = reason_and_message(job)
    assert reason == "HeadLost" and "deleted-head-0" in message and "not by RLark" in message, (reason, message)


def test_an_image_not_in_the_store_fails_with_the_kubelets_pull_message(real):
    """An image the node's containerd does not have (and no registry can give: the node reaches
    none): the Run fails ``ImagePull`` with the kubelet's own words."""
    tb = real.tb
    missing = tb.image.rsplit(":", 1)[0] + ":not-imported"
    real.submit(one_worker("nopull", missing, "echo never"))
    job = real.wait_phase("nopull", "Failed", timeout=120)
    reason, message = reason_and_message(job)
    assert reason == "ImagePull" and missing in message and "Kubelet: " in message, (reason, message)
    kubelet = message.split("Kubelet: ", 1)[1]
    events = tb.admin().list_namespaced_event(real.pns, field_selector="involvedObject.name=nopull-head-0").items
    assert any(kubelet.rstrip(".…") in (e.message or "") for e in events if e.reason == "Failed"), \
        (kubelet, [(e.reason, e.message) for e in events])


def test_rlark_stop_leaves_no_object_of_the_run(real):
    """``rlark stop`` of a Running Run: Stopped, and no Pod, Service, ConfigMap, Secret or
    NetworkPolicy of the Run is left."""
    tb = real.tb
    real.submit(one_worker("stopme", tb.image, "echo up; sleep 600"))
    job = real.wait_phase("stopme", "Running")
    uid = job["currentRun"]["uid"]
    kinds = set(real.objects(uid))
    assert {"Pod", "Service", "ConfigMap", "Secret", "NetworkPolicy"} <= kinds, kinds
    stopped = real.server.cli("stop", "stopme")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    real.wait_phase("stopme", "Stopped", timeout=60)
    real.wait_ended("stopme", timeout=60)
    wait_until("no object of the stopped Run", lambda: not real.objects(uid), timeout=60)


def test_a_run_script_past_its_memory_limit_is_oom_killed_naming_the_worker_and_the_limit(real):
    """A one-Worker Job whose run script fills 3 GiB in a container limited to 1Gi: the kernel's
    OOM killer kills the run script (the biggest process of the container's memory cgroup, not
    its first process, the keeper, so the container does not end ``OOMKilled``); the Run fails
    ``OOMKilled`` naming the Worker, its rank and the limit, and so does the Worker."""
    tb = real.tb
    # bytearray(n) zero-fills its buffer, so every page is touched and charged to the cgroup
    real.submit(one_worker("oom", tb.image,
                           "echo filling; python -c 'b = bytearray(3 << 30); print(len(b))'"))
    job = real.wait_phase("oom", "Succeeded", "Failed")
    reason, message = reason_and_message(job)
    assert (job["phase"], reason) == ("Failed", "OOMKilled"), (reason, message)
    assert "oom-head-0" in message and "rank 0" in message and "1Gi" in message, message
    job = real.wait_ended("oom")
    head = next(w for w in job["currentRun"]["workers"] if w["name"] == "oom-head-0")
    assert (head["phase"], head["reason"]) == ("Failed", "OOMKilled"), head


def test_a_server_killed_while_a_run_runs_is_replaced_and_the_run_succeeds_with_its_whole_log(real):
    """``kill -9`` of the server while the Run's script prints; the next server process adopts
    the Run, which Succeeds; its log has every line once, in order."""
    tb = real.tb
    script = "for i in $(seq 1 40); do echo line-$i; sleep 0.5; done"
    real.submit(one_worker("adopted", tb.image, script))
    wait_until("the run script to print", lambda: any(
        line.startswith("line-") for line in real.logs("adopted").get("adopted-head-0", [])))
    real.restart_after_crash()
    job = real.wait_phase("adopted", "Succeeded", "Failed", timeout=180)
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    assert any(e["reason"] == "Adopted" for e in real.events("adopted"))
    lines = [line for line in real.logs("adopted")["adopted-head-0"] if line.startswith("line-")]
    assert lines == [f"line-{i}" for i in range(1, 41)], lines


# -- the same Jobs on both runtimes -------------------------------------------------------------

#: scheduling and image Events, which the issue allows to differ: Kubernetes' scheduler and the
#: kubelet's image steps (the local runtime neither schedules nor pulls), and the local runtime's
#: wait for this machine's capacity (its admission is its scheduling; whether it waits depends on
#: what else runs here)
SCHEDULING_AND_IMAGE_EVENTS = {"Scheduled", "Pulling", "Pulled", "Queued"}


def event_story(events: list[dict]) -> list[tuple[str, str]]:
    """A Run's Events as (type, reason), oldest first, without scheduling and image steps."""
    ordered = sorted(events, key=lambda e: (e.get("time") or e.get("ts") or "", e.get("id") or 0))
    return [(e.get("type", ""), e["reason"]) for e in ordered if e["reason"] not in SCHEDULING_AND_IMAGE_EVENTS]


@pytest.fixture
def local_server(tmp_path):
    """A real ``rlark server`` on the local runtime, for the same Jobs."""
    home = tmp_path / "local-home"
    home.mkdir()
    yield from serve(home)


def test_the_same_jobs_on_the_local_runtime_and_the_real_node_tell_the_same_story(real, local_server):
    """Two Jobs, each submitted unchanged to a local-runtime server and to the real node: one of
    two Workers that Succeeds, one whose prepare script fails. Both runtimes end each Run with
    the same phase and reason and write the same Events in the same order (Kubernetes' own
    scheduling and image Events aside). On the real node the failed prepare is ``PrepareFailed``
    naming the Worker with its last log lines."""
    tb = real.tb
    ok = one_worker("same-ok", tb.image, "echo run-script-ran")
    ok["spec"]["roles"].append({"name": "pool", "workers": 1, "image": tb.image, "resources": dict(SMALL)})
    prep = one_worker("same-prep", tb.image, "echo never",
                      prepareScript="echo preparing-1\necho preparing-2 >&2\necho the-last-words\nexit 7\n")
    stories = {}
    for where, srv in (("kubernetes", real.server), ("local", local_server)):
        for doc in (ok, prep):
            srv.submit(yaml.safe_dump(doc, sort_keys=False))
        for doc in (ok, prep):
            name = doc["metadata"]["name"]
            job = srv.wait_phase(name, {"Succeeded", "Failed"}, timeout=WAIT)
            job = srv.wait_released(name, timeout=WAIT)
            events = srv.http.get(f"/api/v1/jobs/{name}/events").json()
            stories[(where, name)] = (job["phase"], job["reason"], job["message"], event_story(events))
    k8s_prep = stories[("kubernetes", "same-prep")]
    assert k8s_prep[:2] == ("Failed", "PrepareFailed"), k8s_prep
    assert "same-prep-head-0" in k8s_prep[2] and "the-last-words" in k8s_prep[2], k8s_prep[2]
    assert stories[("kubernetes", "same-ok")][:2] == ("Succeeded", "RunSucceeded") or \
        stories[("kubernetes", "same-ok")][0] == "Succeeded", stories[("kubernetes", "same-ok")]
    for name in ("same-ok", "same-prep"):
        k8s, local = stories[("kubernetes", name)], stories[("local", name)]
        assert (k8s[0], k8s[1]) == (local[0], local[1]), (name, k8s, local)
        assert k8s[3] == local[3], f"{name}:\nkubernetes: {k8s[3]}\nlocal:      {local[3]}"
