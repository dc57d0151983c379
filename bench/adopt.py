"""Benchmark: server start -> every active Run adopted, with 100 active Workers (issue 12, item 7).

On the Kubernetes test bed (``scripts/k8s-testbed``: a real API server, scheduler and kwok Nodes
that run Pods without containers), RLark starts ``--jobs`` Jobs of ``--workers`` Workers each
(default 25 x 4 = 100 Pods), waits until every Pod runs, then shuts its server down the way an
upgrade does (the Runs keep running). Then, ``--rounds`` times, alternating:

* **adopt**: a new server on that store starts (a :class:`KubernetesRuntime`, which lists and
  watches the namespace's Pods and Events, and a :class:`Controller`) and makes its first pass,
  which adopts every active Run (:meth:`Controller._adopt_after_restart`) and observes every
  Worker; timed from the runtime's construction to the end of that pass, then checked: each Run
  has one more ``Adopted`` Event and is still active, and every Worker is seen alive.
* **baseline**: the same start and first pass, by the same code, on an empty store in a
  namespace with no Pods: what starting a server costs anyway.

Each adopting server is shut down the same way (Runs left running) before the next round. The
report gives every round, the medians, the median of per-round ratios (adopt / baseline) and
the adoption's own cost (adopt - baseline; target: the whole adopt start under 5 s).

Usage: .venv/bin/python bench/adopt.py [--jobs 25] [--workers 4] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import func, select  # noqa: E402

from rlark.controller.loop import Controller  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.services.jobs import JobService  # noqa: E402
from rlark.store import EventRow, RunRow, Store, WorkerRow  # noqa: E402
from tests.k8s_testbed import K8sTestbed, wait_for  # noqa: E402

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  failurePolicy: {{joinTimeoutSeconds: 3600}}
  roles:
    - {{name: head, workers: 1, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 100m, memory: 128Mi}}}}
    - {{name: pool, workers: {pool}, image: "docker.io/rlinf/rlinf:0.3.0", resources: {{cpu: 100m, memory: 128Mi}}}}
  runScript: "sleep 3600"
"""

ACTIVE = ("Starting", "Running")


def start_server(tb: K8sTestbed, namespace: str, db: Path) -> tuple[float, KubernetesRuntime, Controller, Store]:
    """A server's start on ``db``: the runtime (lists and watches), the controller and its first
    pass. Returns (seconds it took, runtime, controller, store)."""
    t0 = time.perf_counter()
    rt = KubernetesRuntime(kube=KubeClient(tb.core_v1(), namespace))
    store = Store(f"sqlite:///{db}")
    ctl = Controller(store, rt)
    ctl.reconcile_once()
    return time.perf_counter() - t0, rt, ctl, store


def stop_server(rt: KubernetesRuntime, ctl: Controller, store: Store) -> None:
    """An upgrade's shutdown: the Runs keep running (stop_runs_on_exit is off)."""
    ctl.shutdown()
    rt.shutdown()
    store.dispose()


def adopted_counts(store: Store) -> tuple[int, int, int]:
    """(active Runs, Adopted Events, launched unreleased Workers) in ``store``."""
    with store.session() as s:
        runs = s.scalar(select(func.count()).select_from(RunRow).where(RunRow.phase.in_(ACTIVE)))
        events = s.scalar(select(func.count()).select_from(EventRow).where(EventRow.reason == "Adopted"))
        workers = s.scalar(select(func.count()).select_from(WorkerRow).where(
            WorkerRow.released.is_(False), WorkerRow.handle.is_not(None)))
    return runs, events, workers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=25)
    ap.add_argument("--workers", type=int, default=4, help="Workers per Job (head included)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    total = args.jobs * args.workers
    nodes = max(2, -(-total // 100))
    print(f"starting the test bed ({nodes} kwok Nodes) ...", flush=True)
    tb = K8sTestbed.start("--nodes", str(nodes), "--node-pods", "110")
    work = Path(tempfile.mkdtemp(prefix="rlark-bench-adopt-"))
    try:
        busy_ns, idle_ns = tb.project_namespace("bench-adopt"), tb.project_namespace("bench-idle")
        busy_db, idle_db = work / "busy.db", work / "idle.db"
        # the Runs to adopt: started by a first server, every Pod running
        _, rt, ctl, store = start_server(tb, busy_ns, busy_db)
        ctl.start()
        jobs = JobService(store, ctl.wake, runtime="kubernetes", namespace=busy_ns)
        for i in range(args.jobs):
            jobs.create(JOB.format(name=f"j{i}", pool=args.workers - 1))
        admin = tb.admin()

        def all_running():
            pods = admin.list_namespaced_pod(busy_ns).items
            return sum(p.status.phase == "Running" for p in pods) == total
        print(f"{args.jobs} Jobs x {args.workers} Workers: waiting for {total} Pods to run ...", flush=True)
        wait_for(f"{total} Pods to run", all_running, timeout=600, interval=1.0)
        wait_for("every Worker's handle in the store", lambda: adopted_counts(store)[2] == total, 120)
        stop_server(rt, ctl, store)
        # the baseline's store: empty
        _, rt, ctl, store = start_server(tb, idle_ns, idle_db)
        stop_server(rt, ctl, store)

        rounds = []
        for r in range(args.rounds):
            seconds, rt, ctl, store = start_server(tb, busy_ns, busy_db)
            runs, events, workers = adopted_counts(store)
            alive = sum(1 for w in _workers(store) if rt.observe(w).alive)
            stop_server(rt, ctl, store)
            if (runs, events, workers, alive) != (args.jobs, args.jobs * (r + 1), total, total):
                raise SystemExit(f"round {r + 1}: {runs} active Runs, {events} Adopted Events, "
                                 f"{workers} Workers, {alive} alive; expected {args.jobs}, "
                                 f"{args.jobs * (r + 1)}, {total}, {total}")
            base, rt, ctl, store = start_server(tb, idle_ns, idle_db)
            stop_server(rt, ctl, store)
            rounds.append({"adopt": seconds, "baseline": base, "ratio": seconds / base})
            print(f"round {r + 1}: adopt {seconds:.2f} s, baseline {base:.2f} s, "
                  f"ratio {seconds / base:.2f}", flush=True)
        adopt = statistics.median(x["adopt"] for x in rounds)
        base = statistics.median(x["baseline"] for x in rounds)
        ratio = statistics.median(x["ratio"] for x in rounds)
        print(f"median: adopt {adopt:.2f} s for {total} Workers (target < 5 s), baseline {base:.2f} s, "
              f"ratio {ratio:.2f}, adoption's own cost {adopt - base:.2f} s "
              f"({(adopt - base) / total * 1000:.1f} ms per Worker)")
        if args.json:
            args.json.write_text(json.dumps({"workers": total, "rounds": rounds, "adopt": adopt,
                                             "baseline": base, "ratio": ratio}, indent=2))
        return 0 if adopt < 5.0 else 1
    finally:
        tb.down()


def _workers(store: Store):
    from rlark.controller.loop import ref

    with store.session() as s:
        return [ref(w) for w in s.scalars(select(WorkerRow).where(
            WorkerRow.released.is_(False), WorkerRow.handle.is_not(None))).all()]


if __name__ == "__main__":
    raise SystemExit(main())
