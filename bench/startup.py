"""Benchmark: submit -> Running for a Job of ``--workers`` Workers (default 3: a head and two pool
Workers), against starting the same Ray nodes by hand.

Both sides, in the same process, alternating, ``--rounds`` times (default 5), with the same Ray
settings: token authentication on (``RAY_AUTH_MODE=token``, a random ``RAY_AUTH_TOKEN`` per round,
as RLark gives every Run since Ray 2.52), the same ``ray start`` flags:

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
(rlark / baseline; the target is <= 1.05, issue 23), and for RLark how long the head's barrier took to
notice each node after the node registered with the GCS (seen by an independent 10 ms poller,
a child process holding the round's token, on both sides; target <= 0.5 s), and where RLark's
time goes: the medians of its Run timeline's spans (:mod:`rlark.services.timeline`: Pending =
the controller's launch until the Worker runs, Preparing = the bootstrap before ``ray start``,
RayStarting = ``ray start`` until the node is up, Joined = waiting at the barrier) beside the
baseline's time until each node was alive; and on both sides the CPU seconds spent from submit
to the run script (the whole machine's, from /proc/stat, and this process's: RLark's server
runs in it), since on a machine with few cores every process RLark adds slows Ray's start.

Usage: .venv/bin/python bench/startup.py [--rounds 5] [--workers 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cryptography.fernet import Fernet

from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.ray_node import LABEL_RANK, LABEL_RUN, build_ray_start_command
from rlark.controller.loop import Controller
from rlark.ranks import plan_workers
from rlark.runtimes.base import local_block_size, local_worker_ports, ray_resources
from rlark.runtimes.local.runtime import LocalRuntime, use_pid_namespace
from rlark.runtimes.local.ports import block_units, can_bind, pick_loopback, pick_port_block, port_layout
from rlark.runtimes.local.reservations import Reservations
from rlark.secretbox import SecretBox
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
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1, memory: 1Gi}},
       mounts: [{{name: marks, type: hostPath, source: "{marks}", mountPath: "{marks}"}}]}}
    - {{name: pool, workers: {pool}, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 1, memory: 1Gi}}}}
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


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds this machine has been busy, on all its cores: /proc/stat's first line less
    idle and iowait, proc(5); CPU seconds of this process, all its threads): read before and
    after a side's round, their growth says what that side cost, RLark's server included (it
    runs in this process)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), time.process_time()


def cpu_spans(before: tuple[float, float]) -> dict:
    after = cpu_seconds()
    return {"machine CPU busy s": after[0] - before[0], "bench process CPU s": after[1] - before[1]}


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


#: the observer: Ray's internal GcsClient (a benchmark-only use of a private API, as the barrier's
#: own reader, rlark.bootstrap.node_table.GcsNodes) polling every 10 ms in a child process, which
#: holds the round's token (Ray reads RAY_AUTH_TOKEN once per process); prints
#: ``{rank: first time seen alive}`` as JSON when told to stop (SIGTERM)
OBSERVER = r"""
import json, signal, sys, time
from ray._raylet import GcsClient
address, uid = sys.argv[1], sys.argv[2]
seen, stop = {}, []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
client = None
while not stop:
    try:
        client = client or GcsClient(address=address)
        now = time.time()
        for info in client.get_all_node_info(timeout=2).values():
            labels = dict(info.labels)
            if labels.get("rlark.io/run") == uid and info.state == info.ALIVE:
                seen.setdefault(labels["rlark.io/node-rank"], now)
    except Exception:  # the GCS is not up yet
        client = None
    time.sleep(0.01)
print(json.dumps(seen), flush=True)
"""


class GcsObserver:
    """When each rank of a run is first seen alive in the GCS at ``address`` (a child process
    running :data:`OBSERVER` with ``token``); :meth:`finish` stops it and returns ``{rank:
    Unix seconds}``."""

    def __init__(self, address: str, run_uid: str, token: str):
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        self.proc = subprocess.Popen([sys.executable, "-c", OBSERVER, address, run_uid], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def finish(self) -> dict[int, float]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # inside Ray's client, deaf to the signal
            self.proc.kill()
            out, _ = self.proc.communicate()
        try:
            return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
        except (IndexError, ValueError):
            return {}


RESERVATIONS: Reservations  # host-wide, set in main()


def baseline_round(workdir: Path, pool: int) -> dict:
    job, findings = load_job(JOB.format(name="bench", marker="/dev/null", pool=pool,
                                        marks=workdir))
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
    token = secrets.token_urlsafe(32)  # as the controller makes a Run's (controller/launch.py)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    observer = GcsObserver(head_address, uid, token)
    ray = str(Path(sys.executable).with_name("ray"))
    procs = []
    cpu0 = cpu_seconds()
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
        env = {**os.environ, **auth, "RLINF_NODE_RANK": str(w.node_rank),
               "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        argv = build_ray_start_command(cfg, ray)
        if use_pid_namespace():
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", *argv]
        log = open(workdir / f"baseline-{uid}-{w.node_rank}.log", "wb")
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, head_address, str(len(planned)), uid, run_script],
                              env={**os.environ, **auth}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t_run = wait_for_file(marker)
        cpu = cpu_spans(cpu0)
        seen = observer.finish()
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
        if observer.proc.poll() is None:
            observer.proc.kill()
    alive = sorted(seen.values())
    return {"seconds": t_run - t0,
            "spans": {"first node alive": alive[0] - t0 if alive else None,
                      "last node alive": alive[-1] - t0 if alive else None,
                      "last alive -> run script": t_run - alive[-1] if alive else None,
                      **cpu}}


def _run_token(store: Store, box: SecretBox, uid: str, timeout: float = 30) -> str | None:
    """The Run's Ray token as the controller sealed it (``runs.ray_token``), once it did."""
    from sqlalchemy import select

    from rlark.store.models import RunRow

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with store.session() as s:
            sealed = s.scalar(select(RunRow.ray_token).where(RunRow.uid == uid))
        if sealed:
            return box.open(sealed, "the Run's Ray token")["token"]
        time.sleep(0.005)
    return None


def rlark_spans(timeline: dict, t0: float, t_run: float) -> dict:
    """Seconds per span of RLark's Run (its timeline, :func:`rlark.services.timeline
    .build_timeline`): for each phase the median over Workers, plus submit -> the first
    Worker's start and the last node up -> the run script."""
    per: dict[str, list[float]] = {}
    firsts = []
    for w in timeline["workers"]:
        for span in w["spans"]:
            if span["end"] is not None and span["phase"] != "Running":
                per.setdefault(span["phase"], []).append(span["end"] - span["start"])
        if w["spans"]:
            firsts.append(w["spans"][0]["start"])
    joined = [w["joinedAt"] for w in timeline["workers"] if w["joinedAt"] is not None]
    out = {f"{phase} (median per Worker)": statistics.median(v) for phase, v in per.items()}
    out["submit -> Run created"] = (min(firsts) - t0) if firsts else None
    out["last node up"] = (max(joined) - t0) if joined else None
    out["last node up -> run script"] = (t_run - max(joined)) if joined else None
    return out


def rlark_round(workdir: Path, svc: JobService, store: Store, box: SecretBox, name: str,
                pool: int) -> dict:
    marker = workdir / f"rlark-{name}"
    cpu0 = cpu_seconds()
    t0 = time.time()
    created = svc.create(JOB.format(name=name, marker=marker, pool=pool, marks=workdir))
    run = created["currentRun"]
    observer = None
    # the head address is known once the controller allocated it, the token once it sealed it
    deadline = time.monotonic() + 30
    while observer is None and time.monotonic() < deadline:
        w = svc.workers(name)[0]
        if w["portBase"] is not None:
            token = _run_token(store, box, run["uid"])
            assert token, "the controller sealed no Ray token for the Run"
            observer = GcsObserver(f"{w['ip']}:{port_layout(w['portBase'])['gcs']}", run["uid"], token)
        else:
            time.sleep(0.005)
    assert observer is not None, "the controller allocated no head address within 30 s"
    try:
        t_run = wait_for_file(marker)
        cpu = cpu_spans(cpu0)
    except TimeoutError:
        observer.proc.kill()
        job = svc.get(name)
        raise RuntimeError(f"RLark's Run never started its run script: {job['phase']} "
                           f"{job['reason']}: {job['message']}") from None
    seen = observer.finish()
    job = svc.get(name)
    # when the head's barrier saw each rank: its `nodes` lifecycle lines
    head_log = Path(job["currentRun"]["workers"][0]["log"])
    noticed: dict[int, float] = {}
    for line in head_log.read_text().splitlines():
        if line.startswith("RLARK_EVENT "):
            ev = json.loads(line[len("RLARK_EVENT "):])
            if ev["event"] == "nodes":
                for n in ev["joined"]:
                    noticed.setdefault(n["node_rank"], ev["ts"])
    lag = {r: round(noticed[r] - seen[r], 3) for r in noticed if r in seen}
    spans = {**rlark_spans(svc.timeline(name), t0, t_run), **cpu}
    alive = sorted(seen.values())
    if alive:  # as the baseline's: when the GCS had each node alive (the observer)
        spans.update({"first node alive": alive[0] - t0, "last node alive": alive[-1] - t0,
                      "last alive -> run script": t_run - alive[-1]})
    svc.stop(name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = svc.get(name)
        if j["phase"] == "Stopped" and all(w["finishedAt"] for w in j["currentRun"]["workers"]):
            break
        time.sleep(0.1)
    svc.delete(name)
    return {"seconds": t_run - t0, "barrier_lag_seconds": lag, "spans": spans,
            "observer_saw": len(seen)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=3, help="Workers of the Job (a head + pool)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="rlark-bench-"))
    # the head's run script writes its marker here: a Worker runs under a uid of its own with a
    # private /tmp, so the directory is a hostPath mount, writable by all (as /tmp is)
    workdir.chmod(0o1777)
    home = Path(tempfile.mkdtemp(prefix="rlark-bench-home-"))  # never under the mounted one
    os.environ["RLARK_HOME"] = str(home)
    global RESERVATIONS
    RESERVATIONS = Reservations()
    store = Store()
    box = SecretBox([Fernet.generate_key()])
    controller = Controller(store, LocalRuntime(RESERVATIONS), stop_runs_on_exit=True,
                            secret_box=box)
    svc = JobService(store, controller.wake)
    controller.start()
    rows = []
    try:
        for i in range(args.rounds):
            pool = args.workers - 1
            b = baseline_round(workdir, pool)
            r = rlark_round(workdir, svc, store, box, f"bench-{i}", pool)
            rows.append({"round": i + 1, "baseline": b["seconds"], "rlark": r["seconds"],
                         "ratio": r["seconds"] / b["seconds"], "barrier_lag": r["barrier_lag_seconds"],
                         "baseline_spans": b["spans"], "rlark_spans": r["spans"]})
            lag = ", ".join(f"rank {k}: {v:.3f}s" for k, v in sorted(r["barrier_lag_seconds"].items()))
            print(f"round {i + 1}: baseline {b['seconds']:.2f}s  rlark {r['seconds']:.2f}s  "
                  f"ratio {rows[-1]['ratio']:.3f}  barrier lag [{lag}]", flush=True)
    finally:
        controller.shutdown()
    lags = [v for row in rows for k, v in row["barrier_lag"].items() if k != 0]
    def medians(key: str) -> dict:
        names = {n for row in rows for n in row[key]}
        return {n: round(statistics.median(v), 3) for n in sorted(names)
                if (v := [row[key][n] for row in rows if row[key].get(n) is not None])}

    summary = {
        "workers": args.workers,
        "rounds": rows,
        "median_baseline_spans_seconds": medians("baseline_spans"),
        "median_rlark_spans_seconds": medians("rlark_spans"),
        "median_baseline_seconds": statistics.median(r["baseline"] for r in rows),
        "median_rlark_seconds": statistics.median(r["rlark"] for r in rows),
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "max_barrier_lag_seconds": max(lags) if lags else None,
        "median_barrier_lag_seconds": statistics.median(lags) if lags else None,
    }
    print(f"median: baseline {summary['median_baseline_seconds']:.2f}s, rlark "
          f"{summary['median_rlark_seconds']:.2f}s, median ratio {summary['median_ratio']:.3f} "
          f"(target <= 1.05); barrier lag median {summary['median_barrier_lag_seconds']} s, "
          f"max {summary['max_barrier_lag_seconds']} s (target <= 0.5)")
    for side in ("baseline", "rlark"):
        spans = summary[f"median_{side}_spans_seconds"]
        print(f"{side} spans (median s): " + "; ".join(f"{k} {v:.3f}" for k, v in spans.items()))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
