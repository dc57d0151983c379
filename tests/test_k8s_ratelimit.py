"""The token bucket every Kubernetes API request of a server passes (client.RateLimit) and its
settings (--k8s-qps, --k8s-burst): pure, a clock of the test's own."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from rlark.runtimes.kubernetes.client import RateLimit  # noqa: E402
from rlark.runtimes.kubernetes.settings import rate_limit  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_goes_at_once_then_requests_are_spaced_at_the_rate():
    clock = Clock()
    limit = RateLimit(qps=10, burst=3, now=clock)
    assert [limit.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # the next ones queue behind each other, 1/qps apart
    assert [limit.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert (limit.waited, limit.waited_s) == (3, pytest.approx(0.6))


def test_a_quiet_spell_refills_the_bucket_up_to_the_burst_only():
    clock = Clock()
    limit = RateLimit(qps=10, burst=2, now=clock)
    limit.reserve(), limit.reserve(), limit.reserve()  # one in debt
    clock.t += 0.1  # pays the debt back
    assert limit.reserve() == pytest.approx(0.1)
    clock.t += 3600.0  # an hour: still only `burst` at once
    assert [limit.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_a_spare_token_is_taken_only_when_free_and_never_ahead_of_requests_in_debt():
    clock = Clock()
    limit = RateLimit(qps=10, burst=2, now=clock)
    assert limit.take_spare() == 0.0  # free: taken
    limit.reserve(), limit.reserve()  # Pods being created: one in debt
    taken = limit.taken
    # two tokens short of a free one: nothing taken, the wait until one would be free
    assert limit.take_spare() == pytest.approx(0.2)
    assert limit.take_spare() == pytest.approx(0.2) and limit.taken == taken
    clock.t += 0.1  # the debt is paid back, the bucket still empty
    assert limit.take_spare() == pytest.approx(0.1)
    clock.t += 0.1
    assert limit.take_spare() == 0.0 and limit.taken == taken + 1
    # what the spare took is gone for the next request
    assert limit.reserve() == pytest.approx(0.1)


def test_a_spare_token_can_be_asked_to_leave_some_in_the_bucket():
    """Log streams leave tokens for the Pods of a launch, which take spare ones too."""
    clock = Clock()
    limit = RateLimit(qps=10, burst=4, now=clock)
    assert limit.take_spare(keep=3.0) == 0.0  # 4 there: one taken, 3 left
    assert limit.take_spare(keep=3.0) == pytest.approx(0.1)  # 3 there: one more needed
    assert limit.take_spare() == 0.0  # a batch's takes it
    # a bucket smaller than what a stream leaves (`--k8s-burst 5`): it leaves all but one, not
    # more than the bucket can hold (no stream would ever get a spare token)
    small = RateLimit(qps=10, burst=5, now=clock)
    assert small.take_spare(keep=10.0) == 0.0
    assert small.take_spare(keep=10.0) == pytest.approx(0.1)


def test_a_request_waits_behind_at_most_one_token_however_many_batch_requests_wait():
    """The Pods of a large launch (16 at once) take only spare tokens, one waiter at a time
    (``wait_batch``): the bucket never goes into debt for them, so another Run's request
    reserves a token at most one token's time away. With them queued in debt as any request
    (``wait``) it waited behind all 16 (0.16 s at 100 a second, per request of its launch)."""
    import threading
    import time

    limit = RateLimit(qps=50, burst=1)
    stop = threading.Event()

    def batch() -> None:
        while not stop.is_set():
            limit.wait_batch()

    threads = [threading.Thread(target=batch, daemon=True) for _ in range(16)]
    for t in threads:
        t.start()
    try:
        # while the batch takes every token as it comes, other requests reserve theirs
        delays = []
        while len(delays) < 20:
            delays.append(limit.reserve())
            time.sleep(delays[-1])  # sent when its token comes, as KubeClient does
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert max(delays) <= 2 / 50, delays  # at most this request's own token and one before it


@pytest.mark.parametrize("qps, burst", [(0, 1), (-1, 5), (10, 0)])
def test_a_limit_out_of_range_is_refused(qps, burst):
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        RateLimit(qps=qps, burst=burst)


def test_the_settings_default_to_kuberays_and_refuse_what_is_not_a_number(monkeypatch):
    monkeypatch.delenv("RLARK_K8S_QPS", raising=False)
    monkeypatch.delenv("RLARK_K8S_BURST", raising=False)
    assert rate_limit() == (100.0, 200)
    monkeypatch.setenv("RLARK_K8S_QPS", "25.5")
    monkeypatch.setenv("RLARK_K8S_BURST", "50")
    assert rate_limit() == (25.5, 50)
    monkeypatch.setenv("RLARK_K8S_QPS", "fast")
    with pytest.raises(ValueError, match="RLARK_K8S_QPS='fast'"):
        rate_limit()
    monkeypatch.setenv("RLARK_K8S_QPS", "5")
    monkeypatch.setenv("RLARK_K8S_BURST", "0")
    with pytest.raises(ValueError, match="RLARK_K8S_BURST"):
        rate_limit()
