"""Benchmark: one Job of N Workers on RLark's Kubernetes runtime against one RayCluster of N Pods
under the KubeRay operator, on the same test bed (issue 23 item 1).

The test bed: ``scripts/k8s-testbed up --nodes 100 --node-gpus 8 --audit-log`` (kwok Nodes of
16 CPUs, 64Gi, 8 nvidia.com/gpu and 110 Pods each, the script's defaults but the GPUs; the API
server with its default limits, ``--max-requests-inflight`` 400 and
``--max-mutating-requests-inflight`` 200, and the default scheduler; kwok's default Stages make a
bound Pod Running). Every Pod asks for 1 CPU and 1Gi (no GPU: 1,000 Pods on 100 Nodes of 8 GPUs
would not all fit with one each), so sizes up to 1,000 fit the 100 Nodes.

Per size (``--sizes``, default 10,100,1000) and round (``--rounds``, default 3), the two sides
alternate, each starting fresh (its own namespace, server or operator process):

- RLark: a real ``rlark server --runtime kubernetes`` (RLark's ServiceAccount rlark/rlark, the
  project quota raised with ``$RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT``), a Job of one head and N-1
  pool Workers through ``POST /api/v1/jobs``; stopped with ``POST /api/v1/jobs/NAME/stop``.
  A client polls ``GET /api/v1/jobs`` throughout (its latencies' p95 is reported).
- KubeRay: the ray-operator (``scripts/k8s-testbed build --kuberay``; v1.5.0) as a local process
  under a ServiceAccount of its own bound to cluster-admin, with ``--watch-namespace``,
  ``--enable-leader-election=false``, ``--qps``, ``--burst`` and ``--reconcile-concurrency``
  (flags from ray-operator/main.go; defaults 100, 200 and 1 from
  ray-operator/apis/config/v1alpha1/defaults.go, v1.5.0), its CRDs (config/crd/bases) applied
  server-side; a RayCluster of a head and one worker group of N-1 replicas, the same resources;
  stopped by deleting the RayCluster (the garbage collector removes its Pods and Service).

Pod logs: kwok serves each Pod of the round's namespace a log that stays open while the Pod runs
(a ``ClusterLogs`` object, :func:`serve_running_logs`), as a kubelet does for a running container;
without it kwok ends every log stream at once and RLark's log follower opens it again after a
backoff, requests a real cluster would not see. KubeRay reads no Pod logs.

Measured from the submit (the POST, or the RayCluster's create): seconds until all N Pods are
bound (``spec.nodeName``) and all Running (``status.phase``), from a watch of the namespace's
Pods as the admin; the API requests the side made (its ServiceAccount's lines in the API server's
audit log, counted by audit ID, from the submit until everything is gone, split by verb and
resource: ``apiserver_request_total`` has no user label, its labels are verb, dry_run, group,
version, resource, subresource, scope, component and code, Kubernetes metrics reference for
v1.36); the process's CPU seconds (user + system, psutil) over the same window and peak RSS
(``VmHWM``, /proc/PID/status) and, for RLark, its threads once every Pod runs (every log
followed); seconds from the stop until no Pod, Service, ConfigMap (but
kube-root-ca.crt), Secret or NetworkPolicy is left in the namespace.

With ``--probe``, RLark's rounds at the largest size also submit a Job of one Worker before the
large one (``alone``: seconds from its submit until its Pod is created, by RLark, bound, by the
scheduler, and runs) and another once a tenth of the large Job's Pods run (``during``: the same,
while the launch is under way), issue 23 item 3; both
stay until the stop, so that round's requests and "gone" include their few objects.

kwok follows each served log with an inotify instance of its own (fsnotify), so more streams
than ``fs.inotify.max_user_instances`` (128 on this machine) fail with "failed to create fsnotify
watcher: too many open files" and end at once: :func:`inotify_room` raises it (as root) to what
the largest round follows, as clusters with many Pods per node do, or stops naming the sysctl.

RLark's Pods never run Ray on kwok, so its Runs never reach the phase Running: the bench measures
the Pods, as the API server sees them, which is what both systems are asked to produce.

Usage: .venv/bin/python bench/k8s_scale.py [--sizes 10,100,1000] [--rounds 3] [--json FILE]
       [--plot FILE.png] [--kuberay-qps 100] [--kuberay-burst 200] [--kuberay-concurrency 1]
       [--probe] [--many 100x10] [--idle 30]
       [--sides rlark,kuberay]   (one side alone: no ratio, e.g. to profile RLark's server)
(``scripts/k8s-testbed build --kuberay`` done; RLARK_TESTBED_ATTACH=DIR uses a test bed already
up in DIR with the arguments above instead of starting one; the plot, Pods Running over time at the largest
size for both systems, is drawn with Pillow, matplotlib not being installed here.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402
from kubernetes.watch.watch import iter_resp_lines  # noqa: E402

from rlark.runtimes.kubernetes.client import abort  # noqa: E402
from tests.k8s_testbed import RLARK_SA, SCRIPT, K8sTestbed, PodLog, wait_for  # noqa: E402
from tests.server import RlarkServer, free_port  # noqa: E402

NODES = 100
NODE_GPUS = 8
UP_ARGS = ("--nodes", str(NODES), "--node-gpus", str(NODE_GPUS), "--audit-log")
CPU = "1"
MEMORY = "1Gi"
IMAGE = "docker.io/rayproject/ray:2.52.0"
KUBERAY_SA = "kuberay-operator"
LAUNCH_TIMEOUT = 900.0
GONE_TIMEOUT = 600.0
CORE_KINDS = ("pods", "services", "configmaps", "secrets", "networkpolicies")


# -- what the API server saw -------------------------------------------------------------------
class PodWatch:
    """A watch of one namespace's Pods as the admin: per Pod, the monotonic time it was first
    seen bound and first seen Running. ``start`` returns once the watch is established."""

    def __init__(self, tb: K8sTestbed, namespace: str):
        from kubernetes import client

        self.core = client.CoreV1Api(tb.api_client(admin=True))
        self.ns = namespace
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"podwatch-{namespace}")

    def start(self) -> "PodWatch":
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError(f"the Pod watch of {self.ns} did not start within 60 s")
        return self

    def _run(self) -> None:
        """List, then watch from the list's resourceVersion, as raw JSON (the client's model
        objects cost ~1 ms an event, enough for the API server to drop a watcher that falls
        behind 1,000 Pods); a watch that ends is opened again from the last resourceVersion,
        one that is too old (410) lists again."""
        rv = None
        while not self._stop:
            try:
                if rv is None:
                    listed = json.loads(self.core.list_namespaced_pod(self.ns, _preload_content=False).data)
                    rv = listed["metadata"]["resourceVersion"]
                    for pod in listed.get("items") or []:
                        self._see(pod)
                    self._ready.set()
                resp = self.core.list_namespaced_pod(
                    self.ns, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                    timeout_seconds=300, _preload_content=False)
                self._resp = resp
                for line in iter_resp_lines(resp):
                    if not line.strip():
                        continue
                    if self._stop:
                        return
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = None if obj.get("code") == 410 else rv
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") != "BOOKMARK":
                        self._see(obj)
            except Exception:  # noqa: BLE001 -- a watch the server cut: open it again from rv
                if self._stop:
                    return
                time.sleep(0.1)

    def _see(self, pod: dict) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        self.created.setdefault(name, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(name, now)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(name, now)

    _stop = False
    _resp = None

    def stop(self) -> None:
        self._stop = True
        if self._resp is not None:
            # shut its socket down: resp.close() waits for the watching thread's read, which on
            # a namespace with nothing left to watch returns at the next bookmark, a minute on
            abort(self._resp)
        self._thread.join(10)


def objects_left(tb: K8sTestbed, namespace: str) -> dict[str, int]:
    """How many Pods, Services, ConfigMaps (but kube-root-ca.crt), Secrets and NetworkPolicies
    the namespace holds (the admin's lists)."""
    from kubernetes import client

    core = tb.admin()
    net = client.NetworkingV1Api(core.api_client)
    counts = {
        "pods": len(core.list_namespaced_pod(namespace).items),
        "services": len(core.list_namespaced_service(namespace).items),
        "configmaps": sum(1 for c in core.list_namespaced_config_map(namespace).items
                          if c.metadata.name != "kube-root-ca.crt"),
        "secrets": len(core.list_namespaced_secret(namespace).items),
        "networkpolicies": len(net.list_namespaced_network_policy(namespace).items),
    }
    return {k: v for k, v in counts.items() if v}


class AuditLog:
    """The test bed's audit log (``up --audit-log``): requests by user from a byte offset."""

    def __init__(self, tb: K8sTestbed):
        self.path = tb.dir / "logs" / "audit.log"

    def offset(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, user: str, since: int) -> Counter:
        """``user``'s requests from byte ``since`` on, counted once each (by audit ID), keyed
        ``"verb resource[/subresource]"``."""
        seen: dict[str, str] = {}
        with self.path.open("rb") as f:
            f.seek(since)
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("user", {}).get("username") != user:
                    continue
                ref = ev.get("objectRef") or {}
                res = ref.get("resource", ev.get("requestURI", "?"))
                if ref.get("subresource"):
                    res += "/" + ref["subresource"]
                seen.setdefault(ev["auditID"], f"{ev.get('verb')} {res}")
        return Counter(seen.values())


class ProcessMeter:
    """CPU seconds (user + system, children included) of a process over a window, and its peak
    RSS (VmHWM, the kernel's high-water mark, in MiB)."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.cpu0 = self._cpu()

    def _cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def cpu_seconds(self) -> float:
        return self._cpu() - self.cpu0

    def threads(self) -> int:
        """The process's OS threads now."""
        return self.proc.num_threads()

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmHWM in /proc/{self.proc.pid}/status")


def wait_pods(pw: PodWatch, n: int, t0: float, what: str, prefix: str = "") -> tuple[float, float]:
    """Seconds from ``t0`` until ``n`` Pods (of names starting with ``prefix``) were bound and
    ``n`` Running (bounded by LAUNCH_TIMEOUT, naming how far it got)."""
    def of(seen: dict[str, float]) -> list[float]:
        return sorted(t for name, t in list(seen.items()) if name.startswith(prefix))

    wait_for(f"{n} Pods of {what} Running (seen {len(of(pw.bound))} bound, "
             f"{len(of(pw.running))} Running)",
             lambda: len(of(pw.running)) >= n, timeout=LAUNCH_TIMEOUT, interval=0.1)
    return of(pw.bound)[n - 1] - t0, of(pw.running)[n - 1] - t0


def probe(srv: "RlarkServer", pw: PodWatch, name: str, probes: dict[str, float]) -> float:
    """Submit a Job of one Worker named ``name`` (issue 23 item 3: the same Job alone and while a
    large launch is under way); into ``probes``, seconds from the submit until its Pod was
    created (``NAME_created_s``: RLark's part), bound (``NAME_bound_s``: then the scheduler's
    queue) and Running (``NAME_s``). Returns the submit's monotonic time."""
    t = time.monotonic()
    srv.submit(yaml.safe_dump(job_doc(name, 1), sort_keys=False))
    probes[f"{name}_bound_s"], probes[f"{name}_s"] = wait_pods(pw, 1, t, f"Job {name}", prefix=f"{name}-")
    probes[f"{name}_created_s"] = min(c for pod, c in pw.created.items() if pod.startswith(f"{name}-")) - t
    return t


def wait_gone(tb: K8sTestbed, namespace: str, t_stop: float, what: str) -> float:
    left: dict = {}

    def gone() -> bool:
        nonlocal left
        left = objects_left(tb, namespace)
        return not left

    wait_for(f"every object of {what} in {namespace} gone (left {left})", gone,
             timeout=GONE_TIMEOUT, interval=0.2)
    return time.monotonic() - t_stop


def curve(pw: PodWatch, t0: float, prefix: str = "") -> list[float]:
    """The seconds after ``t0`` at which each Pod (named ``prefix``...) was first seen Running,
    sorted."""
    return sorted(round(t - t0, 3) for name, t in pw.running.items() if name.startswith(prefix))


def requests_summary(c: Counter, n: int) -> dict:
    total = sum(c.values())
    return {"requests": total, "requests_per_pod": total / n, "by_verb": dict(c.most_common())}


# -- RLark -----------------------------------------------------------------------------------
def job_doc(name: str, n: int) -> dict:
    """A Job of one head and ``n - 1`` pool Workers, each 1 CPU and 1Gi."""
    res = {"cpu": CPU, "memory": MEMORY}
    roles = [{"name": "head", "workers": 1, "image": IMAGE, "resources": res}]
    if n > 1:
        roles.append({"name": "pool", "workers": n - 1, "image": IMAGE, "resources": res})
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "terminationGracePeriodSeconds": 5,
                     "runScript": "python train.py", "roles": roles}}


class ApiPoller:
    """Polls ``GET /api/v1/jobs`` back to back; the latencies in seconds."""

    def __init__(self, srv: RlarkServer):
        self.http = httpx.Client(base_url=srv.url, headers=dict(srv.http.headers), timeout=60)
        self.latencies: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="api-poller")
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            t = time.monotonic()
            try:
                self.http.get("/api/v1/jobs")
            except httpx.HTTPError:
                pass
            self.latencies.append(time.monotonic() - t)
            self._done.wait(0.1)

    def stop(self) -> dict:
        self._done.set()
        self._thread.join(70)
        lat = sorted(self.latencies)
        if not lat:
            return {}
        return {"polls": len(lat), "median_ms": 1000 * statistics.median(lat),
                "p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))], "max_ms": 1000 * lat[-1]}


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_room(streams: int) -> None:
    """Make room for kwok to follow ``streams`` logs at once (module docstring): raise
    ``fs.inotify.max_user_instances`` to ``streams`` plus the machine's other users' 256 when it
    is lower. Raises SystemExit naming the sysctl when it is lower and cannot be raised."""
    have = int(INOTIFY_INSTANCES.read_text())
    want = streams + 256
    if have >= want:
        return
    try:
        INOTIFY_INSTANCES.write_text(str(want))
    except OSError as exc:
        raise SystemExit(f"kwok needs an inotify instance per followed log: {want} for this run, "
                         f"fs.inotify.max_user_instances is {have} and cannot be raised here ({exc}); "
                         f"as root: sysctl -w fs.inotify.max_user_instances={want}") from None
    print(f"fs.inotify.max_user_instances raised from {have} to {want} (kwok follows each log "
          f"with one)", flush=True)


def serve_running_logs(tb: K8sTestbed, namespace: str, work: Path) -> str:
    """Make kwok serve every Pod of ``namespace`` a log that stays open, as a running container's
    does (a kwok ``ClusterLogs`` object selecting the namespace, ``follow: true`` on a file of
    one line in the CRI format a kubelet writes, which kwok parses: a plain-text file makes it
    fail each stream after 20 s): by default kwok serves no log and ends each stream at once,
    which no kubelet does for a container that runs, and which made RLark open each Pod's log
    again and again. Returns the object's name (delete it with :func:`drop_running_logs`)."""
    path = work / f"{namespace}.log"
    PodLog(path).write("RLARK bench: a Worker's container that runs")
    name = f"bench-{namespace}"
    tb.custom().create_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "clusterlogs", {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": name},
        "spec": {"selector": {"matchNamespaces": [namespace]},
                 "logs": [{"logsFile": str(path), "follow": True}]}})
    return name


def drop_running_logs(tb: K8sTestbed, name: str) -> None:
    tb.custom().delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "clusterlogs", name)


@contextlib.contextmanager
def rlark_server(tb: K8sTestbed, n: int, work: Path) -> Iterator[tuple[RlarkServer, PodWatch, str]]:
    """A fresh ``rlark server --runtime kubernetes`` in namespaces of its own (its project's
    quota raised for ``n`` Workers; kwok serving that namespace's Pods logs that stay open) and
    a watch of the project namespace's Pods: ``(server, watch, project namespace)``. Everything
    is stopped and deleted on the way out."""
    ns = tb.project_namespace()
    tb.grant_leader_election(ns)
    pns = tb.project_namespace(f"{ns}-default")
    logs = serve_running_logs(tb, pns, work)
    home = work / f"rlark-{ns}"
    home.mkdir()
    env = {"RLARK_RUNTIME": "kubernetes", "RLARK_NAMESPACE": ns, "KUBECONFIG": str(tb.rlark_kubeconfig),
           "RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT": str(max(256, n + 2)), "RLARK_K8S_PENDING_TIMEOUT": "600"}
    srv = RlarkServer(home, env).start()
    pw = PodWatch(tb, pns).start()
    try:
        assert srv.proc is not None
        yield srv, pw, pns
    finally:
        pw.stop()
        srv.stop()
        for name in (pns, ns):
            tb.delete_namespace(name)
        drop_running_logs(tb, logs)


def rlark_round(tb: K8sTestbed, audit: AuditLog, n: int, work: Path, with_probe: bool = False) -> dict:
    with rlark_server(tb, n, work) as (srv, pw, pns):
        assert srv.proc is not None
        probes: dict[str, float] = {}
        if with_probe:
            probe(srv, pw, "alone", probes)
        meter = ProcessMeter(srv.proc.pid)
        poller = ApiPoller(srv)
        off = audit.offset()
        t0 = time.monotonic()
        srv.submit(yaml.safe_dump(job_doc("scale", n), sort_keys=False))
        if with_probe:
            # submitted once a tenth of the big Job's Pods run: its launch is under way
            wait_pods(pw, max(1, n // 10), t0, f"RLark's Job ({n} Workers)", prefix="scale-")
            probes["during_submitted_at_s"] = round(probe(srv, pw, "during", probes) - t0, 3)
        bound, running = wait_pods(pw, n, t0, f"RLark's Job ({n} Workers)", prefix="scale-")
        threads = meter.threads()  # every Pod Running, every log followed
        api = poller.stop()
        t_stop = time.monotonic()
        for job in ("scale", *(["alone", "during"] if probes else [])):
            r = srv.http.post(f"/api/v1/jobs/{job}/stop")
            assert r.status_code == 200, r.text
        gone = wait_gone(tb, pns, t_stop, "RLark's Job")
        time.sleep(1)  # the audit log's last lines: the API server writes each after its response
        out = {"bound_s": bound, "running_s": running, "gone_s": gone,
               "cpu_s": meter.cpu_seconds(), "peak_rss_mib": meter.peak_rss_mib(), "threads": threads,
               "api_jobs_latency": api, "curve": curve(pw, t0, prefix="scale-"),
               **({"probe": probes} if probes else {}),
               **requests_summary(audit.requests(RLARK_SA, off), n)}
    return out


def idle_round(tb: K8sTestbed, n: int, work: Path, seconds: float) -> dict:
    """The RLark server's CPU while it holds a Job of ``n`` Workers whose Pods all run and do
    nothing (kwok: no log lines, no status changes): what the Job costs the server for existing
    (issue 23 item 3). Measured over ``seconds`` from 10 s after the last Pod ran; the Job is
    stopped after. Percent of one core."""
    with rlark_server(tb, n, work) as (srv, pw, pns):
        assert srv.proc is not None
        t0 = time.monotonic()
        srv.submit(yaml.safe_dump(job_doc("idle", n), sort_keys=False))
        wait_pods(pw, n, t0, f"RLark's Job ({n} Workers)", prefix="idle-")
        time.sleep(10)  # the launch's last passes and log streams settle: not measured
        meter = ProcessMeter(srv.proc.pid)
        time.sleep(seconds)  # the measuring window (nothing is waited for)
        out = {"workers": n, "seconds": seconds, "cpu_s": meter.cpu_seconds(),
               "cpu_pct": 100 * meter.cpu_seconds() / seconds}
        r = srv.http.post("/api/v1/jobs/idle/stop")
        assert r.status_code == 200, r.text
        wait_gone(tb, pns, time.monotonic(), "RLark's idle Job")
    return out


def many_round(tb: K8sTestbed, audit: AuditLog, jobs: int, workers: int, work: Path) -> dict:
    """``jobs`` Jobs of ``workers`` Workers each, submitted at once (from ``jobs`` threads):
    seconds until every Pod runs, and the controller's lag per Job (from its submit until its
    first Pod exists: how long it waited behind the others), median and max."""
    names = [f"j{i:03d}" for i in range(jobs)]
    submitted: dict[str, float] = {}
    with rlark_server(tb, jobs * workers, work) as (srv, pw, pns):
        assert srv.proc is not None
        meter = ProcessMeter(srv.proc.pid)
        poller = ApiPoller(srv)
        off = audit.offset()
        gate = threading.Barrier(jobs)

        def submit(name: str) -> None:
            gate.wait(60)
            submitted[name] = time.monotonic()
            srv.submit(yaml.safe_dump(job_doc(name, workers), sort_keys=False))

        threads = [threading.Thread(target=submit, args=(n,), daemon=True) for n in names]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(submitted) == jobs, f"only {len(submitted)} of {jobs} submits were answered"
        t0 = min(submitted.values())
        bound, running = wait_pods(pw, jobs * workers, t0, f"{jobs} Jobs of {workers} Workers")
        lags = sorted(min(t for pod, t in pw.created.items() if pod.startswith(f"{n}-")) - submitted[n]
                      for n in names)
        api = poller.stop()
        t_stop = time.monotonic()
        for n in names:
            r = srv.http.post(f"/api/v1/jobs/{n}/stop")
            assert r.status_code == 200, r.text
        gone = wait_gone(tb, pns, t_stop, f"{jobs} Jobs")
        time.sleep(1)  # the audit log's last lines (as in rlark_round)
        out = {"jobs": jobs, "workers": workers, "bound_s": bound, "running_s": running,
               "gone_s": gone, "lag_median_s": statistics.median(lags), "lag_max_s": lags[-1],
               "cpu_s": meter.cpu_seconds(), "peak_rss_mib": meter.peak_rss_mib(),
               "api_jobs_latency": api, **requests_summary(audit.requests(RLARK_SA, off), jobs * workers)}
    return out


# -- KubeRay ---------------------------------------------------------------------------------
def kuberay_dir() -> Path:
    proc = subprocess.run([str(SCRIPT), "path"], capture_output=True, text=True, check=True)
    root = Path(proc.stdout.strip()).parent.parent
    version = os.environ.get("RLARK_TESTBED_KUBERAY_VERSION", "v1.5.0")
    d = root / f"kuberay-{version}"
    if not (d / "bin" / ".complete").exists():
        raise SystemExit(f"KubeRay {version} is not built in {d} (run: scripts/k8s-testbed build --kuberay)")
    return d


def kuberay_setup(tb: K8sTestbed, kr: Path, work: Path) -> Path:
    """The CRDs applied (server-side) and Established; a ServiceAccount for the operator bound to
    cluster-admin (the operator's own ClusterRole, config/rbac, is not applied: nothing here runs
    as its Deployment); returns a kubeconfig with its token."""
    tb.kubectl("apply", "--server-side", "-f", str(kr / "crds"), timeout=120)
    tb.kubectl("wait", "--for=condition=Established", "--timeout=120s", "-f", str(kr / "crds"), timeout=150)
    # check=False: an attached test bed may hold them from an earlier run (the token proves it)
    tb.kubectl("create", "namespace", "kuberay-system", check=False)
    tb.kubectl("create", "serviceaccount", KUBERAY_SA, "-n", "kuberay-system", check=False)
    tb.kubectl("create", "clusterrolebinding", "bench-kuberay-operator", "--clusterrole=cluster-admin",
               f"--serviceaccount=kuberay-system:{KUBERAY_SA}", check=False)
    token = tb.kubectl("create", "token", KUBERAY_SA, "-n", "kuberay-system", "--duration=24h").strip()
    cfg = yaml.safe_load(tb.kubeconfig.read_text())
    cfg["users"] = [{"name": "kuberay", "user": {"token": token}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = "kuberay"
    path = work / "kuberay.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def raycluster(name: str, n: int) -> dict:
    """A RayCluster (ray.io/v1) of a head and one worker group of ``n - 1`` replicas, each Pod
    1 CPU and 1Gi (fields: ray-operator/config/crd/bases/ray.io_rayclusters.yaml)."""
    def template(container: str) -> dict:
        res = {"cpu": CPU, "memory": MEMORY}
        return {"spec": {"containers": [{"name": container, "image": IMAGE,
                                         "resources": {"requests": res, "limits": res}}]}}

    spec: dict = {"headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
                  "workerGroupSpecs": []}
    if n > 1:
        spec["workerGroupSpecs"].append({"groupName": "pool", "replicas": n - 1, "minReplicas": n - 1,
                                         "maxReplicas": n - 1, "rayStartParams": {},
                                         "template": template("ray-worker")})
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name}, "spec": spec}


def kuberay_round(tb: K8sTestbed, audit: AuditLog, n: int, work: Path, kr: Path, kubeconfig: Path,
                  qps: float, burst: int, concurrency: int) -> dict:
    from kubernetes import client

    ns = f"kr-{uuid.uuid4().hex[:8]}"
    tb.kubectl("create", "namespace", ns)
    wait_for(f"the default ServiceAccount of {ns}",
             lambda: tb.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).strip() != "",
             timeout=60)
    log = open(work / f"kuberay-{ns}.log", "ab")
    argv = [str(kr / "bin" / "ray-operator"), f"--watch-namespace={ns}", "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{free_port()}", f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            f"--qps={qps}", f"--burst={burst}", f"--reconcile-concurrency={concurrency}"]
    proc = subprocess.Popen(argv, env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    custom = client.CustomObjectsApi(tb.api_client(admin=True))
    pw = PodWatch(tb, ns).start()
    try:
        # the operator's caches synced: its own log says so (controller-runtime's "Starting workers")
        wait_for("the KubeRay operator's controllers to start",
                 lambda: proc.poll() is None and b"Starting workers" in (work / f"kuberay-{ns}.log").read_bytes(),
                 timeout=120, interval=0.2)
        meter = ProcessMeter(proc.pid)
        off = audit.offset()
        t0 = time.monotonic()
        custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", raycluster("scale", n))
        bound, running = wait_pods(pw, n, t0, f"KubeRay's RayCluster ({n} Pods)")
        t_stop = time.monotonic()
        custom.delete_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "scale")
        gone = wait_gone(tb, ns, t_stop, "KubeRay's RayCluster")
        time.sleep(1)
        out = {"bound_s": bound, "running_s": running, "gone_s": gone,
               "cpu_s": meter.cpu_seconds(), "peak_rss_mib": meter.peak_rss_mib(), "curve": curve(pw, t0),
               **requests_summary(audit.requests(f"system:serviceaccount:kuberay-system:{KUBERAY_SA}", off), n)}
    finally:
        pw.stop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        tb.delete_namespace(ns)
    return out


# -- report ----------------------------------------------------------------------------------
def medians(rows: list[dict]) -> dict:
    keys = ("bound_s", "running_s", "gone_s", "requests", "requests_per_pod", "cpu_s", "peak_rss_mib")
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def plot(path: Path, n: int, curves: dict[str, list[float]]) -> None:
    """Pods Running over time (a step line per system), drawn with Pillow (matplotlib is not
    installed in this environment)."""
    from PIL import Image, ImageDraw

    w, h, m = 900, 520, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    tmax = max((c[-1] for c in curves.values() if c), default=1.0) * 1.05 or 1.0
    x = lambda t: m + (w - 2 * m) * t / tmax  # noqa: E731
    y = lambda k: h - m - (h - 2 * m) * k / n  # noqa: E731
    d.line([(m, m), (m, h - m), (w - m, h - m)], fill="black")
    for i in range(6):
        t, k = tmax * i / 5, n * i / 5
        d.text((x(t) - 10, h - m + 8), f"{t:.1f}", fill="black")
        d.text((8, y(k) - 6), f"{k:.0f}", fill="black")
    d.text((w // 2 - 60, h - 25), "seconds from submit", fill="black")
    d.text((m, 15), f"Pods Running, {n} Pods, kwok test bed ({NODES} Nodes)", fill="black")
    colours = {"rlark": (200, 40, 40), "kuberay": (30, 90, 200)}
    for j, (side, c) in enumerate(curves.items()):
        pts = [(x(0), y(0))]
        for k, t in enumerate(c, 1):
            pts += [(x(t), y(k - 1)), (x(t), y(k))]
        d.line(pts, fill=colours.get(side, "black"), width=2)
        d.text((w - m - 120, m + 18 * j), f"-- {side}", fill=colours.get(side, "black"))
    img.save(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--plot", type=Path, help="PNG of Pods Running over time at the largest size")
    ap.add_argument("--kuberay-qps", type=float, default=100.0)
    ap.add_argument("--kuberay-burst", type=int, default=200)
    ap.add_argument("--kuberay-concurrency", type=int, default=1)
    ap.add_argument("--probe", action="store_true",
                    help="at the largest size, RLark's side also times a Job of one Worker alone "
                         "and submitted while the large launch is under way")
    ap.add_argument("--many", default="",
                    help="JOBSxWORKERS, e.g. 100x10: also submit that many Jobs of that many "
                         "Workers at once to RLark (all Running, time, the controller's lag)")
    ap.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                    help="also measure RLark's server over this many seconds while it holds a "
                         "Job of the largest size whose Pods all run and do nothing")
    ap.add_argument("--sides", default="rlark,kuberay",
                    help="which systems to run (rlark, kuberay or both, comma-separated); the "
                         "ratio needs both")
    args = ap.parse_args()
    sides = [s for s in args.sides.split(",") if s]
    if not sides or set(sides) - {"rlark", "kuberay"}:
        ap.error(f"--sides takes rlark, kuberay or both, not {args.sides!r}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    many = None
    if args.many:
        try:
            many = tuple(int(x) for x in args.many.lower().split("x"))
            assert len(many) == 2 and min(many) > 0
        except (ValueError, AssertionError):
            ap.error(f"--many takes JOBSxWORKERS, e.g. 100x10, not {args.many!r}")
    inotify_room(max(sizes + [many[0] * many[1] if many else 0]) + 2)
    kr = kuberay_dir()
    work = Path(tempfile.mkdtemp(prefix="rlark-bench-scale-"))
    started = time.monotonic()
    attach = os.environ.get("RLARK_TESTBED_ATTACH")
    tb = K8sTestbed.attach(attach) if attach else K8sTestbed.start(*UP_ARGS)
    print(f"test bed {'attached' if attach else 'up'} in {time.monotonic() - started:.1f} s "
          f"({' '.join(UP_ARGS)}) in {tb.dir}", flush=True)
    audit = AuditLog(tb)
    results = []
    many_row: dict | None = None
    idle_row: dict | None = None
    try:
        kubeconfig = kuberay_setup(tb, kr, work) if "kuberay" in sides else None
        for n in sizes:
            per: dict[str, list[dict]] = {"rlark": [], "kuberay": []}
            for i in range(args.rounds):
                for side in sides:
                    if side == "rlark":
                        row = rlark_round(tb, audit, n, work, with_probe=args.probe and n == max(sizes))
                    else:
                        assert kubeconfig is not None
                        row = kuberay_round(tb, audit, n, work, kr, kubeconfig, args.kuberay_qps,
                                            args.kuberay_burst, args.kuberay_concurrency)
                    per[side].append(row)
                    extra = (f"  GET /api/v1/jobs p95 {row['api_jobs_latency'].get('p95_ms', 0):.0f} ms"
                             f", {row['threads']} threads once all Running" if side == "rlark" else "")
                    if "probe" in row:
                        p = row["probe"]
                        extra += (f"; a 1-Worker Job's Pod created / bound / Running "
                                  f"{p['alone_created_s']:.2f} / {p['alone_bound_s']:.2f} / {p['alone_s']:.2f}s alone, "
                                  f"{p['during_created_s']:.2f} / {p['during_bound_s']:.2f} / {p['during_s']:.2f}s "
                                  f"during the launch")
                    print(f"n={n} round {i + 1} {side:7s}: bound {row['bound_s']:.2f}s running "
                          f"{row['running_s']:.2f}s gone {row['gone_s']:.2f}s requests {row['requests']} "
                          f"({row['requests_per_pod']:.2f}/Pod) cpu {row['cpu_s']:.1f}s "
                          f"rss {row['peak_rss_mib']:.0f}MiB{extra}", flush=True)
                    print(f"    requests by verb: {dict(list(row['by_verb'].items())[:8])}", flush=True)
            med = {side: medians(rows) for side, rows in per.items() if rows}
            both = len(med) == 2
            results.append({"workers": n, **med,
                            "ratio": med["rlark"]["running_s"] / med["kuberay"]["running_s"] if both else None,
                            "requests_ratio": (med["rlark"]["requests_per_pod"]
                                               / med["kuberay"]["requests_per_pod"]) if both else None,
                            "rounds": per})
        if args.idle > 0:
            idle_row = idle_round(tb, max(sizes), work, args.idle)
            print(f"a Job of {idle_row['workers']} idle Workers: the server {idle_row['cpu_s']:.2f} CPU s "
                  f"in {args.idle:.0f} s, {idle_row['cpu_pct']:.1f} % of a core", flush=True)
        if many is not None:
            many_row = many_round(tb, audit, many[0], many[1], work)
            print(f"{many[0]} Jobs of {many[1]} Workers at once: bound {many_row['bound_s']:.2f}s "
                  f"running {many_row['running_s']:.2f}s gone {many_row['gone_s']:.2f}s; controller "
                  f"lag (submit -> first Pod) median {many_row['lag_median_s']:.2f}s max "
                  f"{many_row['lag_max_s']:.2f}s; requests {many_row['requests_per_pod']:.2f}/Pod "
                  f"cpu {many_row['cpu_s']:.1f}s rss {many_row['peak_rss_mib']:.0f}MiB GET /api/v1/jobs "
                  f"p95 {many_row['api_jobs_latency'].get('p95_ms', 0):.0f} ms", flush=True)
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nKubeRay v1.5.0: --qps {args.kuberay_qps} --burst {args.kuberay_burst} "
          f"--reconcile-concurrency {args.kuberay_concurrency}; medians of {args.rounds} rounds")
    hdr = f"{'N':>5} {'side':8} {'bound s':>8} {'running s':>9} {'gone s':>7} {'req/Pod':>8} {'cpu s':>6} {'rss MiB':>8}"
    print(hdr)
    for r in results:
        for side in sides:
            m = r[side]
            print(f"{r['workers']:>5} {side:8} {m['bound_s']:8.2f} {m['running_s']:9.2f} {m['gone_s']:7.2f} "
                  f"{m['requests_per_pod']:8.2f} {m['cpu_s']:6.1f} {m['peak_rss_mib']:8.0f}")
        if r["ratio"] is not None:
            print(f"{r['workers']:>5} {'ratio':8} running {r['ratio']:.2f}, requests/Pod "
                  f"{r['requests_ratio']:.2f} (RLark / KubeRay)")
    if args.plot and results:
        big = results[-1]
        plot(args.plot, big["workers"], {s: big["rounds"][s][0]["curve"] for s in sides})
        print(f"plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps({
            "testbed": {"up": list(UP_ARGS), "pod_resources": {"cpu": CPU, "memory": MEMORY}},
            "kuberay": {"version": kr.name, "qps": args.kuberay_qps, "burst": args.kuberay_burst,
                        "reconcile_concurrency": args.kuberay_concurrency},
            "sizes": results, **({"many": many_row} if many_row else {}),
            **({"idle": idle_row} if idle_row else {})}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
