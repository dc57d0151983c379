"""Benchmark: the record facts a head Worker gathers (:func:`rlark.bootstrap.facts.record_facts`).

Makes a dirty git checkout with a Hydra config directory (a commit, a changed file, an
untracked one: what tests/test_record_facts.py uses) and times, in one process, the median of
several rounds of ``record_facts`` on it with the default budget, and of its two largest parts
(``git_facts`` of the checkout, ``packages_facts`` of this environment). Baseline measured in the
same run: the same git commands its probes run (``rev-parse``, ``status``, ``config``,
``diff``), started one after the other with ``subprocess.run``: what any gatherer of these
facts pays.

Target: under the default facts budget (``FACT_BUDGET_SECONDS``, 20 s) with room to spare: under
a quarter of it. (tests/test_record_facts.py checks what the facts say and that a spent budget
starts no probe; this checks how long they take.)

Usage: .venv/bin/python bench/record_facts.py [--rounds 5] [--json out.json]
Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rlark.bootstrap.config import FACT_BUDGET_SECONDS, BootstrapConfig
from rlark.bootstrap.facts import packages_facts, record_facts
from rlark.bootstrap.facts_code import Budget, git_facts
from bench_timing import median_time

TARGET_S = FACT_BUDGET_SECONDS / 4


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", *args],
                   cwd=repo, check=True, capture_output=True)


def make_checkout(root: Path) -> Path:
    repo = root / "proj"
    (repo / "config" / "sub").mkdir(parents=True)
    (repo / "config" / "train.yaml").write_text("cluster: {num_nodes: 1}\nrunner: {max_steps: 3}\n")
    (repo / "config" / "sub" / "model.yaml").write_text("name: tiny\n")
    (repo / "train.py").write_text("print('v1')\n")
    git(repo, "init", "-q", "-b", "exp")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    (repo / "train.py").write_text("print('v2, uncommitted')\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlark-bench-facts-") as tmp:
        repo = make_checkout(Path(tmp))
        cfg = BootstrapConfig.from_env({
            "RLINF_NODE_RANK": "0", "RLARK_NUM_NODES": "1", "RLARK_HEAD_ADDRESS": "127.0.0.1:1",
            "RLARK_WORKING_DIR": str(repo), "RLARK_RLINF_CONFIG_DIR": "config",
            "RLARK_RLINF_CONFIG_NAME": "train"})
        facts = record_facts(cfg, Budget(FACT_BUDGET_SECONDS))
        assert facts["code"]["workingDir"].get("dirty") is True, facts["code"]  # all probes ran
        facts_s = median_time(lambda: record_facts(cfg, Budget(FACT_BUDGET_SECONDS)), args.rounds)

        def git_by_hand() -> None:
            for argv in (["rev-parse", "--show-toplevel"], ["status", "--porcelain=v2", "--branch"],
                         ["config", "--get", "remote.origin.url"], ["diff", "HEAD", "--binary"]):
                subprocess.run(["git", *argv], cwd=repo, capture_output=True)

        git_s = median_time(git_by_hand, args.rounds)
        git_facts_s = median_time(lambda: git_facts(str(repo), Budget(FACT_BUDGET_SECONDS)), args.rounds)
        packages_s = median_time(packages_facts, args.rounds)
    result = {
        "record_facts_s": round(facts_s, 3),
        "baseline_git_commands_s": round(git_s, 3),
        "record_facts_vs_git_commands": round(facts_s / git_s, 2),
        "git_facts_s": round(git_facts_s, 3),
        "git_facts_vs_git_commands": round(git_facts_s / git_s, 2),
        "packages_facts_s": round(packages_s, 3),
        "target_s": TARGET_S,
        "budget_s": FACT_BUDGET_SECONDS,
    }
    print(f"record_facts {facts_s:.3f} s ({result['record_facts_vs_git_commands']}x the same git "
          f"commands run by hand, {git_s:.3f} s)")
    print(f"  of which git_facts {git_facts_s:.3f} s ({result['git_facts_vs_git_commands']}x by hand), "
          f"packages_facts {packages_s:.3f} s")
    ok = facts_s < TARGET_S
    print(f"{'under' if ok else 'NOT under'} the {TARGET_S:g} s target (a quarter of the "
          f"{FACT_BUDGET_SECONDS:g} s budget)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
