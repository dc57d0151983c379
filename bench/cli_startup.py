"""Benchmark: what one ``rlark`` command costs before it does anything (its imports).

Times, as separate processes, the median of several rounds of:

* ``rlark --help`` (every command module imported, Typer building the help);
* ``python -c 'import rlark.cli.commands'`` (the CLI's imports alone);

against two baselines measured in the same run: ``python -c pass`` (the interpreter) and
``python -c 'import typer, httpx, rich.table, yaml'`` (the libraries any such CLI needs).
The CLI's own share is the ratio to the second baseline. Targets (ratios, so a busy machine
does not move them): the imports at most 1.5x the libraries' own, ``rlark --help`` at most 1.8x.
Before the record's schema left the CLI's imports (2026-12) ``rlark --help`` took 0.8-0.9 s here.

Usage: .venv/bin/python bench/cli_startup.py [--rounds 7] [--json out.json]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_timing import median_time  # noqa: E402

RLARK = str(Path(sys.executable).with_name("rlark"))
IMPORT_RATIO_TARGET = 1.5
HELP_RATIO_TARGET = 1.8


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    py = sys.executable
    times = {
        "python -c pass": median_time(lambda: run([py, "-c", "pass"]), args.rounds),
        "libraries": median_time(lambda: run([py, "-c", "import typer, httpx, rich.table, yaml"]),
                                 args.rounds),
        "import rlark.cli.commands": median_time(
            lambda: run([py, "-c", "import rlark.cli.commands"]), args.rounds),
        "rlark --help": median_time(lambda: run([RLARK, "--help"]), args.rounds),
    }
    ratio = times["import rlark.cli.commands"] / times["libraries"]
    help_ratio = times["rlark --help"] / times["libraries"]
    for name, t in times.items():
        print(f"{name:28s} {t * 1000:7.0f} ms")
    print(f"{'imports / libraries':28s} {ratio:7.2f} x (target <= {IMPORT_RATIO_TARGET})")
    print(f"{'--help / libraries':28s} {help_ratio:7.2f} x (target <= {HELP_RATIO_TARGET})")
    if args.json:
        args.json.write_text(json.dumps({"seconds": times, "importRatio": ratio, "helpRatio": help_ratio}, indent=2))
    ok = ratio <= IMPORT_RATIO_TARGET and help_ratio <= HELP_RATIO_TARGET
    print("OK" if ok else "target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
