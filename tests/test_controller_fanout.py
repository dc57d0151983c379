"""A Run's Workers launched a bounded number at once (rlark.controller.fanout.launch_all)."""

from __future__ import annotations

import threading

import pytest

from rlark.controller.fanout import launch_all


class Calls:
    """A launch function that records what runs at once; each call past the first holds until
    ``hold`` calls are in (so the overlap is certain, not timed) or ``gate`` opens."""

    def __init__(self, hold: int, fail: set[int] = frozenset()):
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.order: list[int] = []
        self.first_done = False
        self.hold = hold
        self.fail = fail
        self.in_ = threading.Semaphore(0)
        self.gate = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, spec: int) -> str:
        with self.lock:
            if spec != 0:
                assert self.first_done, "a launch started before the first ended"
            self.now += 1
            self.most = max(self.most, self.now)
            self.order.append(spec)
            self.threads.add(threading.current_thread().name)
            arrived = self.now
        try:
            if spec in self.fail:
                raise RuntimeError(f"launch {spec} failed")
            if spec != 0 and arrived < self.hold:
                assert self.gate.wait(30), "the gate never opened"
            elif spec != 0:
                self.gate.set()
            return f"pod-{spec}"
        finally:
            with self.lock:
                self.now -= 1
                if spec == 0:
                    self.first_done = True


def test_the_first_alone_then_at_most_the_bound_at_once_and_every_result_once():
    calls = Calls(hold=8)
    got = list(launch_all(calls, list(range(100)), 8))
    assert got[0] == (0, "pod-0")
    assert sorted(got) == [(i, f"pod-{i}") for i in range(100)]
    assert calls.most == 8  # the bound was reached (8 calls held until all 8 were in), never passed


def test_after_a_failure_nothing_more_starts_and_the_calls_under_way_are_reported():
    calls = Calls(hold=10**6, fail={3})  # the others hold until the test opens the gate
    gen = launch_all(calls, list(range(50)), 4)
    assert next(gen) == (0, "pod-0")
    i, failed = next(gen)  # the only call that can end: 1, 2 and 4 hold
    assert i == 3 and isinstance(failed, RuntimeError) and "launch 3 failed" in str(failed)
    calls.gate.set()
    rest = list(gen)
    # the calls under way (1, 2, 4) end and are reported; none past them started
    assert sorted(rest) == [(1, "pod-1"), (2, "pod-2"), (4, "pod-4")]
    assert sorted(calls.order) == [0, 1, 2, 3, 4]


def test_a_first_launch_that_fails_starts_no_other():
    calls = Calls(hold=1, fail={0})
    got = list(launch_all(calls, list(range(10)), 8))
    assert [i for i, _ in got] == [0] and isinstance(got[0][1], RuntimeError)
    assert calls.order == [0]


@pytest.mark.parametrize("bound", [1, 0])
def test_a_bound_of_one_launches_in_order_in_the_callers_thread(bound):
    calls = Calls(hold=0, fail={5})
    got = list(launch_all(calls, list(range(10)), bound))
    assert [i for i, _ in got] == [0, 1, 2, 3, 4, 5]
    assert calls.most == 1 and calls.threads == {threading.current_thread().name}


def test_nothing_to_launch_yields_nothing():
    assert list(launch_all(Calls(hold=0), [], 8)) == []
