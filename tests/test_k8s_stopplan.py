"""Which delete requests stop the Pods asked to stop (rlark.runtimes.kubernetes.stopplan; pure)."""

from __future__ import annotations

from rlark.runtimes.kubernetes.stopplan import MIN_BATCH, PodDelete, plan_deletes

M = "app.kubernetes.io/managed-by=rlark"
RUN, RANK = "rlark.io/run", "rlark.io/node-rank"


def plan(asked, tracked):
    return plan_deletes(asked, tracked, M, RUN, RANK)


def pods(n, run="u1", job="big"):
    return {f"{job}-pool-{i}": str(i) for i in range(n)}


def test_a_whole_run_asked_together_is_one_collection_delete():
    tracked = {"u1": pods(1000)}
    got = plan({name: ("u1", None) for name in tracked["u1"]}, tracked)
    assert got == [PodDelete(tuple(tracked["u1"]), None, f"{M},{RUN}=u1")]


def test_pods_not_asked_are_left_out_by_rank():
    tracked = {"u1": pods(MIN_BATCH + 1)}
    asked = {name: ("u1", 0) for name in list(tracked["u1"])[1:]}  # rank 0's run script finished
    (d,) = plan(asked, tracked)
    assert d.selector == f"{M},{RUN}=u1,{RANK} notin (0)" and d.grace == 0
    assert set(d.names) == set(asked)


def test_left_out_ranks_are_listed_once_in_numeric_order():
    asked = pods(MIN_BATCH, job="x")
    tracked = {"u1": {"a": "10", "b": "2", "c": "2", **asked}}
    (d,) = plan({n: ("u1", None) for n in asked}, tracked)
    assert d.selector.endswith(f"{RANK} notin (2,10)")


def test_a_left_out_pod_of_unknown_rank_makes_each_delete_single():
    # the watch has not shown it and it was not launched here: a label selector could not
    # spare it, so every Pod asked is deleted by name (with its uid precondition)
    tracked = {"u1": {**pods(MIN_BATCH), "big-pool-99": None}}
    asked = {name: ("u1", None) for name in pods(MIN_BATCH)}
    got = plan(asked, tracked)
    assert got == [PodDelete((n,), None) for n in asked]


def test_a_few_pods_or_a_pod_of_no_known_run_are_deleted_by_name():
    few = list(pods(MIN_BATCH - 1))
    got = plan({**{n: ("u1", None) for n in few}, "b": (None, 0)}, {"u1": pods(MIN_BATCH)})
    assert sorted(got, key=lambda d: d.names) == sorted(
        [PodDelete((n,), None) for n in few] + [PodDelete(("b",), 0)], key=lambda d: d.names)


def test_runs_and_graces_are_grouped_apart_and_every_pod_is_in_one_request():
    n = MIN_BATCH
    u1, u2 = list(pods(2 * n)), list(pods(n, job="other"))
    tracked = {"u1": pods(2 * n), "u2": pods(n, job="other")}
    asked = {**{p: ("u1", None) for p in u1[:n]}, **{p: ("u1", 0) for p in u1[n:]},
             **{p: ("u2", None) for p in u2}}
    got = plan(asked, tracked)
    first, second = ",".join(map(str, range(n, 2 * n))), ",".join(map(str, range(n)))
    assert [d.selector for d in got] == [f"{M},{RUN}=u1,{RANK} notin ({first})",
                                         f"{M},{RUN}=u1,{RANK} notin ({second})", f"{M},{RUN}=u2"]
    assert [d.grace for d in got] == [None, 0, None]
    named = [n for d in got for n in d.names]
    assert sorted(named) == sorted(asked) and len(named) == len(set(named))
