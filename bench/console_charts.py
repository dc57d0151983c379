"""Benchmark: the Job page's charts in a real browser (issue 25, item 7): a 1,000-Worker Run's
timeline and 10 curves of 10,000 points each render in under 1 s.

A sibling of bench/console.py rather than part of it: that one measures server time in-process
(an ASGI wrapper, no socket, no browser); this one needs a served console (uvicorn on a loopback
port, as tests/server.py's ``ThreadedServer`` serves it: API and console, no controller, so
nothing changes while it is measured) and Debian's Chromium through Playwright, and measures
what a person waits for.

The store (SQLite, as ``rlark server`` uses by default) holds, made through :class:`JobService`:

- ``big``: a Run of 1,000 Workers (a head and 999 ``pool`` Workers in three roles; made by a
  Kubernetes-runtime service on the same Store, as the local runtime refuses that many) whose
  lifecycle moments are written as the controller keeps them (``WorkerRow.lifecycle["times"]``,
  moment name -> Unix seconds: ``keeper``, ``Preparing``, ``Prepared``, ``WaitingForHead``,
  ``StartingRay``, ``RayStarted``; the head's ``AllJoined`` and ``running``; ``exit``), spread
  as a real start-up spreads them (image pulls and prepare scripts of different lengths, a few
  stragglers, a few failures with their ``failed`` line), the Run Succeeded/Failed and ended;
- ``small``: the same shape with 1 Worker (the baseline of the timeline);
- ``curves``: a Job whose spec names a Hydra config with ``runner.logger.log_path: results``,
  whose head Worker's view of ``results/tensorboard`` (its working directory on the local
  runtime) holds an event file of 10 tags x 10,000 points written by tensorboard's own
  ``EventFileWriter`` (tests/curves_data.py); ``curves-small``: 10 tags x 10 points (baseline).

For each page the browser loads it ``--rounds`` times (after a warm-up); a round's time is from
the navigation's start to the first animation frame after the load event (so layout and paint
of the SVG are in it), with the expected SVG checked present (1,000 timeline rows, 10 curve
charts). Reported: median and max, the server's part (request start to response end, from
``PerformanceNavigationTiming``), the page's size and DOM element count, the baseline's median,
the ratio of medians, and where Chromium spent the round (its DevTools counters: style
recalculation, layout, script and all its main-thread tasks, which include HTML parsing and
paint). Baselines, in the same run and alternating with the page: the same page of
the small Run, and the browser's ``fetch`` of the JSON API that serves the same data.
Target: every chart page's median under 1,000 ms.

Usage: .venv/bin/python bench/console_charts.py [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_MS = 1000.0
CHROMIUM = "/usr/bin/chromium"
WORKERS = 1000
TAGS = ("rollout/rewards", "env/success_once", "env/return", "train/actor/policy_loss",
        "train/actor/grad_norm", "train/critic/value_loss", "train/actor/entropy",
        "time/rollout", "time/train", "time/step")
POINTS = 10_000

#: navigation start to the first animation frame after the load event, with the server's part
_TIMING = """async () => {
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const n = performance.getEntriesByType('navigation')[0];
  return {total: performance.now(), load: n.loadEventEnd, server: n.responseEnd - n.requestStart,
          bytes: n.transferSize, elements: document.getElementsByTagName('*').length};
}"""
#: the browser's fetch of a JSON API address, parsed
_FETCH = """async (url) => {
  const t0 = performance.now();
  const r = await fetch(url, {credentials: 'same-origin'});
  const data = await r.json();
  return {total: performance.now() - t0, ok: r.ok && !!data};
}"""


def job_yaml(name: str, pools: list[int], work: Path | None = None) -> str:
    lines = ["apiVersion: rlark.io/v1", "kind: Job", f"metadata: {{name: {name}}}", "spec:",
             "  headRole: head", "  runScript: python train.py"]
    if work is not None:
        lines += [f"  workingDir: {work}", "  rlinf: {configDir: config, configName: train}"]
    lines += ["  roles:", "    - {name: head, workers: 1, image: docker.io/rlinf/rlinf:0.3.0}"]
    for i, n in enumerate(pools):
        lines.append(f"    - {{name: pool{i}, workers: {n}, image: docker.io/rlinf/rlinf:0.3.0, "
                     "resources: {cpu: 1, memory: 1Gi}}")
    return "\n".join(lines) + "\n"


def lifecycles(n: int, t0: float, rng: random.Random) -> tuple[list[dict], float]:
    """``n`` Workers' lifecycle dicts (rank order, rank 0 the head), as the controller keeps
    them, and the Run's end (Unix seconds)."""
    out = []
    for rank in range(n):
        pull = rng.uniform(0.5, 4.0) + (rng.uniform(20, 60) if rng.random() < 0.01 else 0)
        prep = pull + rng.uniform(3, 12)
        start_ray = prep + rng.uniform(0.05, 0.3)
        up = start_ray + rng.uniform(2, 6)
        t = {"keeper": pull, "Preparing": pull + 0.1, "Prepared": prep, "StartingRay": start_ray,
             "RayStarted": up}
        if rank:
            t["WaitingForHead"] = prep + 0.02
        out.append(t)
    joined = max(t["RayStarted"] for t in out)
    out[0]["Joining"] = out[0]["RayStarted"] + 0.1
    out[0]["AllJoined"] = joined + 0.2
    out[0]["running"] = joined + 0.5
    end = joined + 600
    lives = []
    for rank, t in enumerate(out):
        life: dict = {"gone": True}
        if rank and rng.random() < 0.005:  # a few Workers lost their node mid-run
            at = rng.uniform(joined + 60, end - 60)
            t["failed"] = at
            life["failed"] = {"reason": "NodeLost", "message": "`ray start --block` exited with "
                              "code 1", "ts": t0 + at}
        t["exit"] = t.get("failed", end) + rng.uniform(0.5, 3)
        life["times"] = {k: round(t0 + v, 3) for k, v in t.items()}
        lives.append(life)
    return lives, t0 + max(t["exit"] for t in out)


def write_lives(service, name: str, rng: random.Random) -> int:
    """Give the current Run of Job ``name`` its Workers' moments; returns its Worker count."""
    from sqlalchemy import select

    from rlark.store import JobRow, RunRow

    t0 = time.time() - 3600
    with service.store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        run = s.get(RunRow, job.current_run_id)
        workers = sorted(run.workers, key=lambda w: w.node_rank)
        lives, end = lifecycles(len(workers), t0, rng)
        run.created_at = datetime.fromtimestamp(t0, timezone.utc)
        run.finished_at = datetime.fromtimestamp(end, timezone.utc)
        for row in (job, run):
            row.phase = "Succeeded"
        for w, life in zip(workers, lives):
            w.lifecycle = life
            w.finished_at = datetime.fromtimestamp(life["times"]["exit"], timezone.utc)
        return len(workers)


def curves_job(service, name: str, root: Path, points: int) -> None:
    """Job ``name`` whose head sees ``results/tensorboard`` with 10 tags x ``points``."""
    from tests.curves_data import write_events

    work = root / name
    (work / "config").mkdir(parents=True)
    work.chmod(0o755)
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "runner:\n  logger:\n    log_path: results\n    experiment_name: bench\n")
    service.create(job_yaml(name, [], work))
    data = {s: {t: float((s * (k + 3)) % 997) / 97.0 + k for k, t in enumerate(TAGS)}
            for s in range(points)}
    write_events(work / "results" / "tensorboard", data)


#: Chromium's own counters (DevTools protocol ``Performance.getMetrics``; seconds, cumulative
#: per page): what a round's time went to, beside the server's part
BREAKDOWN = {"RecalcStyleDuration": "style", "LayoutDuration": "layout",
             "ScriptDuration": "script", "TaskDuration": "tasks"}


def _counters(cdp) -> dict[str, float]:
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {short: got.get(name, 0.0) * 1000 for name, short in BREAKDOWN.items()}


def measure(page, url: str, check, cdp=None) -> dict:
    before = _counters(cdp) if cdp is not None else None
    page.goto(url, wait_until="load")
    m = page.evaluate(_TIMING)
    if cdp is not None and before is not None:
        # a navigation may start the counters afresh (a new document): a negative delta means so
        after = _counters(cdp)
        m.update({k: after[k] - before[k] if after[k] >= before[k] else after[k] for k in after})
    check(page)
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="rlark-bench-charts-"))
    home.chmod(0o755)
    os.environ["RLARK_HOME"] = str(home / "home")
    os.environ.pop("RLARK_DATABASE_URL", None)
    os.environ["RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT"] = str(2 * WORKERS)

    from playwright.sync_api import sync_playwright

    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests.server import ThreadedServer

    store = Store(f"sqlite:///{home / 'rlark.db'}")
    service = JobService(store, host={"cpu": 4096, "memory": 8192 * 1024**3, "gpu": 0})
    rng = random.Random(25)
    t = time.perf_counter()
    # a Run of 1,000 Workers is one on Kubernetes (the local runtime refuses it: one machine's
    # ports); the timeline reads only the Store, so a second service on the same Store makes it
    JobService(store, runtime="kubernetes", namespace="rlark").create(
        job_yaml("big", [333, 333, WORKERS - 667]))
    service.create(job_yaml("small", []))
    n_big, n_small = write_lives(service, "big", rng), write_lives(service, "small", rng)
    curves_job(service, "curves", home, POINTS)
    curves_job(service, "curves-small", home, 10)
    print(f"store: {n_big}- and {n_small}-Worker Runs, event files of {len(TAGS)} tags x {POINTS} "
          f"and x 10 points ({time.perf_counter() - t:.1f} s to make)", flush=True)
    srv = ThreadedServer(service).start()
    tag_q = "&".join(f"tag={t}" for t in TAGS)

    def rows(n):
        def check(page):
            got = page.locator("svg.timeline g.tl-row").count()
            assert got == n, (got, n)
        return check

    def charts(page):
        got = page.locator("svg.curve").count()
        assert got == len(TAGS), got

    cases = [
        ("timeline: Job page, 1,000-Worker Run", "/jobs/big", rows(n_big),
         "/jobs/small", rows(n_small), "/api/v1/jobs/big/runs/1/timeline"),
        ("curves: Curves tab, 10 tags x 10,000 points", f"/jobs/curves?tab=curves&{tag_q}", charts,
         f"/jobs/curves-small?tab=curves&{tag_q}", charts, "/api/v1/jobs/curves/runs/1/scalars"),
    ]
    rows_out = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.goto(srv.url + "/login")
            page.fill("#login-token", srv.token)
            page.click("#token-submit")
            page.wait_for_url("**/jobs")
            for name, url, check, small_url, small_check, api in cases:
                for _ in range(2):  # warm up: templates, the composed config, the browser's cache
                    measure(page, srv.url + url, check)
                    measure(page, srv.url + small_url, small_check)
                got, small, fetched = [], [], []
                for _ in range(args.rounds):
                    got.append(measure(page, srv.url + url, check, cdp))
                    small.append(measure(page, srv.url + small_url, small_check))
                    f = page.evaluate(_FETCH, srv.url + api)
                    assert f["ok"], f
                    fetched.append(f["total"])
                med = statistics.median(m["total"] for m in got)
                base = statistics.median(m["total"] for m in small)
                rows_out.append({
                    "page": name, "median_ms": round(med, 1),
                    "max_ms": round(max(m["total"] for m in got), 1),
                    "server_median_ms": round(statistics.median(m["server"] for m in got), 1),
                    "bytes": got[-1]["bytes"], "elements": got[-1]["elements"],
                    "small_median_ms": round(base, 1), "ratio_small": round(med / base, 2),
                    "api_fetch_median_ms": round(statistics.median(fetched), 1),
                    "ratio_api": round(med / statistics.median(fetched), 2),
                    "breakdown_median_ms": {k: round(statistics.median(m[k] for m in got), 1)
                                            for k in BREAKDOWN.values()}})
            browser.close()
    finally:
        srv.stop()
        store.dispose()

    print(f"\n{args.rounds} rounds per page in Chromium, ms from navigation start to the first "
          "frame after load; baselines: the same page of a 1-Worker Run / 10 x 10 points, and "
          "the browser's fetch of the JSON API of the same data\n")
    for r in rows_out:
        print(f"{r['page']}\n  median {r['median_ms']:.1f}  max {r['max_ms']:.1f}  server "
              f"{r['server_median_ms']:.1f}  {r['bytes']} bytes  {r['elements']} elements\n"
              f"  small page {r['small_median_ms']:.1f} (x{r['ratio_small']})  API fetch "
              f"{r['api_fetch_median_ms']:.1f} (x{r['ratio_api']})\n  in Chromium: "
              + "  ".join(f"{k} {v:.1f}" for k, v in r["breakdown_median_ms"].items()))
    slow = [r["page"] for r in rows_out if r["median_ms"] >= TARGET_MS]
    print(f"\ntarget: every chart page's median < {TARGET_MS:.0f} ms: "
          + ("met" if not slow else f"MISSED by {', '.join(slow)}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "pages": rows_out},
                                              indent=2) + "\n")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
