"""Limits that hold (issue 13, item 7), each tested with the attacking input and the safe outcome:

* a Worker line of 100 MiB without a newline: every reader of Worker output (the lifecycle-line
  reader, the last lines of a log, a followed log, the Kubernetes log follower) keeps bounded
  memory, cuts the line at 1 MiB with a mark, and reads on;
* log follows: a bounded number per server and per user (429 beyond), no thread of their own
  per Worker or per request, and a client that never reads is dropped with nothing left behind;
* per-project quotas of Jobs and active Workers: a 403 ``QuotaExceeded`` naming the quota, the
  use and how to raise it, nothing stored, the refusal audited.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import httpx
import pytest
from sqlalchemy import select

from rlark.server import create_app
from rlark.bootstrap.lifecycle import EVENT_PREFIX
from rlark.controller.lifecycle import read_new_events
from rlark.loglines import CUT_MARK, MAX_LINE_BYTES, LineSplitter
from rlark.runtimes.kubernetes.logcursor import LogCursor
from rlark.services.jobs import JobService
from rlark.services.logs import follow_lines, tail_lines
from rlark.store import AuditRow, JobRow
from tests.access import admin_token, api_client, make_user
from tests.server import AppServer, ThreadedServer
from tests.test_api import create, rejected, set_run_state, set_worker_logs

MiB = 1024 * 1024
HUGE = 100 * MiB  # the attack: one line of 100 MiB without a newline
CHUNK = 64 * 1024


def write_huge(f, size: int = HUGE, byte: bytes = b"x") -> None:
    block = byte * MiB
    for _ in range(size // MiB):
        f.write(block)


def event_line(kind: str, token: str, **fields) -> bytes:
    return (EVENT_PREFIX + json.dumps({"event": kind, "tok": token, **fields}) + "\n").encode()


def peak_of(fn):
    """``fn()`` and the peak of memory Python allocated meanwhile (bytes)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- one line of 100 MiB ------------------------------------------------------------------------------


def test_a_100_mib_line_is_cut_at_1_mib_and_the_next_line_comes_whole():
    split = LineSplitter()
    held, out = 0, []
    block = b"y" * CHUNK
    for _ in range(HUGE // CHUNK):
        out += split.feed(block)
        held = max(held, split.pending)
    out += split.feed(b"tail of it\nnext line\npartial")
    assert held <= MAX_LINE_BYTES
    assert [len(x) for x in out] == [MAX_LINE_BYTES + len(CUT_MARK), len(b"next line")]
    assert out[0].endswith(CUT_MARK) and out[1] == b"next line" and split.cut == 1
    assert split.flush() == b"partial"


def test_the_lifecycle_reader_skips_a_100_mib_line_with_bounded_memory(tmp_path):
    """A run script prints 100 MiB without a newline, with a line that looks like a lifecycle
    line (even with the right token) inside it at the reader's chunk boundary: the reader keeps
    at most one chunk, never takes that piece for a line, and finds the real lines around it."""
    token = "t0k"
    path = tmp_path / "w.log"
    chunk = 2 * MiB
    with open(path, "wb") as f:
        f.write(event_line("phase", token, phase="ray_started"))
        start = f.tell()
        f.write(b"z" * (chunk - start))  # a 2 MiB line: the reader skips to the chunk's end ...
        f.write(event_line("failed", token, reason="Forged"))  # ... where this tail of it starts
        write_huge(f)
        f.write(b"\n")
        f.write(event_line("exit", token, code=0))
    size = path.stat().st_size

    def read_pass_by_pass():
        events, offset, passes = [], 0, 0
        while offset < size:
            got, offset = read_new_events(str(path), offset, token, max_bytes=chunk)
            events += got
            passes += 1
            assert passes < 200, offset
        return events

    events, peak = peak_of(read_pass_by_pass)
    assert [e["event"] for e in events] == ["phase", "exit"]
    assert peak < 4 * chunk + MiB, peak
    whole, peak = peak_of(lambda: read_new_events(str(path), 0, token, max_bytes=chunk, to_end=True))
    assert [e["event"] for e in whole[0]] == ["phase", "exit"] and whole[1] == size
    assert peak < 4 * chunk + MiB


def test_the_last_lines_of_a_log_that_ends_in_a_100_mib_line(tmp_path):
    path = tmp_path / "w.log"
    with open(path, "wb") as f:
        f.write(b"before 1\nbefore 2\n")
        write_huge(f)
    (lines, size), peak = peak_of(lambda: tail_lines(str(path), 10))
    assert size == HUGE + 18
    assert lines and all(len(line.encode()) <= MAX_LINE_BYTES + len(CUT_MARK) for line in lines)
    assert lines[-1].endswith(CUT_MARK.decode())
    assert peak < 80 * MiB, peak  # the 16 MiB window and its copies, not the 100 MiB line
    (whole, _), peak = peak_of(lambda: tail_lines(str(path), None))
    assert all(len(line.encode()) <= MAX_LINE_BYTES + len(CUT_MARK) for line in whole)
    assert peak < 80 * MiB, peak


def test_a_followed_log_cuts_a_100_mib_line_and_goes_on(tmp_path):
    path = tmp_path / "w.log"
    with open(path, "wb") as f:
        f.write(b"first\n")
        write_huge(f)
        f.write(b"\nlast\n")
    lines, peak = peak_of(lambda: list(follow_lines(str(path), 0, lambda: False)))
    assert [len(x) for x in lines] == [5, MAX_LINE_BYTES + len(CUT_MARK), 4]
    assert lines[0] == "first" and lines[2] == "last"
    assert peak < 8 * MiB, peak


def test_the_kubernetes_log_follower_cuts_a_100_mib_line_once_also_after_a_reconnect():
    stamp = b"2026-01-20T00:42:08.123456789Z "

    def stream() -> list[bytes]:
        chunks = [stamp + b"one\n" + stamp]
        chunks += [b"q" * CHUNK] * (HUGE // CHUNK)
        chunks += [b"\n" + stamp.replace(b"08.1", b"09.1") + b"three\n"]
        return chunks

    cursor = LogCursor()
    cursor.resume(time.time())

    def feed_all():
        written, held = [], 0
        for chunk in stream():
            written.append(cursor.feed(chunk))
            held = max(held, len(cursor._partial))
        return b"".join(written), held

    (data, held), peak = peak_of(feed_all)
    lines = data.split(b"\n")[:-1]
    assert [len(x) for x in lines] == [3, MAX_LINE_BYTES + len(CUT_MARK), 5]
    assert lines[1].endswith(CUT_MARK) and lines[2] == b"three"
    assert held <= MAX_LINE_BYTES + 64 and peak < 8 * MiB, (held, peak)
    # the stream breaks and the API sends it again from an earlier second: nothing comes twice
    cursor.resume(time.time())
    again = b"".join(cursor.feed(c) for c in stream()) + cursor.flush()
    assert again == b""


def _stamped_logs(tmp_path, workers: int, size: int) -> list[dict]:
    """``workers`` Worker logs of ``size`` bytes each, as :meth:`JobService.worker_logs` names
    them: lines of 2 KiB stamped a few milliseconds apart, Worker ``w``'s ``i``-th line at
    ``4 i + w`` ms, so merged by time they alternate; Worker 1 also writes a line of 3 MiB."""
    from datetime import datetime, timedelta

    start = datetime(2026, 1, 2, 3, 4, 5)
    chosen = []
    for w in range(workers):
        path = tmp_path / f"w{w}.log"
        with open(path, "wb") as f:
            i = 0
            while f.tell() < size:
                stamp = (start + timedelta(milliseconds=4 * i + w)).strftime("%Y-%m-%d %H:%M:%S.%f")
                f.write(f"{stamp} w{w} line {i} ".encode() + b"." * 2000 + b"\n")
                if w == 1 and i == 1000:
                    f.write(b"3 MiB without a break " + b"z" * (3 * MiB) + b"\n")
                i += 1
        chosen.append({"name": f"job-w-{w}", "role": "w", "log": str(path), "mask": None,
                       "lines": i})
    return chosen


def test_a_log_download_ordered_by_time_streams_every_line_with_bounded_memory(tmp_path,
                                                                                monkeypatch):
    """Four Workers' logs of 20 MiB each (more than the 16 MiB a log answered in one piece
    holds): the download merged by time has every line of each, in time order, the long line
    cut with its mark, and takes a few MiB, not the logs' size."""
    from rlark.console import logview

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    workers = _stamped_logs(tmp_path, 4, 20 * MiB)

    def download() -> dict:
        seen = {"lines": 0, "cut": 0, "first": set(), "out_of_order": 0, "pieces": 0}
        last = ""
        for piece in logview.stream(workers, None, "txt", order="time"):
            seen["pieces"] += 1
            for line in piece.splitlines():
                seen["lines"] += 1
                worker, text = line.split(" ", 1)
                if text.endswith(CUT_MARK.decode()):
                    seen["cut"] += 1
                    continue
                stamp = text[:26]
                seen["out_of_order"] += stamp < last
                last = stamp
                if text.endswith(" line 0 " + "." * 2000):
                    seen["first"].add(worker)
        return seen

    seen, peak = peak_of(download)
    print(f"\n4 x 20 MiB merged by time: {seen['lines']} lines in {seen['pieces']} pieces, "
          f"peak {peak / MiB:.1f} MiB")
    assert seen["lines"] == sum(w["lines"] for w in workers) + 1
    assert seen["first"] == {f"[job-w-{w}]" for w in range(4)}  # the first lines are there
    assert seen["out_of_order"] == 0 and seen["cut"] == 1
    assert peak < 8 * MiB, peak


def test_an_answer_that_leaves_the_start_of_a_log_out_says_so(store):
    """A log answered in one piece is its last 16 MiB: the first line says what was left out,
    and so does a tail that found fewer lines than asked in those 16 MiB (here: lines hidden
    behind 17 MiB of lifecycle-looking lines)."""
    with api_client(create_app(JobService(store)), admin_token(store)) as client:
        create(client, "demo")
        paths = set_worker_logs(store, "demo", {"demo-head-0": ["the first line"],
                                                "demo-pool-0": ["before"]})
        with open(paths["demo-head-0"], "ab") as f:
            f.write((b"y" * 1023 + b"\n") * (17 * 1024))  # 17 MiB of lines
            f.write(b"the last line\n")
        with open(paths["demo-pool-0"], "ab") as f:
            line = event_line("phase", "t0k", phase="noise", pad="p" * 1000)
            for _ in range(17 * MiB // len(line)):
                f.write(line)
            f.write(b"after\n")
        r = client.get("/api/v1/jobs/demo/logs", params={"worker": "demo-head-0"})
        head = r.json()["workers"][0]
        assert head["truncated"] is True and head["lines"][-1] == "the last line"
        assert "the first line" not in head["lines"]
        mark = head["lines"][0]
        assert mark.startswith("[RLark: the first ") and "last 16 MiB" in mark, mark[:200]
        assert "download" in mark
        r = client.get("/api/v1/jobs/demo/logs", params={"worker": "demo-pool-0", "tail": 5})
        lines = r.json()["workers"][0]["lines"]
        assert lines[0].startswith("[RLark: the first ") and lines[1:] == ["after"], lines[0][:200]
        # a tail found whole says nothing
        r = client.get("/api/v1/jobs/demo/logs", params={"worker": "demo-head-0", "tail": 2})
        assert r.json()["workers"][0]["lines"] == ["y" * 1023, "the last line"]


def test_the_api_follow_of_a_100_mib_line(store):
    with api_client(create_app(JobService(store)), admin_token(store)) as client:
        create(client, "demo")
    paths = set_worker_logs(store, "demo", {"demo-head-0": ["start"]})
    set_run_state(store, "demo", "Running")
    with Follows(store) as f:
        stream = f.open({"worker": "demo-head-0"})
        stream.until(lambda ev: ev[0] == "line" and json.loads(ev[1])["line"] == "start")
        with open(paths["demo-head-0"], "ab") as out:
            write_huge(out)
            out.write(b"\nafter\n")
        cut = stream.until(lambda ev: ev[0] == "line")
        after = stream.until(lambda ev: ev[0] == "line")
    line = json.loads(cut[1])["line"]
    assert len(line.encode()) == MAX_LINE_BYTES + len(CUT_MARK) and line.endswith(CUT_MARK.decode())
    assert json.loads(after[1])["line"] == "after"


# --- log follows ---------------------------------------------------------------------------------------


class Follows:
    """One real HTTP server (uvicorn in a thread) and the follow streams a test opens on it."""

    def __init__(self, store):
        self.store = store
        self.server = ThreadedServer(JobService(store))
        self.streams: list = []

    def __enter__(self):
        self.server.start()
        return self

    def open(self, params: dict, token: str | None = None, path: str = "/api/v1/jobs/demo/logs"):
        return Stream(self.server.url, token or self.server.token, path, {"follow": "true", **params},
                      self.streams)

    def health(self) -> dict:
        return httpx.get(self.server.url + "/api/v1/server", timeout=10,
                         headers={"Authorization": f"Bearer {self.server.token}"}).json()

    def __exit__(self, *exc):
        for s in self.streams:
            s.close()
        self.server.stop()


class Stream:
    def __init__(self, url, token, path, params, registry):
        self.http = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"})
        self._cm = self.http.stream("GET", path, params=params)
        self.response = self._cm.__enter__()
        self._lines = self.response.iter_lines()
        registry.append(self)

    def until(self, pred):
        event, data = "message", []
        for line in self._lines:
            if line == "":
                if data and pred((event, "\n".join(data))):
                    return event, "\n".join(data)
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        raise AssertionError("the stream ended first")

    def close(self):
        try:
            self._cm.__exit__(None, None, None)
        finally:
            self.http.close()


def wait_until(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return value


def own_threads() -> set[str]:
    """Threads of this process other than the shared thread pool's (anyio's workers, bounded
    by its limiter for the whole server)."""
    return {f"{t.name}#{t.ident}" for t in threading.enumerate() if t.name != "AnyIO worker thread"}


def job_with_logs(store, lines: int = 3) -> dict:
    with api_client(create_app(JobService(store)), admin_token(store)) as client:
        create(client, "demo")
    paths = set_worker_logs(store, "demo", {f"demo-{r}": [f"{r} {i}" for i in range(lines)]
                                            for r in ("head-0", "pool-0", "pool-1")})
    set_run_state(store, "demo", "Running")
    return paths


def test_follows_beyond_the_servers_limit_are_refused_with_429(store, monkeypatch):
    monkeypatch.setenv("RLARK_MAX_LOG_FOLLOWS", "2")
    job_with_logs(store)
    with Follows(store) as f:
        for _ in range(2):
            f.open({}).until(lambda ev: ev[0] == "line")
        assert f.health()["logFollows"] == {"open": 2, "max": 2}
        r = httpx.get(f.server.url + "/api/v1/jobs/demo/logs", params={"follow": "true"},
                      headers={"Authorization": f"Bearer {f.server.token}"}, timeout=10)
        assert r.status_code == 429 and r.headers["retry-after"] == "5"
        detail = r.json()["detail"]
        assert detail["code"] == "TooManyRequests" and "RLARK_MAX_LOG_FOLLOWS=2" in detail["message"]
        f.streams.pop().close()  # one ends: its place is free again
        wait_until("a freed place", lambda: f.health()["logFollows"]["open"] == 1)
        f.open({}).until(lambda ev: ev[0] == "line")


def test_one_user_cannot_take_every_follow(store, monkeypatch):
    monkeypatch.setenv("RLARK_MAX_LOG_FOLLOWS_PER_USER", "1")
    job_with_logs(store)
    vera = make_user(store, "vera", role="viewer")
    with Follows(store) as f:
        f.open({}).until(lambda ev: ev[0] == "line")
        r = httpx.get(f.server.url + "/api/v1/jobs/demo/logs", params={"follow": "true"},
                      headers={"Authorization": f"Bearer {f.server.token}"}, timeout=10)
        assert r.status_code == 429
        assert "user 'admin' already follows 1 logs" in r.json()["detail"]["message"]
        f.open({}, token=vera).until(lambda ev: ev[0] == "line")  # another user still may


def test_follows_use_no_thread_of_their_own_per_worker_or_request(store):
    """Five follows of a Job of three Workers, all at once: the old design started a thread per
    Worker per request (fifteen, plus one per request); now no thread beyond the shared pool."""
    job_with_logs(store)
    with Follows(store) as f:
        f.health()
        before = own_threads()
        streams = [f.open({}) for _ in range(5)]
        for s in streams:
            s.until(lambda ev: ev[0] == "line" and json.loads(ev[1])["line"] == "pool-1 2")
        assert f.health()["logFollows"]["open"] == 5
        assert own_threads() - before == set()


def test_a_client_that_never_reads_is_dropped_and_leaves_nothing_behind(store, monkeypatch):
    """The attack: a follow request whose client never reads while the Worker writes fast. The
    server sends only as fast as the client takes (nothing piles up), drops the client once a
    send has waited RLARK_LOG_FOLLOW_SEND_TIMEOUT, frees its place, and no thread is left."""
    monkeypatch.setenv("RLARK_LOG_FOLLOW_SEND_TIMEOUT", "1")
    paths = job_with_logs(store)
    with Follows(store) as f:
        f.health()
        before = own_threads()  # anyio's shared pool aside: it is bounded for the whole server
        sock = socket.create_connection(("127.0.0.1", f.server.port))
        sock.sendall(f"GET /api/v1/jobs/demo/logs?follow=true&worker=demo-head-0 HTTP/1.1\r\n"
                     f"Host: 127.0.0.1:{f.server.port}\r\nAuthorization: Bearer {f.server.token}\r\n"
                     "\r\n".encode())
        wait_until("the follow open", lambda: f.health()["logFollows"]["open"] == 1)
        stop = threading.Event()

        def worker_writes():  # far more than any socket buffers hold
            line = ("w" * 1000 + "\n").encode()
            with open(paths["demo-head-0"], "ab") as out:
                while not stop.is_set():
                    out.write(line * 1000)
                    out.flush()
                    time.sleep(0.01)

        writer = threading.Thread(target=worker_writes, daemon=True)
        writer.start()
        try:
            wait_until("the slow client dropped", lambda: f.health()["logFollows"]["open"] == 0,
                       timeout=60)
        finally:
            stop.set()
            writer.join()
        sock.settimeout(10)
        received = 0
        while chunk := sock.recv(1 << 20):  # what the kernel still held, then the close
            received += len(chunk)
        sock.close()
        size = paths["demo-head-0"].stat().st_size
        assert received < size // 2, (received, size)  # it got far less than was written
        wait_until("no thread left beyond those there before the follow",
                   lambda: not (own_threads() - before), timeout=40)


def test_the_cli_says_when_the_server_ended_its_stream(store, monkeypatch):
    """``rlark logs -f`` whose reader stalled (a paused terminal) and was dropped: a message
    saying so and how to carry on, not a traceback."""
    from rlark.cli.client import Client, ClientError

    monkeypatch.setenv("RLARK_LOG_FOLLOW_SEND_TIMEOUT", "1")
    paths = job_with_logs(store)
    with Follows(store) as f:
        events = Client(f.server.url, token=f.server.token).stream_events(
            "/api/v1/jobs/demo/logs", follow="true", worker="demo-head-0")
        assert next(events)[0] == "workers"
        with open(paths["demo-head-0"], "ab") as out:  # the client reads nothing meanwhile
            line = ("w" * 1000 + "\n").encode() * 1000
            while f.health()["logFollows"]["open"]:
                out.write(line)
                out.flush()
        with pytest.raises(ClientError, match="ended the stream.*run the command again"):
            for _ in events:
                pass


def test_a_client_that_goes_away_frees_its_place(store):
    job_with_logs(store)
    with Follows(store) as f:
        s = f.open({})
        s.until(lambda ev: ev[0] == "line")
        assert f.health()["logFollows"]["open"] == 1
        s.close()
        f.streams.remove(s)
        wait_until("the place freed", lambda: f.health()["logFollows"]["open"] == 0)


# --- quotas --------------------------------------------------------------------------------------------


def small_job(name: str, workers: int) -> str:
    """A Job of ``workers`` Workers: the head, and a pool of the others."""
    from tests.test_local_runtime import job_yaml

    return job_yaml(name, pool_workers=workers - 1)


def refused(client, store, method: str, url: str, **kw) -> dict:
    """A request refused for a quota: 403 ``QuotaExceeded`` in the JSON error shape, and nothing
    in the store changed but the audit entry of the refusal. Returns the ``detail``."""
    from tests.test_api import snapshot

    before = snapshot(store)
    r = client.request(method, url, **kw)
    assert r.status_code == 403, r.text[:2000]
    detail = r.json()["detail"]
    assert detail["code"] == "QuotaExceeded" and detail["message"], detail
    after = snapshot(store)
    assert {k: v for k, v in after.items() if k != "audit"} == \
        {k: v for k, v in before.items() if k != "audit"}, "a refused request changed the store"
    assert len(after["audit"]) == len(before["audit"]) + 1
    return detail


def denied_audit(store, action: str) -> list[AuditRow]:
    with store.session() as s:
        return [a for a in s.scalars(select(AuditRow).where(AuditRow.action == action,
                                                            AuditRow.outcome == "denied"))]


@pytest.fixture
def quota_client(store, monkeypatch):
    monkeypatch.setenv("RLARK_MAX_JOBS_PER_PROJECT", "2")
    monkeypatch.setenv("RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT", "5")
    with api_client(create_app(JobService(store)), admin_token(store)) as c:
        yield c


def submit(client, name: str, workers: int = 3):
    return client.post("/api/v1/jobs", content=small_job(name, workers),
                       headers={"Content-Type": "application/yaml"})


def test_a_project_at_its_job_quota_refuses_another_job(quota_client, store):
    assert submit(quota_client, "one", 1).status_code == 201
    assert submit(quota_client, "two", 1).status_code == 201
    before = len(denied_audit(store, "job.create"))
    r = submit(quota_client, "three", 1)
    assert r.status_code == 403
    detail = r.json()["detail"]
    assert detail["code"] == "QuotaExceeded"
    assert detail["quota"] == {"project": "default", "name": "maxJobs", "limit": 2, "used": 2,
                               "requested": 1}
    assert "rlark project set-quota default --max-jobs" in detail["message"]
    with store.session() as s:
        assert sorted(s.scalars(select(JobRow.name))) == ["one", "two"]
    (entry,) = denied_audit(store, "job.create")[before:]
    assert entry.actor == "admin" and entry.target == "three" and "maxJobs" in entry.detail


def test_active_workers_quota_refuses_runs_until_workers_end(quota_client, store):
    quota_client.put("/api/v1/projects/default/quotas", json={"maxJobs": 3})
    assert submit(quota_client, "big", 3).status_code == 201
    detail = refused(quota_client, store, "POST", "/api/v1/jobs", content=small_job("more", 3),
                     headers={"Content-Type": "application/yaml"})
    assert detail["quota"] == {"project": "default", "name": "maxActiveWorkers", "limit": 5,
                               "used": 3, "requested": 3}
    assert "rlark stop NAME" in detail["message"]
    assert "--max-active-workers" in detail["message"]
    # a restart of the Job itself fits: its own Run is stopped before the new one starts
    assert quota_client.post("/api/v1/jobs/big/restart").status_code == 200
    set_run_state(store, "big", "Stopped", number=1)
    assert submit(quota_client, "fits", 2).status_code == 201  # 3 + 2 = 5
    set_run_state(store, "fits", "Stopped")
    assert submit(quota_client, "other", 2).status_code == 201  # 3 + 2 = 5 again
    # the stopped Job started again while the others hold the room: refused, audited
    detail = refused(quota_client, store, "POST", "/api/v1/jobs/fits/start")
    assert detail["quota"]["used"] == 5 and detail["quota"]["requested"] == 2
    (entry,) = denied_audit(store, "job.start")
    assert entry.target == "fits" and "maxActiveWorkers" in entry.detail
    set_run_state(store, "other", "Stopped")
    assert quota_client.post("/api/v1/jobs/fits/start").status_code == 200


def test_apply_of_a_bigger_spec_past_the_quota_changes_nothing(quota_client, store):
    assert submit(quota_client, "grow", 3).status_code == 201
    detail = refused(quota_client, store, "PUT", "/api/v1/jobs/grow", content=small_job("grow", 6),
                     headers={"Content-Type": "application/yaml"})
    assert detail["quota"]["requested"] == 6 and detail["quota"]["used"] == 0
    assert denied_audit(store, "job.replace")


def test_a_site_admin_sets_a_projects_own_quotas(quota_client, store):
    assert submit(quota_client, "big", 3).status_code == 201
    r = quota_client.put("/api/v1/projects/default/quotas", json={"maxActiveWorkers": 6})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["quotas"] == {"maxJobs": 2, "maxActiveWorkers": 6}
    assert body["quotasSet"] == {"maxActiveWorkers": 6}
    assert body["usage"] == {"jobs": 1, "activeWorkers": 3}
    assert submit(quota_client, "more", 3).status_code == 201
    with store.session() as s:
        (entry,) = s.scalars(select(AuditRow).where(AuditRow.action == "project.quota"))
        assert entry.actor == "admin" and entry.detail == "maxActiveWorkers=6"
    back = quota_client.put("/api/v1/projects/default/quotas", json={"maxActiveWorkers": None})
    assert back.json()["quotas"]["maxActiveWorkers"] == 5 and back.json()["quotasSet"] == {}
    for bad in ({"maxJobs": 0}, {"maxJobs": "ten"}, {"maxWorkers": 3}, {"maxJobs": 10**7}):
        detail = rejected(quota_client, store, "PUT", "/api/v1/projects/default/quotas", status=422,
                          json=bad)
        assert detail["code"] == "Invalid"
    mia = make_user(store, "mia", role="admin")  # a project admin, not a site administrator
    r = quota_client.put("/api/v1/projects/default/quotas", json={"maxJobs": 100},
                         headers={"Authorization": f"Bearer {mia}"})
    assert r.status_code == 403 and r.json()["detail"]["code"] == "Forbidden"


def test_the_console_says_why_a_job_is_refused(quota_client, store):
    from tests.test_console import post_wizard, wizard_form

    submit(quota_client, "one", 1)
    submit(quota_client, "two", 1)
    r = post_wizard(quota_client, wizard_form(step="4", name="three"), "submit")  # create, clone
    assert r.status_code == 200 and "maxJobs = 2" in r.text and "set-quota" in r.text
    with store.session() as s:
        assert s.scalar(select(JobRow.id).where(JobRow.name == "three")) is None


def test_rlark_project_set_quota(store, db_url, rlark_home):
    """Against the server ``rlark server`` builds (its controller running; no Job, so nothing
    for it to start) on the test's store, SQLite and PostgreSQL."""
    srv = AppServer(rlark_home, database_url=db_url).start()
    try:
        env = {**os.environ, "RLARK_SERVER": srv.url}
        done = subprocess.run([sys.executable, "-m", "rlark.cli", "project", "set-quota", "default",
                               "--max-jobs", "7"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert "maxJobs 7" in done.stdout and "maxActiveWorkers 256 (server default)" in done.stdout
        got = subprocess.run([sys.executable, "-m", "rlark.cli", "project", "get", "default"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert "Jobs 0/7, active Workers 0/256 (own: maxJobs=7)" in got.stdout, got.stdout
        none = subprocess.run([sys.executable, "-m", "rlark.cli", "project", "set-quota", "default"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert none.returncode != 0 and "--max-jobs" in none.stderr
    finally:
        srv.stop()


def test_concurrent_creates_never_pass_a_quota_together(store, monkeypatch):
    """The attack: twenty creates at once in a project with room for one more Job. Each request
    counted the Jobs before inserting; on SQLite (no row locks) all of them saw the old count
    and got in. Now exactly one gets in and the others get 403 QuotaExceeded."""
    monkeypatch.setenv("RLARK_MAX_JOBS_PER_PROJECT", "3")
    server = ThreadedServer(JobService(store))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=60,
                          headers={"Authorization": f"Bearer {server.token}",
                                   "Content-Type": "application/yaml"}) as http:
            for name in ("one", "two"):
                assert http.post("/api/v1/jobs", content=small_job(name, 1)).status_code == 201
        go = threading.Barrier(20)
        codes: list[int] = []

        def create_one(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60, headers={
                    "Authorization": f"Bearer {server.token}", "Content-Type": "application/yaml"}) as c:
                go.wait()
                codes.append(c.post("/api/v1/jobs", content=small_job(f"burst-{i}", 1)).status_code)

        threads = [threading.Thread(target=create_one, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(codes) == [201] + [403] * 19, codes
        with store.session() as s:
            assert len(s.scalars(select(JobRow.name)).all()) == 3
    finally:
        server.stop()
