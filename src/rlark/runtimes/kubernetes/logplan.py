"""When to open a Pod's log stream again, and how many may be open at once (pure).

The log API (``GET /api/v1/namespaces/NS/pods/NAME/log?follow=true``, Kubernetes API reference,
"Pod" -> "read log of the specified Pod": ``PodLogOptions``) ends a followed stream when the
container exits, but also for reasons that say nothing about the container: the kubelet or the
API server restarted, a proxy closed an idle connection, or (kwok, the test bed's Nodes) the
Node serves no log and ends every stream at once. Reopening at once after such an end turns one
Pod into a stream of requests (measured: 7-10 ``get pods/log`` per Pod within a launch of 100
Workers). The rules here decide instead:

* a container that has not started has no log: no stream (``WAIT``);
* a container that runs is followed; a stream that ended while it still runs is reopened after a
  backoff that doubles with each early end (``base`` .. ``cap`` seconds) with jitter, so Pods
  whose streams ended together do not come back together; a stream that lasted
  ``settled`` seconds or more resets the backoff;
* a container that has terminated (or a Pod that is gone) is read once more to the end
  (``OPEN`` with ``last=True``), then the follower is done (``DONE``).

:class:`Action` is the answer; the follower (:mod:`.logfollow`) does the I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Do(str, enum.Enum):
    """What a follower does next."""

    WAIT = "wait"  # until the Pod changes (no stream while the container has not started)
    OPEN = "open"  # open a stream after ``delay`` seconds
    DONE = "done"  # nothing more to read


@dataclass(frozen=True)
class Action:
    """``do``; for OPEN, ``delay`` seconds first and ``last``: read to the end, then DONE."""

    do: Do
    delay: float = 0.0
    last: bool = False


@dataclass(frozen=True)
class FollowPolicy:
    """Limits of the log followers.

    Args:
        max_streams: log streams open at once (per runtime); more Pods wait their turn.
        base: seconds before the first reopen after a stream ended early.
        cap: at most this many seconds between reopens.
        settled: a stream open at least this long was not an early end (backoff reset).
    """

    max_streams: int = 1024
    base: float = 1.0
    cap: float = 30.0
    settled: float = 30.0

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, not {self.max_streams}")
        if not 0 < self.base <= self.cap:
            raise ValueError(f"need 0 < base <= cap, not base={self.base} cap={self.cap}")


def backoff(early_ends: int, policy: FollowPolicy, jitter: float) -> float:
    """Seconds to wait after the ``early_ends``-th early end in a row (1, 2, ...): half of
    ``min(cap, base * 2**(early_ends-1))`` plus ``jitter`` (a number in [0, 1)) times the other
    half ("equal jitter": never less than half the step, so a flapping stream is slowed even at
    the lowest draw). 0 for ``early_ends`` 0."""
    if early_ends <= 0:
        return 0.0
    step = min(policy.cap, policy.base * 2.0 ** min(early_ends - 1, 32))
    return step / 2 + min(max(jitter, 0.0), 1.0) * step / 2


def next_action(container: str, early_ends: int, policy: FollowPolicy, jitter: float) -> Action:
    """What to do given the container's state (``waiting``, ``running``, ``terminated`` or
    ``gone``, as :meth:`.runtime.KubernetesRuntime.container_state` reads it) and how many
    streams in a row ended early (:func:`stream_ended`)."""
    if container == "waiting":
        return Action(Do.WAIT)
    if container in ("terminated", "gone"):
        return Action(Do.OPEN, last=True)
    return Action(Do.OPEN, delay=backoff(early_ends, policy, jitter))


def stream_ended(container: str, lasted: float, last: bool, early_ends: int,
                 policy: FollowPolicy) -> tuple[bool, int]:
    """After a stream ended (normally or broken): ``(done, early_ends)``. Done when it was the
    last read (``last``) or the container has terminated or is gone (what it wrote is read:
    the stream ran to its end); otherwise the stream ended early, and ``early_ends`` counts it
    (reset to 1 when the stream had lasted ``policy.settled`` seconds)."""
    if last or container in ("terminated", "gone"):
        return True, early_ends
    return False, 1 if lasted >= policy.settled else early_ends + 1
