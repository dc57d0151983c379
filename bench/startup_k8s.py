"""Benchmark: submit -> Running for the README's quickstart on the test bed's real node, against
the same Job on the local runtime (issue 21 item 5).

Two real ``rlark server`` processes, one per runtime, each on its own store: ``--runtime
kubernetes`` on the Kubernetes test bed's real node (``scripts/k8s-testbed up --real-node
--nodes 0``: a kubelet with containerd and runc; the Worker image the test bed built, with Ray,
torch and rlinf), and the default local runtime on this machine. Both are given the same Job file,
examples/quickstart/job.yaml as tests/k8s_real.py prepares it for the real node (the test bed's
image, the quickstart directory mounted at its own path, 500m CPU per Worker so three fit on
two cores; Ray still counts 1 CPU per node), through ``POST /api/v1/jobs``.

"Running" is the Job's phase as the API reports it (polled every 50 ms): all three Ray nodes
joined with their ranks and the head started the run script. Each round runs the local side,
then the Kubernetes side, each Run stopped once Running (its Workers released before the next),
``--rounds`` times (default 3). The report gives each round, the medians and the median of the
per-round ratios (kubernetes / local).

What the Kubernetes side adds: the API server, scheduler and kubelet (Pod creation, the CNI
network, the container start), the image's files read from containerd's snapshot rather than the
host's .venv, and the head found through the headless Service's DNS name.

Usage: .venv/bin/python bench/startup_k8s.py [--rounds 3] [--json out.json]
(as root, with ``scripts/k8s-testbed build --real-node`` done; RLARK_TESTBED_ATTACH_REAL_NODE=DIR
uses a real-node test bed already running in DIR instead of starting one.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tests.k8s_real import RealRlark, quickstart_copy  # noqa: E402
from tests.k8s_testbed import REAL_NODE_UP_ARGS, K8sTestbed  # noqa: E402
from tests.server import RlarkServer, ray_tmp_dir, remove_ray_tmp_dirs  # noqa: E402

POLL = 0.05
TIMEOUT = 900.0


def to_running(srv: RlarkServer, doc: dict) -> float:
    """Seconds from the submit to the Job's phase Running (fails naming the phase it ended in)."""
    name = doc["metadata"]["name"]
    t0 = time.monotonic()
    srv.submit(yaml.safe_dump(doc, sort_keys=False))
    while True:
        job = srv.job(name)
        if job["phase"] == "Running":
            took = time.monotonic() - t0
            break
        if job["phase"] in ("Succeeded", "Failed", "Stopped") or time.monotonic() - t0 > TIMEOUT:
            raise RuntimeError(f"{name} on {srv.url} never ran: {job['phase']} {job['reason']}: "
                               f"{job['message']}")
        time.sleep(POLL)
    r = srv.http.post(f"/api/v1/jobs/{name}/stop")
    assert r.status_code == 200, r.text
    srv.wait_released(name, timeout=300)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlark-bench-k8s-"))
    attach = os.environ.get("RLARK_TESTBED_ATTACH_REAL_NODE")
    started = time.monotonic()
    tb = K8sTestbed.attach(attach, real_node=True) if attach else K8sTestbed.start(*REAL_NODE_UP_ARGS)
    print(f"real-node test bed {'attached' if attach else 'started'} in {time.monotonic() - started:.1f} s "
          f"(image {tb.image})", flush=True)
    assert tb.image, "a real-node test bed names its Worker image (RLARK_TESTBED_IMAGE)"
    k8s = local = None
    rows = []
    try:
        k8s = RealRlark(tb, work)
        job_file = quickstart_copy(k8s.shared, tb.image)
        home = work / "local-home"
        home.mkdir()
        # the local runtime's Workers run under a uid of their own: let them read the quickstart
        local = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(),
                                   "RLARK_WORKER_READ_PATHS": str(work)}).start()
        base = yaml.safe_load(job_file.read_text())
        base["spec"]["workingDir"] = str(job_file.parent)
        for role in base["spec"]["roles"]:
            for m in role.get("mounts", []):
                m["source"] = str(job_file.parent)
        for i in range(args.rounds):
            row: dict = {"round": i + 1}
            for side, srv in (("local", local), ("kubernetes", k8s.server)):
                doc = json.loads(json.dumps(base))
                doc["metadata"]["name"] = f"quickstart-{i + 1}"
                row[side] = to_running(srv, doc)
            row["ratio"] = row["kubernetes"] / row["local"]
            rows.append(row)
            print(f"round {i + 1}: local {row['local']:.2f}s  kubernetes {row['kubernetes']:.2f}s  "
                  f"ratio {row['ratio']:.3f}", flush=True)
    finally:
        if local is not None:
            local.stop()
        if k8s is not None:
            k8s.close()
        if not attach:
            tb.down()
        remove_ray_tmp_dirs()
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "rounds": rows,
        "median_local_seconds": statistics.median(r["local"] for r in rows),
        "median_kubernetes_seconds": statistics.median(r["kubernetes"] for r in rows),
        "median_ratio": statistics.median(r["ratio"] for r in rows),
    }
    print(f"median: local {summary['median_local_seconds']:.2f}s, kubernetes "
          f"{summary['median_kubernetes_seconds']:.2f}s, median ratio (kubernetes / local) "
          f"{summary['median_ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
