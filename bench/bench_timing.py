"""What the bench scripts share: the median wall time of a call (imported by scripts run as
``python bench/NAME.py``, whose own directory is first on ``sys.path``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], rounds: int) -> float:
    """The median of ``rounds`` wall times of ``fn()``, in seconds (``time.perf_counter``)."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
