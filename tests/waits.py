"""The one bounded, named wait the tests poll with (no sleep stands for a synchronisation: a wait
ends as soon as what it waits for is seen, and fails naming it at its bound)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def wait_until(what: str, predicate: Callable[[], T], timeout: float, interval: float = 0.2) -> T:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy, and return
    that. At ``timeout`` seconds fail the test naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})", pytrace=False)
        time.sleep(interval)
