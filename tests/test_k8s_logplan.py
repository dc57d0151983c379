"""When a Pod's log stream is opened again (rlark.runtimes.kubernetes.logplan): pure, no I/O."""

from __future__ import annotations

import pytest

from rlark.runtimes.kubernetes.logplan import Action, Do, FollowPolicy, backoff, next_action, stream_ended

P = FollowPolicy(max_streams=8, base=1.0, cap=30.0, settled=30.0)


def test_no_stream_before_the_container_runs():
    assert next_action("waiting", 0, P, 0.5) == Action(Do.WAIT)
    assert next_action("waiting", 7, P, 0.5) == Action(Do.WAIT)


def test_a_running_container_is_opened_at_once_the_first_time():
    assert next_action("running", 0, P, 0.99) == Action(Do.OPEN, delay=0.0)


@pytest.mark.parametrize("state", ["terminated", "gone"])
def test_an_ended_container_is_read_once_to_the_end_without_waiting(state):
    assert next_action(state, 5, P, 0.9) == Action(Do.OPEN, delay=0.0, last=True)


def test_backoff_doubles_per_early_end_up_to_the_cap_with_equal_jitter():
    lows = [backoff(n, P, 0.0) for n in range(1, 9)]
    highs = [backoff(n, P, 0.999999) for n in range(1, 9)]
    assert lows == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert highs == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0], rel=1e-5)
    assert backoff(0, P, 0.7) == 0.0
    assert backoff(10_000, P, 0.5) == 22.5  # no overflow however long it flaps


def test_jitter_spreads_pods_whose_streams_ended_together():
    delays = {next_action("running", 4, P, j / 10).delay for j in range(10)}
    assert len(delays) == 10 and min(delays) >= 4.0 and max(delays) < 8.0


def test_a_stream_that_ends_while_the_container_runs_counts_as_early():
    assert stream_ended("running", 0.01, False, 0, P) == (False, 1)
    assert stream_ended("running", 0.01, False, 3, P) == (False, 4)


def test_a_stream_that_lasted_resets_the_backoff():
    assert stream_ended("running", 30.0, False, 6, P) == (False, 1)


@pytest.mark.parametrize("state", ["terminated", "gone"])
def test_a_stream_that_ends_with_its_container_is_done(state):
    assert stream_ended(state, 0.01, False, 2, P) == (True, 2)


def test_the_last_read_is_done_whatever_the_state_says():
    assert stream_ended("running", 0.01, True, 0, P)[0] is True


def test_a_policy_out_of_range_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="max_streams"):
        FollowPolicy(max_streams=0)
    with pytest.raises(ValueError, match="base"):
        FollowPolicy(base=5.0, cap=1.0)
