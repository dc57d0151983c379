"""Benchmark: rendering a 1,000-Worker Job as Kubernetes objects (``rlark render``).

Times, in one process, the median of several rounds of:

* ``render``: :func:`rlark.runtimes.kubernetes.render.render_run` (ConfigMap, Service, 1,000 Pods
  with their explicit env from ``bootstrap_env``);
* ``dump``: :func:`~rlark.runtimes.kubernetes.render.dump_stream` (the YAML stream ``rlark render``
  prints);

and reports each against a baseline measured in the same process on the same objects: building
them again as plain dicts (a recursive copy: the least any renderer must do) and ``json.dumps``
(the cheapest serialisation). Target: render + dump under 1 s.

Usage: .venv/bin/python bench/render.py [--workers 1000] [--rounds 5] [--json out.json]
Exit status 1 when render + dump takes 1 s or more.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlark.runtimes.kubernetes.render import RenderOptions, dump_stream, render_run  # noqa: E402
from tests.k8s_jobs import big_job  # noqa: E402
from bench_timing import median_time  # noqa: E402

TARGET_SECONDS = 1.0


def plain_copy(node):
    if isinstance(node, dict):
        return {k: plain_copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain_copy(v) for v in node]
    return node


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    job = big_job(args.workers)
    opts = RenderOptions(namespace="rl", owner={"apiVersion": "v1", "kind": "ConfigMap",
                                                "name": "ppo-run-bench", "uid": "0" * 36})
    objs = render_run(job, "bench", opts)
    text = dump_stream(objs)
    render_s = median_time(lambda: render_run(job, "bench", opts), args.rounds)
    dump_s = median_time(lambda: dump_stream(objs), args.rounds)
    copy_s = median_time(lambda: plain_copy(objs), args.rounds)
    json_s = median_time(lambda: json.dumps(objs), args.rounds)
    result = {
        "workers": args.workers,
        "objects": len(objs),
        "yaml_bytes": len(text),
        "render_s": round(render_s, 4),
        "dump_s": round(dump_s, 4),
        "total_s": round(render_s + dump_s, 4),
        "baseline_plain_dict_copy_s": round(copy_s, 4),
        "baseline_json_dumps_s": round(json_s, 4),
        "render_vs_plain_copy": round(render_s / copy_s, 2),
        "dump_vs_json_dumps": round(dump_s / json_s, 2),
        "target_s": TARGET_SECONDS,
    }
    print(f"{args.workers} Workers -> {len(objs)} objects, {len(text) / 1e6:.1f} MB of YAML")
    print(f"render {render_s:.3f} s ({result['render_vs_plain_copy']}x a plain dict copy of the "
          f"same objects, {copy_s:.3f} s)")
    print(f"dump   {dump_s:.3f} s ({result['dump_vs_json_dumps']}x json.dumps of them, {json_s:.3f} s)")
    ok = render_s + dump_s < TARGET_SECONDS
    print(f"total  {render_s + dump_s:.3f} s: {'under' if ok else 'NOT under'} the {TARGET_SECONDS:g} s target")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
