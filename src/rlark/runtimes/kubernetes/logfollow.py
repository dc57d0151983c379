"""Pod log followers on one asyncio loop: one thread for every Pod of a runtime, not one each.

Each followed Pod is a task on the loop (:class:`LogFollowers`); what it does when is decided by
:mod:`.logplan` (no stream before the container runs, backoff with jitter after a stream ended
early, one last read to the end after the container ended), at most
``FollowPolicy.max_streams`` streams are open at once, and every stream is resumed where the
file's :class:`.logcursor.LogCursor` says, so each line reaches the file once and in order.

The file is appended to, never rewritten: after each write the cursor is saved beside it
(:func:`cursor_path`), so a follower of a later server process, or one that replaces it, carries
on where this one stopped (:func:`.logcursor.restore`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import threading
import time
from typing import Any, Callable

from rlark.runtimes.kubernetes.client import KubeError
from rlark.runtimes.kubernetes.logreader import AsyncLogReader
from rlark.runtimes.kubernetes.logcursor import LogCursor, restore
from rlark.runtimes.kubernetes.logplan import Do, FollowPolicy, backoff, next_action, stream_ended

log = logging.getLogger("rlark.kubernetes")

#: HTTP statuses that mean "RLark may not": RBAC (403), credentials (401)
DENIED = (401, 403)
#: a follower waiting for its container re-reads the watch cache at least this often
WAIT_RECHECK_SECONDS = 5.0


def cursor_path(log_path: str) -> str:
    """Where the follower of ``log_path`` saves its :class:`.logcursor.LogCursor` state."""
    return log_path + ".cursor"


def _load_cursor(path: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the log cursor %s: %s", path, exc)
        return None


def _count_lines(path: str) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


class Follow:
    """One Pod's log into one file (a task of :class:`LogFollowers`). ``done`` is set when it
    has ended; ``last_data`` is the ``time.monotonic()`` of the last bytes read (or of the
    start); ``streams`` counts the log requests it made."""

    def __init__(self, owner: "LogFollowers", pod: str, path: str):
        self.owner = owner
        self.pod = pod
        self.path = path
        self.done = threading.Event()
        self.last_data = time.monotonic()
        self.streams = 0
        self.stopped = False
        #: stopped because this server stops: nothing more is written (not even a partial last
        #: line): the file and its cursor are the next follower's
        self.abandoned = False
        self._io = threading.Lock()  # held while the file or its cursor changes
        self._task: asyncio.Task | None = None
        self._changed: asyncio.Event | None = None  # set (in the loop) when the Pod changed

    def stop(self, abandon: bool = False) -> None:
        """Stop following (from any thread): the open stream, or the wait, is cancelled.
        ``abandon``: the file is left to another follower (of this process or the next), so once
        this returns nothing more is written, not even a line read only in part."""
        if abandon:
            with self._io:  # a write under way ends first
                self.abandoned = True
        self.stopped = True
        self.owner._call(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        else:
            self.done.set()

    def _open(self) -> tuple[Any, LogCursor]:
        """The file, opened to append, and the cursor to resume it with."""
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            size = 0
        cursor = restore(_load_cursor(cursor_path(self.path)), size)
        if cursor is None:
            cursor = LogCursor.after_lines(_count_lines(self.path) if size else 0, size)
        elif cursor.size < size:
            # the last process died between writing lines and saving the cursor: those lines
            # are fetched again, so they go
            log.info("cutting the log %s back from %d to %d bytes (written after its cursor)",
                     self.path, size, cursor.size)
            os.truncate(self.path, cursor.size)
        return open(self.path, "ab", buffering=0), cursor

    def _write(self, out, cursor: LogCursor, data: bytes) -> None:
        with self._io:
            if not data or self.abandoned:
                return
            out.write(data)
            tmp = cursor_path(self.path) + ".tmp"
            with open(tmp, "w") as f:
                json.dump(cursor.state(), f)
            os.replace(tmp, cursor_path(self.path))  # a reader sees the old state or the new one
        if self.owner.on_change is not None:
            self.owner.on_change(self.pod)

    async def _wait_change(self, timeout: float) -> None:
        """Until the Pod changes (:meth:`LogFollowers.changed`) or ``timeout`` seconds."""
        assert self._changed is not None
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self._changed.clear()

    async def run(self) -> None:
        o = self.owner
        self._changed = asyncio.Event()
        try:
            with self._io:
                if self.abandoned:
                    return
                out, cursor = self._open()
            with out:
                try:
                    await self._follow(out, cursor)
                finally:
                    if not self.abandoned:  # a last line without its newline
                        self._write(out, cursor, cursor.flush())
        except asyncio.CancelledError:
            pass  # stop(): the finally above wrote what was read
        except OSError as exc:
            log.warning("cannot write the log of %s to %s: %s", self.pod, self.path, exc)
        except Exception:  # noqa: BLE001 - one Pod's follower must not end the others
            log.exception("following the log of %s failed", self.pod)
        finally:
            self.done.set()
            o._ended(self)

    async def _follow(self, out, cursor: LogCursor) -> None:
        o = self.owner
        early = 0
        while not self.stopped:
            state = o.state(self.pod)
            act = next_action(state, early, o.policy, o.rand())
            if act.do is Do.WAIT:
                await self._wait_change(WAIT_RECHECK_SECONDS)
                continue
            if act.delay > 0:
                deadline = time.monotonic() + act.delay
                # a container that ends meanwhile is read at once (observe waits for its log)
                while (left := deadline - time.monotonic()) > 0 and o.state(self.pod) == "running":
                    await self._wait_change(left)
                state = o.state(self.pod)
                if state == "waiting":
                    continue
                act = next_action(state, 0, o.policy, 0.0)
            if state == "gone" and o.held_by_another(self.pod):
                return  # the name is another Pod's: its log is not this Worker's
            failed = False
            async with o.slots:
                since = cursor.resume(time.time())
                opened = time.monotonic()
                self.streams += 1
                o.streams_opened += 1
                try:
                    async with o.reader.stream(self.pod, o.container, since) as chunks:
                        o.note_denied(self.pod, None)
                        async for chunk in chunks:
                            self.last_data = time.monotonic()
                            self._write(out, cursor, cursor.feed(chunk))
                except KubeError as exc:
                    if exc.status == 404 or state == "gone":
                        return  # nothing left to read
                    if exc.status in DENIED:
                        o.note_denied(self.pod, exc)
                    # 400: not started yet; refused; no connection: again, later
                    early, failed = early + 1, True
            if failed:
                if act.last:  # an ended container's next try has no delay of its own
                    await asyncio.sleep(backoff(early, o.policy, o.rand()))
                continue
            done, early = stream_ended(o.state(self.pod), time.monotonic() - opened, act.last,
                                       early, o.policy)
            if done:
                return


class LogFollowers:
    """The log followers of one runtime: a task per Pod on one asyncio loop in one thread
    (started on the first :meth:`follow`).

    Args:
        reader: makes the :class:`.logreader.AsyncLogReader` (called in the loop's thread).
        container: the container whose log is read.
        state: the container's state from the watch cache: ``waiting``, ``running``,
            ``terminated`` or ``gone``.
        held_by_another: whether the watch cache holds a Pod of that name that is not the
            Worker's (its log is never read).
        note_denied: told when a log read was refused (401/403) and when one worked again (None).
        policy: stream limit and backoff (:class:`.logplan.FollowPolicy`).
        rand: a number in [0, 1) for the jitter.
        on_change: told a Pod's name when bytes of its log were written to its file, and when
            its follower ended (what the controller watches between passes).
    """

    def __init__(self, reader: Callable[[], AsyncLogReader], container: str,
                 state: Callable[[str], str], held_by_another: Callable[[str], bool],
                 note_denied: Callable[[str, KubeError | None], None],
                 policy: FollowPolicy = FollowPolicy(), rand: Callable[[], float] = random.random,
                 on_change: Callable[[str], None] | None = None):
        self._make_reader = reader
        self.on_change = on_change
        self.container = container
        self.state = state
        self.held_by_another = held_by_another
        self.note_denied = note_denied
        self.policy = policy
        self.rand = rand
        #: log requests made (all Pods, since the start)
        self.streams_opened = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._live: set[Follow] = set()  # touched in the loop's thread only
        self._all: set[Follow] = set()  # not done yet (under _lock)
        self.reader: AsyncLogReader
        self.slots: asyncio.Semaphore

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    self.reader = self._make_reader()
                    self.slots = asyncio.Semaphore(self.policy.max_streams)
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name="rlark-logs", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _call(self, fn: Callable[[], None]) -> None:
        """``fn()`` in the loop's thread (soon)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def follow(self, pod: str, path: str) -> Follow:
        """Start following ``pod``'s log into ``path`` (from where the file's cursor says);
        returns its :class:`Follow`. After :meth:`shutdown`, one that is done at once."""
        f = Follow(self, pod, path)
        if self._closed:
            f.done.set()
            return f
        loop = self._ensure_loop()
        with self._lock:
            self._all.add(f)

        def start() -> None:
            if f.stopped or self._closed:
                f.done.set()
                self._ended(f)
                return
            f._task = loop.create_task(f.run())
            self._live.add(f)

        loop.call_soon_threadsafe(start)
        return f

    def _ended(self, f: Follow) -> None:
        self._live.discard(f)
        with self._lock:
            self._all.discard(f)
        if self.on_change is not None:
            self.on_change(f.pod)

    def changed(self, pods: set[str] | None = None) -> None:
        """The watch cache changed for ``pods`` (None: any): their followers look again."""
        if self._loop is None:
            return

        def wake() -> None:
            for f in list(self._live):
                if f._changed is not None and (pods is None or f.pod in pods):
                    f._changed.set()

        self._call(wake)

    def threads(self) -> int:
        """OS threads the followers use: 1 once started, else 0."""
        return 1 if self._thread is not None and self._thread.is_alive() else 0

    def shutdown(self) -> None:
        """Stop every follower (abandoned: see :meth:`Follow.stop`) and the loop. Once this
        returns, nothing more is written."""
        with self._lock:
            self._closed = True
            loop = self._loop
            follows = list(self._all)
        for f in follows:
            f.stop(abandon=True)
        if loop is None:
            return

        async def close() -> None:
            tasks = [f._task for f in list(self._live) if f._task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.reader.aclose()
            loop.stop()

        def closing() -> None:
            loop.create_task(close())

        self._call(closing)
