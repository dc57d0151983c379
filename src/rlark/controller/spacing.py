"""When a Run may be passed over again for what its own Workers did: the controller's work queue
keeps each Run's "not before" time, as a requeue-after does (issue 23 item 3: its cost grows with
what changes, not with what exists).

A pass over a Run loads every Worker of it and writes what changed: about a fifth of a second at
1,000 Workers. While their logs grow back to back (1,000 Pods starting, each writing its first
lines), a pass asked for by those changes followed the last one at once, so one lane, and with it
the interpreter's lock, stayed busy for the whole launch: the server's API answered slower and a
small Job submitted meanwhile waited. Now such a pass comes no sooner after the Run's last pass
ended than that pass took (:data:`SPACING_RATIO`, at most :data:`MAX_SPACING_SECONDS`): lines
that come meanwhile are read together by the next pass (a pass reads each log from its cursor:
nothing is lost), and a Run's lane is busy at most half the time. A Run of a few Workers, whose
pass takes milliseconds, waits milliseconds. A wake (an API write, a lane that moved its Run) and
the idle resync still pass over every Run at once.
"""

from __future__ import annotations

import threading
from typing import Iterable

#: a Run's next pass for its Workers' changes comes this many times its last pass's duration
#: after that pass ended, or later
SPACING_RATIO = 1.0

#: ... but never more than this many seconds after it ended (the controller's idle resync)
MAX_SPACING_SECONDS = 1.0


def not_before(ended: float, took: float, ratio: float = SPACING_RATIO,
               most: float = MAX_SPACING_SECONDS) -> float:
    """The earliest time (the clock of ``ended``, seconds) of a Run's next pass for its
    Workers' changes, its last pass having ended at ``ended`` after ``took`` seconds. Pure."""
    return ended + min(most, ratio * max(0.0, took))


class PassSpacing:
    """Each Run's earliest next pass for its Workers' changes (:func:`not_before`). Lanes say
    when a Run's pass ended (:meth:`ended`); the loop asks which of the Runs that changed are
    due (:meth:`due`). Thread-safe."""

    def __init__(self, ratio: float = SPACING_RATIO, most: float = MAX_SPACING_SECONDS):
        self.ratio, self.most = ratio, most
        self._at: dict[int, float] = {}
        self._lock = threading.Lock()

    def ended(self, run_id: int, began: float, ended: float) -> None:
        """Run ``run_id``'s pass ran from ``began`` to ``ended`` (monotonic seconds)."""
        with self._lock:
            self._at[run_id] = not_before(ended, ended - began, self.ratio, self.most)

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
