"""When a Run may be passed over again for what its own Workers did: the controller's work queue
keeps each Run's "not before" time, as a requeue-after does (issue 23 item 3: its cost grows with
what changes, not with what exists).

A pass over a Run loads every Worker of it and writes what changed: about a fifth of a second at
1,000 Workers. While their logs grow back to back (1,000 Pods starting, each writing its first
lines), a pass asked for by those changes followed the last one at once, so one lane, and with it
the interpreter's lock, stayed busy for the whole launch: the server's API answered slower and a
small Job submitted meanwhile waited; and once they run, each Worker's keeper writes a
heartbeat every 10 s: 100 lines a second from 1,000 Workers. Now such a pass comes no sooner
after the Run's last pass ended than three times that pass took (:data:`SPACING_RATIO`, at most
:data:`MAX_SPACING_SECONDS`): lines that come meanwhile are read together by the next pass (a
pass reads each log from its cursor: nothing is lost), and a Run's lane is busy at most a quarter
of the time. A Run of a few Workers, whose pass takes milliseconds, waits milliseconds.

The idle resync (a full pass every second when nothing happened: for deadlines such as the join
timeout or a stop's grace) passes over a large Run less often: every :func:`resync_interval`
seconds, one more second per :data:`RESYNC_WORKERS` live Workers, at most
:data:`MAX_RESYNC_SECONDS`. A Run of 1,000 idle Workers had cost a sixth of a core for nothing
(measured on the test bed); its deadlines are now kept to within 5 s. A wake (an API write: a
stop, a restart; a lane that moved its Run) still passes over every Run at once.
"""

from __future__ import annotations

import threading
from typing import Iterable

#: a Run's next pass for its Workers' changes comes this many times its last pass's duration
#: after that pass ended, or later
SPACING_RATIO = 3.0

#: ... but never more than this many seconds after it ended (the controller's idle resync)
MAX_SPACING_SECONDS = 1.0

#: live Workers a Run may have and still be passed over at every idle resync; one with more
#: is passed over every ``workers / RESYNC_WORKERS`` resync seconds (:func:`resync_interval`)
RESYNC_WORKERS = 200

#: the longest a Run waits for an idle resync (seconds): the precision of its deadlines
MAX_RESYNC_SECONDS = 10.0


def not_before(ended: float, took: float, ratio: float = SPACING_RATIO,
               most: float = MAX_SPACING_SECONDS) -> float:
    """The earliest time (the clock of ``ended``, seconds) of a Run's next pass for its
    Workers' changes, its last pass having ended at ``ended`` after ``took`` seconds. Pure."""
    return ended + min(most, ratio * max(0.0, took))


def resync_interval(workers: int, idle_resync: float, per: int = RESYNC_WORKERS,
                    most: float = MAX_RESYNC_SECONDS) -> float:
    """Seconds between two idle resyncs of a Run with ``workers`` live Workers, the controller
    resyncing every ``idle_resync`` seconds: that for up to ``per`` Workers, proportionally
    longer beyond, never over ``most`` (nor under ``idle_resync``). Pure."""
    return max(idle_resync, min(most, idle_resync * workers / per))


class PassSpacing:
    """Each Run's earliest next pass for its Workers' changes (:func:`not_before`). Lanes say
    when a Run's pass ended (:meth:`ended`); the loop asks which of the Runs that changed are
    due (:meth:`due`). Thread-safe."""

    def __init__(self, ratio: float = SPACING_RATIO, most: float = MAX_SPACING_SECONDS):
        self.ratio, self.most = ratio, most
        self._at: dict[int, float] = {}
        #: when each Run's last pass began (monotonic seconds)
        self._began: dict[int, float] = {}
        self._lock = threading.Lock()

    def ended(self, run_id: int, began: float, ended: float) -> None:
        """Run ``run_id``'s pass ran from ``began`` to ``ended`` (monotonic seconds)."""
        with self._lock:
            self._at[run_id] = not_before(ended, ended - began, self.ratio, self.most)
            self._began[run_id] = began

    def resync_due(self, run_ids: Iterable[int], workers: dict[int, int], now: float,
                   idle_resync: float) -> set[int]:
        """Those of ``run_ids`` an idle resync at ``now`` passes over: each whose last pass
        began at least :func:`resync_interval` of its live ``workers`` (Run id -> count; none
        counted: 0) ago, less half a resync (a lane begins a moment after the pass that handed
        it out: a Run of up to :data:`RESYNC_WORKERS` Workers is passed over at every one), or
        never passed over."""
        with self._lock:
            return {r for r in run_ids if r not in self._began or now - self._began[r]
                    >= resync_interval(workers.get(r, 0), idle_resync) - idle_resync / 2}

    def due(self, run_ids: Iterable[int], now: float) -> set[int]:
        """Those of ``run_ids`` whose next pass may come at ``now``; a Run never passed over
        is due."""
        with self._lock:
            return {r for r in run_ids if self._at.get(r, now) <= now}

    def keep_only(self, run_ids: Iterable[int]) -> None:
        """Forget every Run but ``run_ids`` (those still watched: ended Runs never come back)."""
        keep = set(run_ids)
        with self._lock:
            for r in self._at.keys() - keep:
                del self._at[r]
            for r in self._began.keys() - keep:
                del self._began[r]
