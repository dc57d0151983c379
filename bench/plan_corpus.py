"""Benchmark: ``rlark plan`` over every config of the RLinf corpus (../shared/corpus/rlinf).

Runs the same function the CLI runs (:func:`rlark.rlinf_config.plan_config`: compose with Hydra,
parse the cluster section, resolve placements, suggest roles and a Job) on each YAML file, in one
process, and reports the total and per-phase times (compose vs. everything after it), the
slowest configs, and the verdicts (accepted by RLinf / refused / failed to compose / no cluster
section). The target is under 60 s for the whole corpus on a 2-core machine.

Usage: .venv/bin/python bench/plan_corpus.py [--corpus DIR] [--rounds 1] [--json out.json]
(``--corpus`` defaults to $RLARK_CORPUS, else ../shared/corpus next to the repository, else
/work/shared/corpus: the same lookup as the tests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rlark.findings import Severity
from rlark.rlinf_config import plan_config
from rlark.rlinf_config.compose import compose, locate

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.rlinf_corpus import find_corpus  # noqa: E402  (the tests' lookup, one place)


def one_round(root: Path, files: list[str]) -> dict:
    per_file: dict[str, float] = {}
    compose_s = 0.0
    verdicts = {"planned": 0, "refused": 0, "compose_failed": 0, "no_cluster": 0}
    started = time.perf_counter()
    for rel in files:
        t0 = time.perf_counter()
        plan = plan_config(root / rel)
        per_file[rel] = time.perf_counter() - t0
        codes = {f.code for f in plan.findings if f.severity == Severity.error}
        if codes & {"RLinfConfigIncomplete", "RLinfConfigInvalid", "RLinfConfigNotFound"}:
            verdicts["compose_failed"] += 1
        elif "RLinfClusterMissing" in codes:
            verdicts["no_cluster"] += 1
        elif codes:
            verdicts["refused"] += 1
        else:
            verdicts["planned"] += 1
    total = time.perf_counter() - started
    # compose alone, to split the time
    t0 = time.perf_counter()
    for rel in files:
        compose(*locate(root / rel))
    compose_s = time.perf_counter() - t0
    slowest = sorted(per_file.items(), key=lambda kv: -kv[1])[:5]
    return {"total_s": total, "compose_only_s": compose_s, "files": len(files),
            "verdicts": verdicts, "slowest": slowest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(find_corpus()))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    root = Path(args.corpus) / "rlinf"
    if not root.is_dir():
        print(f"no corpus at {root}; pass --corpus or set RLARK_CORPUS", file=sys.stderr)
        return 2
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))
    rounds = [one_round(root, files) for _ in range(args.rounds)]
    for i, r in enumerate(rounds, 1):
        print(f"round {i}: {r['files']} configs planned in {r['total_s']:.1f} s "
              f"(compose alone {r['compose_only_s']:.1f} s); {r['verdicts']}")
    median = statistics.median(r["total_s"] for r in rounds)
    print(f"median: {median:.1f} s for {len(files)} configs "
          f"({1000 * median / len(files):.0f} ms each; target < 60 s in all)")
    print("slowest:", ", ".join(f"{k} {v:.2f}s" for k, v in rounds[-1]["slowest"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rounds, "median_s": median}, indent=2))
    return 0 if median < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
