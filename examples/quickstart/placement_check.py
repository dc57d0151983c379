"""Prove that RLinf places each component on the nodes the config asks for.

Run this as the Ray *driver* on the head node (RLinf node rank 0) of a running
Ray cluster, with RAY_ADDRESS set to the head's GCS address (RLinf itself calls
``ray.init("auto")``)::

    python placement_check.py [--config-dir DIR] [--config-name quickstart] [OVERRIDE ...]

Hydra overrides (``key=value``, ``+key=value``) given after the options are applied as RLinf's
own entry points apply theirs. The summary is also written to ``<runner.output_dir>/placement.json``
(``results/`` of the working directory in config/quickstart.yaml; e.g.
``runner.output_dir=/outputs/run1`` elsewhere), an output the run record checks is readable
afterwards.

What it does, in the same order as a real RLinf training entry point:

1. Compose the Hydra config (``config/quickstart.yaml`` next to this file).
2. ``Cluster(cluster_cfg=cfg.cluster)`` - RLinf connects to Ray, waits for
   ``cluster.num_nodes`` nodes and runs a probe actor on each. The probe reads
   ``RLINF_NODE_RANK`` from the environment the node's raylet was started with;
   that is how RLinf numbers nodes. ``node_groups`` then map ranks to labels.
3. ``ComponentPlacement(cfg, cluster)`` - RLinf parses
   ``cluster.component_placement`` into one placement strategy per component.
   Placement ranks are counted *inside* the named node group, so
   ``pool: 0-1`` means cluster node ranks 1 and 2.
4. One RLinf ``Worker`` group per component is launched with that strategy.
   RLinf pins every worker to a node and tells it its node rank
   (``CLUSTER_NODE_RANK`` in the worker's environment).
5. Each worker reports where it really runs; the driver compares this with the
   Ray node label ``rlark.io/node-rank`` that RLark put on that node and with
   the layout the config asks for.

It proves: RLinf's node rank == RLark's node-rank label for every worker, and
every component runs on exactly the node ranks its node group + placement name.
Per worker it prints one line::

    RLINF_PLACEMENT {"component": ..., "worker_rank": ..., "rlinf_node_rank": ...,
                     "ray_node_id": ..., "ray_node_rank_label": ...,
                     "raylet_rlinf_node_rank": ..., "ok": ...}

``ok`` is true when the RLinf node rank equals the node's rank label, the node
is one the config expects for that component (and the one RLinf planned), and
the raylet's RLINF_NODE_RANK (null when not readable) agrees. Then one
``RLINF_LAYOUT`` line per component and a final ``RLINF_PLACEMENT_SUMMARY``.
Exit status: 0 all good, 3 any mismatch, 4 timeout, 1 any other error.
"""

import argparse
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

import hydra
import ray
from omegaconf import DictConfig, OmegaConf

# Importing rlinf.scheduler imports torch (a few seconds). It must not call
# ray.init itself: RLinf's Cluster() insists on initialising Ray.
from rlinf.scheduler import Cluster, ComponentPlacement, Worker

RANK_LABEL = "rlark.io/node-rank"  # Ray node label RLark sets on every node
EXIT_MISMATCH = 3
EXIT_TIMEOUT = 4


def raylet_env_var(name: str):
    """Value of env var `name` in the raylet that started this process, or None.

    Ray worker processes are children of their node's raylet, so walk up the
    parent chain until a process called "raylet" and read its /proc environ.
    """
    pid = os.getpid()
    for _ in range(32):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if comm == "raylet":
                raw = Path(f"/proc/{pid}/environ").read_bytes()
                env = dict(
                    item.split("=", 1) for item in raw.decode().split("\0") if "=" in item
                )
                return env.get(name)
        except (OSError, ValueError):
            return None
        if ppid <= 1:
            return None
        pid = ppid
    return None


class PlacementReporter(Worker):
    """The smallest useful RLinf worker: it only says where it runs."""

    def __init__(self):
        super().__init__()  # RLinf reads RANK, CLUSTER_NODE_RANK, ... here

    def report(self) -> dict:
        return {
            "worker_rank": self._rank,
            # Set by RLinf's WorkerGroup for every worker it launches:
            "rlinf_node_rank": int(os.environ["CLUSTER_NODE_RANK"]),
            "node_group": os.environ.get("NODE_GROUP_LABEL"),
            "ray_node_id": ray.get_runtime_context().get_node_id(),
            "raylet_rlinf_node_rank": raylet_env_var("RLINF_NODE_RANK"),
        }


def compose_config(config_dir: str, config_name: str, overrides: list[str]) -> DictConfig:
    warnings.filterwarnings("ignore", message=r"\s*version_base=")  # Hydra 1.4 migration notice
    with hydra.initialize_config_dir(
        config_dir=str(Path(config_dir).resolve()), version_base="1.1"
    ):
        return hydra.compose(config_name=config_name, overrides=overrides)


def expected_node_ranks(cfg: DictConfig, cluster: Cluster,
                        placement: ComponentPlacement, component: str) -> list[int]:
    """Cluster node ranks the *config* asks for, worked out by hand.

    CPU-only groups: resource rank i of a group is the group's i-th node rank.
    Several groups (`node_group: "a,b"`) are concatenated in order; without a
    `node_group` the whole cluster is used.
    """
    entry = next(
        value for key, value in cfg.cluster.component_placement.items()
        if component in [c.strip() for c in str(key).split(",")]
    )
    labels = entry.get("node_group") if isinstance(entry, DictConfig) else None
    if labels is None:
        group_nodes = list(range(cluster.num_nodes))
    else:
        if isinstance(labels, str):
            labels = labels.split(",")
        group_nodes = [
            rank
            for label in labels
            for rank in cluster.get_node_group(str(label).strip()).node_ranks
        ]
    return sorted({group_nodes[r] for r in placement.get_hardware_ranks(component)})


def emit(tag: str, payload: dict) -> None:
    print(f"{tag} {json.dumps(payload)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", default=str(Path(__file__).parent / "config"))
    parser.add_argument("--config-name", default="quickstart")
    parser.add_argument("--timeout", type=int, default=600,
                        help="give up (exit 4) after this many seconds; RLinf "
                             "itself waits forever for missing nodes")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="Hydra overrides, e.g. runner.output_dir=/outputs/run1")
    args = parser.parse_args()

    def on_timeout(signum, frame):
        print(f"placement_check: timed out after {args.timeout}s", file=sys.stderr, flush=True)
        os._exit(EXIT_TIMEOUT)

    signal.signal(signal.SIGALRM, on_timeout)
    signal.alarm(args.timeout)
    t0 = time.monotonic()

    cfg = compose_config(args.config_dir, args.config_name, args.overrides)

    # 1. RLinf's cluster: ray.init("auto"), wait for num_nodes, probe every node.
    cluster = Cluster(cluster_cfg=cfg.cluster)
    # 2. RLinf's parser of cluster.component_placement (takes the whole cfg).
    placement = ComponentPlacement(cfg, cluster)

    # Ray's view: node id -> value of the RLark rank label.
    rank_label = {n["NodeID"]: (n.get("Labels") or {}).get(RANK_LABEL)
                  for n in ray.nodes() if n["Alive"]}

    # 3. One worker group per component, placed by RLinf's own strategy.
    groups = {}
    for component in placement.components:
        strategy = placement.get_strategy(component)
        groups[component] = PlacementReporter.create_group().launch(
            cluster, placement_strategy=strategy, name=component
        )

    # 4. Ask every worker where it is and check it.
    workers = mismatches = 0
    used = set()
    for component, group in groups.items():
        planned = {p.rank: p.cluster_node_rank
                   for p in placement.get_strategy(component).get_placement(cluster)}
        expected = expected_node_ranks(cfg, cluster, placement, component)
        actual = set()
        for rep in group.report().wait():
            rank = rep["rlinf_node_rank"]
            label = rank_label.get(rep["ray_node_id"])
            raylet = rep["raylet_rlinf_node_rank"]
            ok = (
                label is not None and str(rank) == label
                and rank in expected and rank == planned[rep["worker_rank"]]
                and (raylet is None or raylet == str(rank))
            )
            emit("RLINF_PLACEMENT", {
                "component": component,
                "worker_rank": rep["worker_rank"],
                "rlinf_node_rank": rank,
                "ray_node_id": rep["ray_node_id"],
                "ray_node_rank_label": label,
                "raylet_rlinf_node_rank": raylet,
                "ok": ok,
            })
            workers += 1
            mismatches += not ok
            actual.add(rank)
        layout_ok = sorted(actual) == expected
        mismatches += not layout_ok
        used |= actual
        emit("RLINF_LAYOUT", {"component": component, "expected_node_ranks": expected,
                              "actual_node_ranks": sorted(actual), "ok": layout_ok})

    summary = {"workers": workers, "mismatches": mismatches, "node_ranks_used": sorted(used)}
    emit("RLINF_PLACEMENT_SUMMARY", summary)
    output_dir = OmegaConf.select(cfg, "runner.output_dir")
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "placement.json").write_text(json.dumps(summary) + "\n")
    print(f"placement_check: done in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    ray.shutdown()
    return EXIT_MISMATCH if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
