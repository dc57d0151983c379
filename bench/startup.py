"""Benchmark: submit -> Running for the 3-Worker Job, against starting the same Ray nodes by hand.

Both sides, in the same process, alternating, ``--rounds`` times (default 5):

* **baseline**: the three ``ray start --block`` commands RLark would run (same flags, built by
  the same function, each in its own PID namespace with ``RLINF_NODE_RANK`` exported), all
  launched at once, plus an operator script that waits until all three nodes are alive and then
  starts the run script. It waits with the same barrier as RLark's head (the bootstrap's
  node-table reader, :func:`rlark.bootstrap.worker.open_node_table`, polled every
  ``BARRIER_POLL_SECONDS``), so the two sides differ only in what RLark adds; an operator using
  ``ray.init`` + ``ray.nodes()`` instead pays a Ray driver's start (about 0.3 s more per round
  here). This is the fastest honest by-hand procedure: no prepare scripts, no bookkeeping.
* **rlark**: an embedded RLark (SQLite store, controller, local runtime) given the same Job:
  validation, persistence, port/address allocation, three Worker bootstraps, the head's join
  barrier and rank check, then the run script.

"Running" is the moment the run script starts: its first command writes a timestamp, the same
on both sides. The report gives each round, the medians and the median of the per-round ratios
(rlark / baseline; the target is <= 1.15), and for RLark how long the head's barrier took to
notice each node after the node registered with the GCS (seen by an independent 10 ms poller;
target <= 0.5 s).

Usage: .venv/bin/python bench/startup.py [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.ray_node import LABEL_RANK, LABEL_RUN, build_ray_start_command
from rlark.controller.loop import Controller
from rlark.ranks import plan_workers
from rlark.runtimes.base import local_block_size, local_worker_ports, ray_resources
from rlark.runtimes.local import LocalRuntime, use_pid_namespace
from rlark.runtimes.local_ports import block_units, can_bind, pick_loopback, pick_port_block, port_layout
from rlark.runtimes.local_reservations import Reservations
from rlark.services.jobs import JobService
from rlark.spec import load_job
from rlark.store import Store

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 5
  failurePolicy: {{joinTimeoutSeconds: 120}}
  roles:
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1, memory: 1Gi}}}}
    - {{name: pool, workers: 2, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1, memory: 1Gi}}}}
  runScript: |
    python3 -c 'import time; print(time.time())' > {marker}
    sleep 30
"""

# the operator's barrier: RLark's own (bootstrap/barrier.py), so both sides wait the same way
WAITER = r"""
import os, subprocess, sys, threading, time
from rlark.bootstrap.barrier import check_ranks
from rlark.bootstrap.config import BARRIER_POLL_SECONDS
from rlark.bootstrap.node_table import open_node_table
from rlark.bootstrap.ray_node import port_open
head, n, uid, script = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
threading.Thread(target=lambda: __import__("ray._raylet"), daemon=True).start()  # as the head does
host, port = head.rsplit(":", 1)
while not port_open(host, int(port)):
    time.sleep(0.05)
while True:
    try:
        table = open_node_table(head, dict(os.environ))
        break
    except Exception:  # the port is open, the GCS not yet answering
        time.sleep(0.05)
while check_ranks(table.nodes(), uid, n)[1]:
    time.sleep(BARRIER_POLL_SECONDS)
subprocess.Popen(["bash", "-c", script])
"""


def wait_for_file(path: Path, timeout: float = 180) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{path} never written")


class GcsObserver(threading.Thread):
    """Polls the GCS every 10 ms (Ray's internal GcsClient: a benchmark-only use of a private
    API) and records when each rank of a run first appears alive."""

    def __init__(self, address: str, run_uid: str):
        super().__init__(daemon=True)
        self.address, self.uid = address, run_uid
        self.first_seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            from ray._raylet import GcsClient
        except ImportError as exc:  # pragma: no cover
            self.error = str(exc)
            return
        client = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = GcsClient(address=self.address)
                infos = client.get_all_node_info(timeout=2)
                now = time.time()
                for info in infos.values():
                    labels = dict(info.labels)
                    if labels.get(LABEL_RUN) == self.uid and info.state == 0:  # ALIVE
                        self.first_seen.setdefault(int(labels[LABEL_RANK]), now)
            except Exception as exc:  # the GCS is not up yet
                self.error = repr(exc)
            time.sleep(0.01)


RESERVATIONS: Reservations  # host-wide, set in main()


def baseline_round(workdir: Path) -> dict:
    job, findings = load_job(JOB.format(name="bench", marker="/dev/null"))
    assert job is not None, findings
    uid = uuid.uuid4().hex[:12]
    marker = workdir / f"baseline-{uid}"
    run_script = f"python3 -c 'import time; print(time.time())' > {marker}; sleep 30"
    planned = plan_workers(job)
    cpus = os.cpu_count() or 1
    sizes = [local_block_size(job.role(w.role), cpus) for w in planned]
    ips, bases = [], []
    for size in sizes:  # reserved host-wide, as the local runtime does (another server may run)
        tried = set(ips)
        ip = pick_loopback(tried)
        while not RESERVATIONS.try_reserve("ip", ip):
            tried.add(ip)
            ip = pick_loopback(tried)
        ips.append(ip)

        def free(b, ip=ip, size=size):
            units = list(block_units(b, size))
            got = [u for u in units if RESERVATIONS.try_reserve("ports", u)]
            if len(got) == len(units) and can_bind(ip, range(b, b + size)):
                return True
            for u in got:
                RESERVATIONS.release("ports", u)
            return False

        bases.append(pick_port_block([(b, b + z) for b, z in zip(bases, sizes)], size, free))
    head_address = f"{ips[0]}:{port_layout(bases[0])['gcs']}"
    ray = str(Path(sys.executable).with_name("ray"))
    procs = []
    t0 = time.time()
    for w, ip, base, size in zip(planned, ips, bases, sizes):
        res = ray_resources(job.role(w.role))
        layout = port_layout(base, size, local_worker_ports(job.role(w.role), cpus))
        cfg = BootstrapConfig(
            node_rank=w.node_rank, num_nodes=len(planned), role=w.role, worker=w.name, run_id=uid,
            head_address=head_address, node_ip=ip,
            ray_ports={k: v for k, v in layout.items() if k != "gcs"},
            num_cpus=res.num_cpus, num_gpus=res.num_gpus, memory_bytes=res.memory_bytes,
            object_store_bytes=res.object_store_bytes, ray_temp_dir=f"/tmp/rlark-bench/{uid}-{w.node_rank}",
        )
        env = {**os.environ, "RLINF_NODE_RANK": str(w.node_rank), "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        argv = build_ray_start_command(cfg, ray)
        if use_pid_namespace():
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", *argv]
        log = open(workdir / f"baseline-{uid}-{w.node_rank}.log", "wb")
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, head_address, str(len(planned)), uid, run_script],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t_run = wait_for_file(marker)
    finally:
        for p in [waiter, *procs]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for ip, base, size in zip(ips, bases, sizes):
            deadline = time.monotonic() + 30
            while not can_bind(ip, range(base, base + size)) and time.monotonic() < deadline:
                time.sleep(0.2)
            RESERVATIONS.release("ip", ip)
            for unit in block_units(base, size):
                RESERVATIONS.release("ports", unit)
        shutil.rmtree("/tmp/rlark-bench", ignore_errors=True)
    return {"seconds": t_run - t0}


def rlark_round(workdir: Path, svc: JobService, name: str) -> dict:
    marker = workdir / f"rlark-{name}"
    t0 = time.time()
    created = svc.create(JOB.format(name=name, marker=marker))
    run = created["currentRun"]
    observer = None
    # the head address is known once the controller allocated it: start the observer then
    deadline = time.monotonic() + 30
    while observer is None and time.monotonic() < deadline:
        w = svc.workers(name)[0]
        if w["portBase"] is not None:
            observer = GcsObserver(f"{w['ip']}:{port_layout(w['portBase'])['gcs']}", run["uid"])  # gcs: block's first port
            observer.start()
        else:
            time.sleep(0.005)
    try:
        t_run = wait_for_file(marker)
    except TimeoutError:
        job = svc.get(name)
        raise RuntimeError(f"RLark's Run never started its run script: {job['phase']} "
                           f"{job['reason']}: {job['message']}") from None
    job = svc.get(name)
    observer.stop.set()
    # when the head's barrier saw each rank: its `nodes` lifecycle lines
    head_log = Path(job["currentRun"]["workers"][0]["log"])
    noticed: dict[int, float] = {}
    for line in head_log.read_text().splitlines():
        if line.startswith("RLARK_EVENT "):
            ev = json.loads(line[len("RLARK_EVENT "):])
            if ev["event"] == "nodes":
                for n in ev["joined"]:
                    noticed.setdefault(n["node_rank"], ev["ts"])
    lag = {r: round(noticed[r] - observer.first_seen[r], 3)
           for r in noticed if r in observer.first_seen}
    svc.stop(name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = svc.get(name)
        if j["phase"] == "Stopped" and all(w["finishedAt"] for w in j["currentRun"]["workers"]):
            break
        time.sleep(0.1)
    svc.delete(name)
    return {"seconds": t_run - t0, "barrier_lag_seconds": lag,
            "observer_error": observer.error if not observer.first_seen else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="rlark-bench-"))
    os.environ["RLARK_HOME"] = str(workdir / "home")
    global RESERVATIONS
    RESERVATIONS = Reservations()
    store = Store()
    controller = Controller(store, LocalRuntime(RESERVATIONS), stop_runs_on_exit=True)
    svc = JobService(store, controller.wake)
    controller.start()
    rows = []
    try:
        for i in range(args.rounds):
            b = baseline_round(workdir)
            r = rlark_round(workdir, svc, f"bench-{i}")
            rows.append({"round": i + 1, "baseline": b["seconds"], "rlark": r["seconds"],
                         "ratio": r["seconds"] / b["seconds"], "barrier_lag": r["barrier_lag_seconds"]})
            lag = ", ".join(f"rank {k}: {v:.3f}s" for k, v in sorted(r["barrier_lag_seconds"].items()))
            print(f"round {i + 1}: baseline {b['seconds']:.2f}s  rlark {r['seconds']:.2f}s  "
                  f"ratio {rows[-1]['ratio']:.3f}  barrier lag [{lag}]", flush=True)
    finally:
        controller.shutdown()
    lags = [v for row in rows for k, v in row["barrier_lag"].items() if k != 0]
    summary = {
        "rounds": rows,
        "median_baseline_seconds": statistics.median(r["baseline"] for r in rows),
        "median_rlark_seconds": statistics.median(r["rlark"] for r in rows),
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "max_barrier_lag_seconds": max(lags) if lags else None,
        "median_barrier_lag_seconds": statistics.median(lags) if lags else None,
    }
    print(f"median: baseline {summary['median_baseline_seconds']:.2f}s, rlark "
          f"{summary['median_rlark_seconds']:.2f}s, median ratio {summary['median_ratio']:.3f} "
          f"(target <= 1.15); barrier lag median {summary['median_barrier_lag_seconds']} s, "
          f"max {summary['max_barrier_lag_seconds']} s (target <= 0.5)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
