"""Benchmark: ``plan`` (:func:`rlark.rlinf_config.plan.plan`) on huge cluster sections.

Times, in one process, the median of several rounds of planning a cluster section of
``num_nodes`` N (a component on ``0-(N/10)``, one on ``all``, one node group of ``all``) for N =
1,000 and 10,000, and the refusal of ``num_nodes: 10**12`` (NumNodesInvalid: never expanded).
Baselines measured in the same run: planning the same section with N = 1 (what any plan
costs), so the refusal is reported as a multiple of it; and the 1,000-node plan, so the
10,000-node one is reported as a multiple of it (10x: linear in the nodes; 100x: quadratic).

Targets: the 10,000-node plan under 10 s, growth from 1,000 to 10,000 nodes under 20x (not
quadratic), the refusal under 10x a one-node plan (it looks at no node).
(tests/test_rlinf_plan.py checks what these plans say; this checks how long they take.)

Usage: .venv/bin/python bench/huge_plan.py [--rounds 3] [--json out.json]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rlark.rlinf_config.plan import plan

TARGET_10K_S = 10.0
TARGET_GROWTH = 20.0
TARGET_REFUSAL_VS_ONE = 10.0


def section(n: int) -> dict:
    """A cluster section of ``n`` nodes with a component on a tenth of them and one on all."""
    last = max(0, n // 10 - 1)
    return {"cluster": {"num_nodes": n, "component_placement": {"a": f"0-{last}", "b": "all"},
                        "node_groups": [{"label": "x", "node_ranks": "all"}]}}


def median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # what each plan says, so the times are of plans that did their work
    assert [r.workers for r in plan(section(10_000)).roles] == [10_000]
    refused = plan({"cluster": {**section(1)["cluster"], "num_nodes": 10**12}})
    assert [f.code for f in refused.findings] == ["NumNodesInvalid"] and refused.job is None
    one_s = median_time(lambda: plan(section(1)), args.rounds)
    k1_s = median_time(lambda: plan(section(1_000)), args.rounds)
    k10_s = median_time(lambda: plan(section(10_000)), args.rounds)
    refuse_s = median_time(lambda: plan({"cluster": {**section(1)["cluster"], "num_nodes": 10**12}}),
                           args.rounds)
    result = {
        "one_node_s": round(one_s, 5),
        "nodes_1000_s": round(k1_s, 4),
        "nodes_10000_s": round(k10_s, 4),
        "refuse_10e12_s": round(refuse_s, 5),
        "growth_1000_to_10000": round(k10_s / k1_s, 2),
        "refusal_vs_one_node": round(refuse_s / one_s, 2),
        "targets": {"nodes_10000_s": TARGET_10K_S, "growth": TARGET_GROWTH,
                    "refusal_vs_one_node": TARGET_REFUSAL_VS_ONE},
    }
    print(f"plan of 1 node       {one_s * 1000:8.2f} ms (baseline)")
    print(f"plan of 1,000 nodes  {k1_s * 1000:8.1f} ms")
    print(f"plan of 10,000 nodes {k10_s * 1000:8.1f} ms ({result['growth_1000_to_10000']}x the "
          f"1,000-node plan; linear is 10x)")
    print(f"refusal of 10**12    {refuse_s * 1000:8.2f} ms ({result['refusal_vs_one_node']}x a "
          "one-node plan)")
    ok = (k10_s < TARGET_10K_S and k10_s / k1_s < TARGET_GROWTH
          and refuse_s / one_s < TARGET_REFUSAL_VS_ONE)
    print("all targets met" if ok else "a target was missed (see the module's docstring)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
