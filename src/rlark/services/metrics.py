"""RLark's own metrics in the Prometheus text format (``GET /metrics``), with prometheus-client.

What a scrape reads:

* from the store, at the scrape (so every replica answers the same, and a restart loses
  nothing): ``rlark_runs{phase}``, the Runs stored in each phase; ``rlark_runs_pending{reason}``,
  the queue: Pending Runs by why they wait (``none`` before the controller said anything);
  ``rlark_time_to_running_seconds``, a histogram of submit -> Running (``RunRow.created_at`` to
  ``running_at``) over the Runs stored;
* from this process, as it works: ``rlark_controller_pass_seconds`` (a pass over the active Runs
  up to handing each to its lane), ``rlark_controller_lane_seconds`` (one Run's turn),
  ``rlark_controller_lag_seconds`` (from a wake, e.g. a submit, to the pass it asked for), and
  ``rlark_api_request_duration_seconds{method,route,code}`` (``route``: the route's path
  template, so ``/api/v1/jobs/{name}`` is one series whatever the name; ``unmatched`` for a path
  no route has).

Each app has a registry of its own (not prometheus-client's global one), so two apps in one
process (tests) never mix their series. Metric and label names follow Prometheus' naming
conventions (https://prometheus.io/docs/practices/naming/): base units (seconds), ``_seconds``
suffixes, ``_total`` only on counters.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from rlark.status import Phase
from rlark.store import RunRow, Store

#: the text format's media type (prometheus-client's)
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: submit -> Running (seconds): a local one-Worker Job takes seconds, a large Kubernetes Job with
#: images to pull minutes
TIME_TO_RUNNING_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
#: the controller's own steps (seconds): a pass is milliseconds, a lane that launches a Run seconds
CONTROLLER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def histogram_buckets(values: Iterable[float], bounds: tuple[float, ...]) -> tuple[list[tuple[str, float]], float]:
    """The cumulative buckets of ``values`` for the upper ``bounds`` (ascending, seconds), with
    ``+Inf`` last, as the text format writes them, and the values' sum:
    ``([("1.0", 0), ..., ("+Inf", n)], sum)``."""
    counts = [0] * (len(bounds) + 1)
    total = 0.0
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1
        total += v
    buckets, running = [], 0
    for bound, count in zip([*map(str, bounds), "+Inf"], counts):
        running += count
        buckets.append((bound, float(running)))
    return buckets, total


class StoreCollector(Collector):
    """The metrics read from the store at each scrape (see the module docstring). ``store``:
    returns the store to read (asked at each scrape: an app's services may be swapped)."""

    def __init__(self, store: Callable[[], Store]):
        self.store = store

    def describe(self) -> Iterator[Metric]:
        """The families, without samples: what the registry checks names with when the
        collector is registered (so building an app reads nothing from the store)."""
        yield GaugeMetricFamily("rlark_runs", "", labels=["phase"])
        yield GaugeMetricFamily("rlark_runs_pending", "", labels=["reason"])
        yield HistogramMetricFamily("rlark_time_to_running_seconds", "")

    def collect(self) -> Iterator[Metric]:
        with self.store().session() as s:
            by_phase = dict(s.execute(select(RunRow.phase, func.count()).group_by(RunRow.phase)).all())
            pending = s.execute(select(RunRow.reason, func.count())
                                .where(RunRow.phase == Phase.Pending).group_by(RunRow.reason)).all()
            times = s.execute(select(RunRow.created_at, RunRow.running_at)
                              .where(RunRow.running_at.is_not(None))).all()
        runs = GaugeMetricFamily("rlark_runs", "Runs stored, by phase", labels=["phase"])
        for phase in Phase:
            runs.add_metric([phase.value], by_phase.get(phase, 0))
        yield runs
        queue = GaugeMetricFamily("rlark_runs_pending",
                                  "Pending Runs (the queue), by the reason they wait", labels=["reason"])
        for reason, count in pending:
            queue.add_metric([str(reason.value if reason is not None else "none")], count)
        yield queue
        buckets, total = histogram_buckets(
            (max(0.0, (running - created).total_seconds()) for created, running in times
             if running is not None and created is not None),
            TIME_TO_RUNNING_BUCKETS)
        hist = HistogramMetricFamily("rlark_time_to_running_seconds",
                                     "Seconds from a Run's submission to Running, over the Runs stored")
        hist.add_metric([], buckets, total)
        yield hist


class ServerMetrics:
    """One app's metrics: the store's (read at each scrape) and this process's histograms.

    ``observe_request(method, route, code, seconds)`` and ``observe_controller(what, seconds)``
    feed the histograms; :meth:`exposition` is a scrape's body (bytes, :data:`CONTENT_TYPE`).
    ``store``: returns the store the scrape reads."""

    def __init__(self, store: Callable[[], Store]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(StoreCollector(store))
        self.requests = Histogram(
            "rlark_api_request_duration_seconds", "Seconds to answer an HTTP request, by route",
            ["method", "route", "code"], registry=self.registry)
        self._controller = {
            what: Histogram(f"rlark_controller_{what}_seconds", help_text,
                            buckets=CONTROLLER_BUCKETS, registry=self.registry)
            for what, help_text in (
                ("pass", "Seconds of a controller pass over the active Runs (up to their lanes)"),
                ("lane", "Seconds of one Run's turn in the controller"),
                ("lag", "Seconds from a wake (a submit, a stop...) to the controller's pass"))}

    def observe_request(self, method: str, route: str | None, code: int, seconds: float) -> None:
        self.requests.labels(method, route or "unmatched", str(code)).observe(seconds)

    def observe_controller(self, what: str, seconds: float) -> None:
        """``what``: ``pass``, ``lane`` or ``lag`` (anything else is ignored)."""
        hist = self._controller.get(what)
        if hist is not None:
            hist.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

