"""A Run's Workers launched a bounded number at once (issue 23: 1,000 Pods one create after
another took twice KubeRay's time on the same API server).

The first Worker is launched alone: its launch makes what the whole Run shares (on Kubernetes the
ConfigMap that owns every Pod, the Service, the Secrets). The others follow at most
``concurrency`` at once (:attr:`rlark.runtimes.base.Runtime.launch_concurrency`; the runtime's own
client still paces its requests); after the first failure no further launch starts, and those
under way are waited for, so what was created is known and can be stopped.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Iterator, TypeVar

S = TypeVar("S")
R = TypeVar("R")


def launch_all(launch: Callable[[S], R], specs: list[S], concurrency: int
               ) -> Iterator[tuple[int, R | Exception]]:
    """Call ``launch`` on each of ``specs``: ``specs[0]`` alone first, then the rest with at most
    ``concurrency`` calls at once (1: one after another, in this thread).

    Yields:
        ``(index into specs, what launch returned or the Exception it raised)`` as each call
        ends (the first always first). After a failure no call starts; the ones already
        started are still yielded. Consume it to the end: a call under way is waited for.
    """
    if not specs:
        return
    started = 0
    failed = False
    if concurrency <= 1 or len(specs) == 1:
        for i, spec in enumerate(specs):
            try:
                result = launch(spec)
            except Exception as exc:
                yield i, exc
                return
            yield i, result
        return
    try:
        first = launch(specs[0])
    except Exception as exc:
        yield 0, exc
        return
    yield 0, first
    started = 1
    with ThreadPoolExecutor(max_workers=min(concurrency, len(specs) - 1),
                            thread_name_prefix="rlark-launch") as pool:
        running: dict[Future, int] = {}
        while True:
            while not failed and started < len(specs) and len(running) < concurrency:
                running[pool.submit(launch, specs[started])] = started
                started += 1
            if not running:
                return
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                i = running.pop(future)
                error = future.exception()
                if error is None:
                    yield i, future.result()
                elif isinstance(error, Exception):
                    failed = True
                    yield i, error
                else:  # KeyboardInterrupt, SystemExit: not a launch failure
                    raise error
