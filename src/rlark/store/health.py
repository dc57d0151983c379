"""Whether the database answers: one bounded, cached probe shared by every caller.

``/healthz``, the API's error mapping (a database error while the database is unreachable is a
503, not a 500) and the server's state page ask :meth:`StoreHealth.check`. A probe opens a
connection of its own (never one of the pool, which requests may hold) and runs ``SELECT 1``;
PostgreSQL's ``connect_timeout`` bounds it. At most one probe runs at a time and its answer is
reused for ``ttl`` seconds, so a storm of health probes or of failing requests costs the
database one connection per ``ttl``, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import NullPool

log = logging.getLogger("rlark.store")

#: seconds an answer is reused
TTL_SECONDS = 2.0
#: seconds a PostgreSQL connection may take to open (libpq's ``connect_timeout``; whole seconds)
CONNECT_TIMEOUT_SECONDS = 5
#: what a 503 of an unreachable database tells the client to wait (``Retry-After``, seconds)
RETRY_AFTER_SECONDS = 5


def connect_args(url: URL) -> dict:
    """Driver arguments that bound how long opening a connection to ``url`` may take:
    PostgreSQL's ``connect_timeout`` (libpq, seconds) unless the URL sets its own; nothing for
    SQLite (a local file)."""
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        return {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    return {}


@dataclass(frozen=True)
class Reachability:
    """One probe's answer. ``error``: the driver's first line (None when reachable), for the
    server's log and its administrators only: it names the database's host. ``checked_at``:
    ``time.time()`` of the probe; ``latency_ms``: how long it took."""

    reachable: bool
    error: str | None
    checked_at: float
    latency_ms: float
    monotonic: float

    def view(self) -> dict:
        """For ``GET /api/v1/server`` (site administrators)."""
        from datetime import datetime, timezone

        return {"reachable": self.reachable, "error": self.error,
                "checkedAt": datetime.fromtimestamp(self.checked_at, timezone.utc).isoformat(),
                "latencyMs": round(self.latency_ms, 1)}


class StoreHealth:
    """The probe of the database at ``url`` (a SQLAlchemy URL); ``probes`` counts the probes
    run (each one connection)."""

    def __init__(self, url: URL, ttl: float = TTL_SECONDS):
        self.url = url
        self.ttl = ttl
        self.probes = 0
        self._engine: Engine | None = None
        self._last: Reachability | None = None
        self._lock = threading.Lock()

    def _probe_engine(self) -> Engine:
        if self._engine is None:
            # a connection of its own each time: the pool may be exhausted by the very requests
            # that wait for the database
            self._engine = create_engine(self.url, poolclass=NullPool,
                                         connect_args=connect_args(self.url))
        return self._engine

    def check(self, max_age: float | None = None) -> Reachability:
        """Whether the database answers: the last answer when it is younger than ``max_age``
        seconds (default: ``ttl``), else a new probe. Callers that arrive while a probe runs
        wait for its answer (bounded by the connect timeout) instead of probing again. Never
        raises for a database that does not answer."""
        limit = self.ttl if max_age is None else max_age
        last = self._last
        if last is not None and time.monotonic() - last.monotonic < limit:
            return last
        with self._lock:
            last = self._last
            if last is not None and time.monotonic() - last.monotonic < limit:
                return last  # another caller probed while this one waited
            before, self._last = last, self._probe()
            self._say_change(before, self._last)
            return self._last

    @staticmethod
    def _say_change(before: Reachability | None, now: Reachability) -> None:
        """One log line when the database stops answering and one when it answers again (not
        one per request in between)."""
        if not now.reachable and (before is None or before.reachable):
            log.error("the database is unreachable (%s): requests get 503 with Retry-After "
                      "until it answers again", now.error)
        elif now.reachable and before is not None and not before.reachable:
            log.warning("the database answers again")

    def _probe(self) -> Reachability:
        from rlark import settings

        self.probes += 1
        started, wall = time.monotonic(), time.time()
        error = None
        try:
            with self._probe_engine().connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # noqa: BLE001 - any failure to answer is "unreachable"
            cause = getattr(exc, "orig", None) or exc
            first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            error = settings.redact_url(f"{type(cause).__name__}: {first}",
                                        self.url.render_as_string(hide_password=False))
        return Reachability(reachable=error is None, error=error, checked_at=wall,
                            latency_ms=(time.monotonic() - started) * 1000,
                            monotonic=time.monotonic())

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
