"""Leader election's pure part (``rlark.controller.leader``): what a candidate does with a Lease,
what it writes, and the timing the design rests on. The elector against a real API server, the
takeover and two real servers: tests/test_k8s_leader.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from rlark.controller.leader import (
    LEASE_SECONDS,
    READ_TIMEOUT,
    RENEW_DEADLINE,
    RENEW_PERIOD,
    RETRY_PERIOD,
    Action,
    Decision,
    Lease,
    decide,
    default_identity,
    lease_spec,
    micro_time,
)

ME, OTHER = "rlark-7d9f-abc_1a2b3c", "rlark-7d9f-xyz_4d5e6f"


def test_no_lease_is_created():
    assert decide(None, None, 100.0, ME) == Decision(Action.create)


def test_the_holder_renews():
    assert decide(Lease(holder=ME, version="5"), 0.0, 1000.0, ME) == Decision(Action.renew, ME)


def test_a_released_lease_is_taken_at_once():
    assert decide(Lease(holder="", version="7"), 100.0, 100.0, ME) == Decision(Action.acquire)


@pytest.mark.parametrize("seen,now,expected", [
    (100.0, 100.0, Decision(Action.wait, OTHER, 10.0)),   # just seen: its whole duration
    (100.0, 103.5, Decision(Action.wait, OTHER, 6.5)),
    (100.0, 109.99, Decision(Action.wait, OTHER, pytest.approx(0.01))),
    (100.0, 110.0, Decision(Action.acquire, OTHER)),       # unchanged for its duration: expired
    (100.0, 500.0, Decision(Action.acquire, OTHER)),
    (None, 500.0, Decision(Action.wait, OTHER, 10.0)),     # never seen before: from now
])
def test_another_holder_is_waited_for_until_unchanged_for_its_duration(seen, now, expected):
    assert decide(Lease(holder=OTHER, duration=10, version="9"), seen, now, ME) == expected


def test_expiry_counts_on_this_candidates_clock_never_the_lease_times():
    """renewTime long ago (another machine's clock, or a dead leader's) does not shorten the
    wait: only how long this candidate has seen the Lease unchanged counts."""
    old = {"metadata": {"resourceVersion": "3"},
           "spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 10,
                    "renewTime": "2001-01-01T00:00:00.000000Z"}}
    assert decide(Lease.from_object(old), 50.0, 51.0, ME).action is Action.wait


def test_the_lease_duration_is_the_lease_s_own_and_a_missing_one_is_never_zero():
    assert decide(Lease(holder=OTHER, duration=30, version="1"), 0.0, 20.0, ME).action is Action.wait
    lease = Lease.from_object({"metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": OTHER}})
    assert lease.duration == LEASE_SECONDS
    assert decide(lease, 0.0, LEASE_SECONDS - 0.5, ME).action is Action.wait


def test_lease_from_object():
    lease = Lease.from_object({
        "metadata": {"name": "rlark-controller", "resourceVersion": "812"},
        "spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 10, "leaseTransitions": 4,
                 "acquireTime": "2026-01-02T03:04:05.000006Z", "renewTime": "2026-01-02T03:04:15.000000Z"}})
    assert lease == Lease(holder=OTHER, duration=10.0, version="812", transitions=4,
                          acquired="2026-01-02T03:04:05.000006Z")
    assert Lease.from_object({"metadata": {"resourceVersion": "1"}, "spec": {}}).holder == ""


def test_what_a_candidate_writes():
    ts = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=timezone.utc).timestamp()
    stamp = "2026-03-04T05:06:07.890123Z"
    assert micro_time(ts) == stamp
    assert lease_spec(ME, None, Action.create, ts) == {
        "holderIdentity": ME, "leaseDurationSeconds": LEASE_SECONDS, "acquireTime": stamp,
        "renewTime": stamp, "leaseTransitions": 0}
    mine = Lease(holder=ME, version="4", transitions=2, acquired="2026-01-01T00:00:00.000000Z")
    renew = lease_spec(ME, mine, Action.renew, ts)
    assert (renew["acquireTime"], renew["renewTime"], renew["leaseTransitions"]) == (
        "2026-01-01T00:00:00.000000Z", stamp, 2)
    theirs = Lease(holder=OTHER, version="4", transitions=2, acquired="2026-01-01T00:00:00.000000Z")
    taken = lease_spec(ME, theirs, Action.acquire, ts)
    assert (taken["holderIdentity"], taken["acquireTime"], taken["leaseTransitions"]) == (ME, stamp, 3)


def test_identity_is_the_pod_name_and_a_random_suffix(monkeypatch):
    monkeypatch.setenv("HOSTNAME", "rlark-5c8d7-q2x9z")
    a, b = default_identity(), default_identity()
    assert a.startswith("rlark-5c8d7-q2x9z_") and b.startswith("rlark-5c8d7-q2x9z_") and a != b


def test_the_timing_keeps_one_reconciler_and_a_takeover_within_15_s():
    """A leader stops acting RENEW_DEADLINE after the start of its last successful renewal;
    another candidate takes over no earlier than LEASE_SECONDS after it saw that renewal, which
    came after its start: the gap between the two is the margin against two reconcilers. The
    takeover after a leader dies: its last renewal was at most RENEW_PERIOD before, a candidate
    saw it within RETRY_PERIOD (plus a read), waits LEASE_SECONDS, and writes (one call)."""
    assert RENEW_DEADLINE + 3 <= LEASE_SECONDS
    assert RENEW_PERIOD + 2 * READ_TIMEOUT <= RENEW_DEADLINE  # a slow renewal still fits
    worst_takeover = RETRY_PERIOD + READ_TIMEOUT + LEASE_SECONDS
    assert worst_takeover < 15


def test_a_job_submitted_to_a_follower_reaches_the_leader_within_a_short_idle_resync():
    """A follower cannot wake the leader's controller (``wake`` is in-process): the leader
    finds new work at its idle resync, which must stay short (measured end to end in
    tests/test_k8s_leader.py: under 5 s from the follower's answer to the Pods)."""
    from rlark.controller.loop import IDLE_RESYNC_SECONDS

    assert IDLE_RESYNC_SECONDS <= 1.0


def test_a_controller_whose_gate_is_closed_neither_acts_nor_writes(rlark_home):
    """``may_act`` (the elector's ``is_leader``) is asked before a pass: closed, a pass adopts
    nothing, changes no Run and writes no heartbeat; open, the same pass acts."""
    from rlark.controller.loop import Controller
    from rlark.runtimes.local.runtime import LocalRuntime
    from rlark.services.jobs import JobService
    from rlark.store import ControllerStateRow, Store

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    gate = {"open": False}
    ctl = Controller(store, LocalRuntime(), may_act=lambda: gate["open"])
    jobs = JobService(store, ctl.wake)
    jobs.create("apiVersion: rlark.io/v1\nkind: Job\nmetadata: {name: gated}\nspec:\n  headRole: head\n"
                "  runScript: 'true'\n  roles:\n  - {name: head, image: 'x/y:1', workers: 1}\n")
    try:
        ctl.reconcile_once()
        with store.session() as s:
            assert s.get(ControllerStateRow, 1) is None
        assert jobs.get("gated")["phase"] == "Pending"
        assert ctl.status() == {"leaderElection": False, "leading": True, "reconciling": False}
        jobs.stop("gated")  # a stop asked for while nobody leads: acted on once the gate opens
        ctl.reconcile_once()
        assert jobs.get("gated")["phase"] == "Pending"
        gate["open"] = True
        ctl.reconcile_once()
        assert jobs.get("gated")["phase"] == "Stopped"
        with store.session() as s:
            assert s.get(ControllerStateRow, 1) is not None  # and a heartbeat
    finally:
        store.dispose()
