"""Which delete calls stop the Pods the controller asked to stop (pure).

The controller asks to stop each Worker of a Run on its own (``signal_stop`` / ``kill``, one call
per Worker as the Run reaches Stopping or a terminal phase). One ``DELETE`` per Pod makes a
1,000-Worker Run's stop cost 1,000 requests; the API's ``deletecollection``
(``DELETE /api/v1/namespaces/NS/pods?labelSelector=...``, Kubernetes API reference, "Pod" ->
"delete collection of Pod") stops them in one, with the same grace period semantics (the kubelet
sends SIGTERM, then SIGKILL after the grace period).

:func:`plan_deletes` groups what was asked by Run and grace period: a group of at least
:data:`MIN_BATCH` Pods becomes one delete of every RLark Pod labelled with the Run, minus (by
node rank) the Run's other tracked Pods that were not asked to stop (a head whose run script
finished is left to exit with its own code). Anything it cannot say that of (a Pod of no known
Run, a Pod left out whose rank the watch has not shown) is deleted on its own, by name, with its
uid as precondition (:class:`PodDelete` without ``selector``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: a Run's group of Pods to stop is sent as one collection delete from this many on; fewer are
#: deleted one by one, by name and uid (a handful of requests; and what RBAC's ``delete`` verb is
#: for, deploy/kubernetes/rbac.yaml)
MIN_BATCH = 8


@dataclass(frozen=True)
class PodDelete:
    """One delete request: ``names``, the Pods it stops; ``grace``, their grace period in seconds
    (None: each Pod's own); ``selector``, the label selector of a collection delete, or None for
    a delete of the one Pod in ``names`` by name."""

    names: tuple[str, ...]
    grace: int | None
    selector: str | None = None


def plan_deletes(asked: dict[str, tuple[str | None, int | None]],
                 tracked: dict[str, dict[str, str | None]], managed: str, run_label: str,
                 rank_label: str) -> list[PodDelete]:
    """The delete requests that stop every Pod in ``asked``.

    Args:
        asked: Pod name -> (its Run's uid or None when not known, grace period in seconds or None).
        tracked: Run uid -> {Pod name -> its node-rank label as the watch shows it, None when
            the watch has not shown the Pod}: every Pod the runtime tracks for the Run.
        managed: the selector term every RLark Pod matches (``key=value``).
        run_label, rank_label: the label keys of a Pod's Run uid and node rank.

    Returns:
        Collection deletes first (in the order their Runs were first asked), then single ones,
        each Pod of ``asked`` in exactly one request.
    """
    groups: dict[tuple[str, int | None], list[str]] = {}
    single: list[PodDelete] = []
    for name, (run, grace) in asked.items():
        if run is None:
            single.append(PodDelete((name,), grace))
        else:
            groups.setdefault((run, grace), []).append(name)
    batched: list[PodDelete] = []
    for (run, grace), names in groups.items():
        pods = tracked.get(run, {})
        left_out = [n for n in pods if n not in set(names)]
        ranks = [pods[n] for n in left_out]
        if len(names) < MIN_BATCH or any(r is None for r in ranks):
            single.extend(PodDelete((n,), grace) for n in names)
            continue
        selector = f"{managed},{run_label}={run}"
        if ranks:
            kept = sorted({r for r in ranks if r is not None}, key=_rank_key)
            selector += f",{rank_label} notin ({','.join(kept)})"
        batched.append(PodDelete(tuple(names), grace, selector))
    return batched + single


def _rank_key(rank: str) -> tuple[int, str]:
    return (int(rank), rank) if rank.isdigit() else (1 << 62, rank)
