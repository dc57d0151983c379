"""A database error while the database is unreachable is a 503 with ``Retry-After``
(:class:`~rlark.services.errors.StoreUnavailable`), for the API as JSON and for the console as a
page; any other database error stays the 500 of a damaged database or a bug."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from rlark.services.errors import StoreUnavailable
from rlark.store import Store
from rlark.store.health import RETRY_AFTER_SECONDS

#: what the store raises when it cannot talk to the database: a driver error (a refused or
#: dropped connection, among others) or no pooled connection within the pool's timeout
STORE_ERRORS: tuple[type[Exception], ...] = (DBAPIError, PoolTimeout)

#: how old an answer of the probe may be to judge a failed request (seconds): a request that
#: just failed asks again unless a probe answered this recently
FRESH_SECONDS = 0.5


def store_unavailable(store: Store, exc: BaseException) -> StoreUnavailable | None:
    """``exc`` (raised by a request's database work) as a :class:`StoreUnavailable` when the
    database does not answer now (:meth:`rlark.store.health.StoreHealth.check`, so one probe
    serves every failing request), else None: the database answers and ``exc`` is something
    else. Blocking (a probe may connect): call it from a worker thread."""
    if not isinstance(exc, STORE_ERRORS):
        return None
    if store.health.check(max_age=FRESH_SECONDS).reachable:
        return None
    return StoreUnavailable(RETRY_AFTER_SECONDS)
