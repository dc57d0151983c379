"""Benchmark: server time of every console page with 1,000 Jobs in the store.

The store (SQLite, as ``rlark server`` uses by default) is filled through :class:`JobService`
(1,000 Jobs of 1-3 roles, 1-4 Workers each; every tenth restarted twice so it has a Runs
history; one Job gets a 5,000-line log per Worker, written where the local runtime writes). The
app is the one ``rlark server`` serves (``create_app``), without a controller so nothing changes
while it is measured, driven in-process; an ASGI wrapper measures **server time**: from the
request reaching the app to the last byte of the response body.

Each page is measured against a baseline in the same process, alternating: the plain JSON API
call that serves the same data (the list page against ``GET /api/v1/jobs?limit=20``, a Job's
overview against ``GET /api/v1/jobs/NAME``, wizard step 4 against ``POST /api/v1/check``...).
The report gives per page the median and 95th percentile, the baseline's median, and the ratio
of medians. Target: every page's p95 under 300 ms. Downloads (whole logs) grow with the logs;
they are reported (the test log is 6 Workers x 5,000 lines) but not judged.

Usage: .venv/bin/python bench/console.py [--jobs 1000] [--rounds 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

TARGET_MS = 300.0


class Timer:
    """ASGI wrapper: server time of the last request (seconds)."""

    def __init__(self, app):
        self.app = app
        self.last = 0.0

    async def __call__(self, scope, receive, send):
        start = time.perf_counter()

        async def timed_send(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.last = time.perf_counter() - start

        await self.app(scope, receive, timed_send)


def job_yaml(i: int) -> str:
    roles = 1 + i % 3
    lines = [
        "apiVersion: rlark.io/v1", "kind: Job", f"metadata: {{name: job-{i:04d}, labels: {{batch: b{i % 7}}}}}",
        "spec:", "  headRole: head", "  runScript: python train.py --config-name ppo",
        "  failurePolicy: {joinTimeoutSeconds: 120}", "  roles:",
    ]
    for r in range(roles):
        name = "head" if r == 0 else f"pool{r}"
        workers = 1 if r == 0 else 1 + (i + r) % 4
        lines.append(f"    - {{name: {name}, workers: {workers}, image: docker.io/rlinf/rlinf:0.3.0, "
                     f"resources: {{cpu: 1, memory: 1Gi}}, env: [{{name: SEED, value: '{i}'}}]}}")
    return "\n".join(lines) + "\n"


def fill(service, n: int, logs_root: Path) -> dict:
    from rlark.store import WorkerRow

    t0 = time.perf_counter()
    for i in range(n):
        service.create(job_yaml(i))
        if i % 10 == 0:
            service.restart(f"job-{i:04d}")
            service.restart(f"job-{i:04d}")
    fill_s = time.perf_counter() - t0
    target = f"job-{n // 2:04d}"  # with 1,000 Jobs: job-0500, 3 roles, 6 Workers
    # one Job with real-sized logs where the local runtime puts them
    with service.store.session() as s:
        workers = [w for w in s.query(WorkerRow).all() if w.name.startswith(target + "-")]
        for w in workers:
            path = logs_root / target / str(w.run.number) / f"{w.name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w") as f:
                f.write('RLARK_EVENT {"ts": 1767000000.0, "event": "phase", "phase": "Preparing"}\n')
                for k in range(5000):
                    f.write(f"2026-01-01 00:00:{k % 60:02d},000\tINFO step {k}: loss=0.{k:04d} "
                            f"reward=1.{k:03d} worker={w.name}\n")
            w.log_path = str(path)
    return {"fill_seconds": round(fill_s, 1), "target": target, "workers": len(workers)}


def wizard_form(name: str, step: int) -> dict[str, str]:
    return {
        "step": str(step), "mode": "create", "original": "", "tab": "0", "extra": "",
        "name": name, "head": "0",
        "role-0-name": "head", "role-0-workers": "1", "role-0-image": "docker.io/rlinf/rlinf:0.3.0",
        "role-0-cpu": "1", "role-0-memory": "1Gi", "role-0-gpu": "0",
        "role-1-name": "pool", "role-1-workers": "2", "role-1-image": "docker.io/rlinf/rlinf:0.3.0",
        "role-1-cpu": "1", "role-1-memory": "1Gi", "role-1-gpu": "0",
        "runScript": "python train.py", "joinTimeout": "120", "prepareTimeout": "600",
        "maxRestarts": "0", "grace": "10", "action": "next",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="rlark-bench-console-"))
    os.environ["RLARK_HOME"] = str(home)
    os.environ.pop("RLARK_DATABASE_URL", None)

    from fastapi.testclient import TestClient

    from rlark import settings
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store

    store = Store(None)
    service = JobService(store, host={"cpu": 64, "memory": 512 * 1024**3, "gpu": 0})
    print(f"filling the store with {args.jobs} Jobs through JobService ...", flush=True)
    info = fill(service, args.jobs, settings.logs_dir())
    job = info["target"]
    app = create_app(service)
    token = app.state.auth.bootstrap()  # every request is authenticated, as in production
    timer = Timer(app)
    client = TestClient(timer, follow_redirects=False, base_url="http://127.0.0.1",
                        headers={"Authorization": f"Bearer {token}"})
    yaml_body = job_yaml(args.jobs + 1).replace(f"job-{args.jobs + 1:04d}", "bench-new")
    form_hdr = {"Content-Type": "application/x-www-form-urlencoded", "HX-Request": "true"}

    def get(url):
        return lambda: client.get(url)

    def post_form(form):
        body = urlencode(form)
        return lambda: client.post("/create", content=body, headers=form_hdr)

    def post(url, body):
        return lambda: client.post(url, content=body, headers={"Content-Type": "application/yaml"})

    mid = (args.jobs // 20 // 2) + 1
    cases = [
        ("jobs list, page 1", get("/jobs"), get("/api/v1/jobs?limit=20")),
        (f"jobs list, page {mid}", get(f"/jobs?page={mid}"),
         get(f"/api/v1/jobs?limit=20&offset={(mid - 1) * 20}")),
        ("jobs list, name search", get("/jobs?q=job-04"), get("/api/v1/jobs?q=job-04&limit=20")),
        ("jobs list, phase filter", get("/jobs?phase=Pending&page=3"),
         get("/api/v1/jobs?phase=Pending&limit=20&offset=40")),
        ("jobs table (live poll)", get("/jobs/_table"), get("/api/v1/jobs?limit=20")),
        ("job overview", get(f"/jobs/{job}"), get(f"/api/v1/jobs/{job}")),
        ("job live part (poll)", get(f"/jobs/{job}/_live"), get(f"/api/v1/jobs/{job}")),
        ("job with runs history", get("/jobs/job-0010"), get("/api/v1/jobs/job-0010")),
        ("job events", get(f"/jobs/{job}?tab=events"), get(f"/api/v1/jobs/{job}/events")),
        ("job logs (last 1000 lines/Worker)", get(f"/jobs/{job}?tab=logs"),
         get(f"/api/v1/jobs/{job}/logs?tail=1000")),
        ("job logs, text search", get(f"/jobs/{job}?tab=logs&q=step+49"),
         get(f"/api/v1/jobs/{job}/logs?tail=1000")),
        ("download: logs CSV (all 30,000 lines)", get(f"/jobs/{job}/logs.csv"),
         get(f"/api/v1/jobs/{job}/logs")),
        ("download: logs text (all 30,000 lines)", get(f"/jobs/{job}/logs.txt"),
         get(f"/api/v1/jobs/{job}/logs")),
        ("job run record", get(f"/jobs/{job}?tab=record"), get(f"/api/v1/jobs/{job}/record")),
        ("download: record Markdown", get(f"/jobs/{job}/record.md"),
         get(f"/api/v1/jobs/{job}/record?format=md")),
        ("job spec", get(f"/jobs/{job}?tab=spec"), get(f"/api/v1/jobs/{job}")),
        ("nodes (this machine less the Jobs still active)", get("/nodes"), get("/api/v1/nodes")),
        ("create wizard (new)", get("/create"), get("/api/v1/schema")),
        ("edit wizard (from a Job)", get(f"/jobs/{job}/edit"), get(f"/api/v1/jobs/{job}")),
        ("wizard step 1 -> 2", post_form(wizard_form("bench-new", 1)),
         post("/api/v1/validate", yaml_body)),
        ("wizard step 3 -> 4 (preflight, YAML, ranks)", post_form(wizard_form("bench-new", 3)),
         post("/api/v1/check", yaml_body)),
        ("wizard step 4 (review)", post_form(wizard_form("bench-new", 4)),
         post("/api/v1/check", yaml_body)),
    ]
    for _, page, base in cases:  # warm up (templates, caches)
        for call in (page, base):
            r = call()
            assert r.status_code < 400, (r.status_code, r.text[:300])

    rows = []
    for name, page, base in cases:
        pt, bt = [], []
        for _ in range(args.rounds):
            page()
            pt.append(timer.last * 1000)
            base()
            bt.append(timer.last * 1000)
        pt.sort()
        p95 = pt[min(len(pt) - 1, int(round(0.95 * (len(pt) - 1))))]
        rows.append({"page": name, "median_ms": round(statistics.median(pt), 1),
                     "p95_ms": round(p95, 1), "max_ms": round(pt[-1], 1),
                     "baseline_median_ms": round(statistics.median(bt), 1),
                     "ratio": round(statistics.median(pt) / max(statistics.median(bt), 1e-6), 2)})

    width = max(len(r["page"]) for r in rows)
    print(f"\n{args.jobs} Jobs in the store ({info['fill_seconds']} s to fill), {args.rounds} "
          f"rounds per page, server time in ms; baseline = the JSON API for the same data\n")
    print(f"{'page':{width}}  median    p95    max  baseline  ratio")
    for r in rows:
        print(f"{r['page']:{width}}  {r['median_ms']:6.1f} {r['p95_ms']:6.1f} {r['max_ms']:6.1f}"
              f"  {r['baseline_median_ms']:8.1f}  {r['ratio']:5.2f}")
    slow = [r["page"] for r in rows if r["p95_ms"] >= TARGET_MS and not r["page"].startswith("download")]
    print(f"\ntarget: every page's p95 < {TARGET_MS:.0f} ms (downloads grow with the logs and are "
          "reported, not judged): "
          + ("met" if not slow else f"MISSED by {', '.join(slow)}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"jobs": args.jobs, "rounds": args.rounds, **info,
                                               "pages": rows}, indent=2) + "\n")
    store.dispose()
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
