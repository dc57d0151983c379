"""The head's join barrier: every rank of the Run must be alive in Ray's node table exactly
once (:func:`check_ranks`, pure) before the run script starts; then, while it runs, the same
table is read every :data:`~rlark.bootstrap.config.NODE_CHECK_SECONDS` so a lost node stops
it (:meth:`JoinBarrier.check_alive`). One connection to the GCS for both
(:mod:`rlark.bootstrap.node_table`).
"""

from __future__ import annotations

import time

from rlark.bootstrap.config import (BARRIER_POLL_SECONDS, EXIT_JOIN_TIMEOUT, EXIT_NODE_LOST,
                                    EXIT_RANK_MISMATCH, EXIT_RAY_START_FAILED, JOIN_SLACK_SECONDS,
                                    RAY_EXIT_WAIT_SECONDS, RAY_START_TIMEOUT, BootstrapError)
from rlark.bootstrap.node_table import DriverNodes, GcsNodes, open_node_table
from rlark.bootstrap.ray_node import LABEL_RANK, LABEL_ROLE, LABEL_RUN, RayNode, port_open
from rlark.bootstrap.report import emit


def check_ranks(nodes: list[dict], run_id: str, num_nodes: int) -> tuple[dict[int, dict], list[int], list[str]]:
    """Match alive Ray nodes of this run (by ``rlark.io/run`` label) to node ranks.

    Args:
        nodes: ``ray.nodes()`` output (dicts with ``Alive``, ``NodeID``, ``NodeManagerAddress``,
            ``Labels``).
    Returns:
        ``(by_rank, missing, problems)``: rank -> node dict for ranks seen once alive, the
        ranks of 0..N-1 not seen alive, and human-readable problems (a rank seen twice, a rank
        outside 0..N-1). A dead node of this run only leaves its rank missing: before the
        barrier passes, its Worker may start ``ray start`` again (``RayStartRetried``), whose
        node then carries the rank beside the dead one's entry, which Ray's table keeps; a
        Worker that does not reports its own failure. Pure; used by the join barrier.
    """
    by_rank: dict[int, dict] = {}
    problems: list[str] = []
    for node in nodes:
        labels = node.get("Labels") or {}
        if run_id and labels.get(LABEL_RUN) != run_id:
            continue
        raw = labels.get(LABEL_RANK)
        try:
            rank = int(raw if raw is not None else "")  # no label: ValueError, as a bad one
        except (TypeError, ValueError):
            problems.append(f"node {node.get('NodeID', '?')[:12]} has rank label {raw!r}")
            continue
        if not node.get("Alive"):
            continue
        if not 0 <= rank < num_nodes:
            problems.append(f"rank {rank} is outside 0..{num_nodes - 1}")
        elif rank in by_rank:
            problems.append(
                f"rank {rank} is carried by two nodes ({by_rank[rank]['NodeManagerAddress']} and "
                f"{node.get('NodeManagerAddress')})"
            )
        else:
            by_rank[rank] = node
    missing = [r for r in range(num_nodes) if r not in by_rank]
    return by_rank, missing, problems


class JoinBarrier:
    """The head's view of its Run's Ray cluster, over one node-table connection that
    :meth:`wait` opens and :meth:`close` closes."""

    def __init__(self, node: RayNode):
        self.node = node
        self.table: GcsNodes | DriverNodes | None = None

    def wait(self) -> dict[int, dict]:
        """Wait for the head's GCS and raylet, then for every rank 0..N-1 of this Run to be
        alive in the node table exactly once; reports ``RayStarted``, ``Joining`` and a ``nodes``
        line on every change. Returns rank -> node (:func:`check_ranks`).

        Raises:
            BootstrapError: ``RayStartFailed``, ``HeadLost``, ``RankMismatch``, ``JoinTimeout``
                (naming the missing ranks) or ``Stopped``.
        """
        node, cfg = self.node, self.node.cfg
        start_deadline = time.monotonic() + max(RAY_START_TIMEOUT, cfg.join_timeout)
        while not port_open(cfg.head_host, cfg.head_port):
            if node.ray.poll() is not None:
                raise node.ray_exited("start")
            node.check_stopped()
            if time.monotonic() > start_deadline:
                raise BootstrapError(
                    "RayStartFailed", "the head's GCS never opened its port", EXIT_RAY_START_FAILED
                )
            time.sleep(0.05)
        try:
            self.table = open_node_table(cfg.head_address, node.env, on_spawn=node.children.append)
        except BootstrapError:
            raise
        except Exception as exc:  # the port is open but the GCS does not answer
            node.check_stopped()
            raise BootstrapError(
                "RayStartFailed", f"the head's GCS does not answer ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})", EXIT_RAY_START_FAILED,
            ) from None
        node_id = node.wait_node_up(start_deadline)
        if node_id is None:
            if node.ray.poll() is not None:
                raise node.ray_exited("start")
            node.check_stopped()
            raise BootstrapError("RayStartFailed", "the head's raylet never started",
                                 EXIT_RAY_START_FAILED)
        emit("phase", phase="RayStarted", ray_node_id=node_id)
        deadline = node.join_deadline  # from this Worker's start, prepare script included
        emit("phase", phase="Joining", expected=cfg.num_nodes)
        last: tuple | None = None
        registered = False  # the head's own node is in the GCS's table: its `ray start` is done
        while True:
            if node.ray.poll() is not None:
                raise node.ray_exited("alive" if registered else "start")
            node.check_stopped()
            try:
                nodes = self.nodes()
            except BootstrapError:
                # a head whose own `ray start` fails (Ray's "The current node timed out during
                # startup") takes its GCS down with it: a failed start, not a lost head
                if not registered and node.ray_exits_within(RAY_EXIT_WAIT_SECONDS):
                    raise node.ray_exited("start") from None
                raise
            by_rank, missing, problems = check_ranks(nodes, cfg.run_id, cfg.num_nodes)
            registered = registered or 0 in by_rank
            state = (tuple(sorted(by_rank)), tuple(problems))
            if state != last:
                last = state
                emit(
                    "nodes",
                    joined=[
                        {
                            "node_rank": r,
                            "ray_node_id": n["NodeID"],
                            "ip": n["NodeManagerAddress"],
                            "hostname": n.get("NodeManagerHostname"),
                            "role": (n.get("Labels") or {}).get(LABEL_ROLE),
                            # as Ray's node table has them (GcsNodeInfo labels, resources_total)
                            "labels": n.get("Labels") or {},
                            "resources": n.get("Resources") or {},
                        }
                        for r, n in sorted(by_rank.items())
                    ],
                    missing=missing,
                )
            if problems:
                raise BootstrapError(
                    "RankMismatch",
                    "node ranks are wrong: " + "; ".join(problems),
                    EXIT_RANK_MISMATCH,
                    problems=problems,
                )
            if not missing:
                return by_rank
            if time.monotonic() > deadline:
                raise BootstrapError(
                    "JoinTimeout",
                    f"rank{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(str, missing))} did not join within "
                    f"{cfg.join_timeout + JOIN_SLACK_SECONDS:g} s of the head's start",
                    EXIT_JOIN_TIMEOUT,
                    missing_ranks=missing,
                    joined_ranks=sorted(by_rank),
                )
            time.sleep(BARRIER_POLL_SECONDS)

    def nodes(self) -> list[dict]:
        """The node table now (:func:`~rlark.bootstrap.node_table.node_dict` dicts).

        Raises:
            BootstrapError: ``HeadLost`` when the GCS does not answer, ``Stopped``.
        """
        if self.table is None:
            raise RuntimeError("the node table is not open yet (wait opens it)")
        try:
            return self.table.nodes()
        except Exception as exc:
            self.node.check_stopped()
            raise BootstrapError(
                "HeadLost", f"lost the connection to this Run's Ray GCS ({type(exc).__name__})",
                EXIT_NODE_LOST,
            ) from None

    def check_alive(self) -> BootstrapError | None:
        """One check while the run script runs: the failure to report when a rank's node is no
        longer alive (``NodeLost``), a rank is wrong, or the GCS is gone (``HeadLost``); None
        when every rank is there."""
        try:
            _, missing, problems = check_ranks(self.nodes(), self.node.cfg.run_id,
                                               self.node.cfg.num_nodes)
        except BootstrapError as exc:
            return exc
        if missing or problems:
            lost = ", ".join(map(str, missing))
            return BootstrapError(
                "NodeLost",
                f"Ray no longer sees the node of rank{'s' if len(missing) > 1 else ''} "
                f"{lost} alive" if missing else "; ".join(problems),
                EXIT_NODE_LOST, missing_ranks=missing,
            )
        return None

    def close(self) -> None:
        """Close the node table (a driver child of :class:`DriverNodes` ends)."""
        if self.table is not None:
            self.table.close()
        self.table = None
