"""Quieter logs and a record without secrets (issue 10, item 10): RLark's lifecycle lines
(``RLARK_EVENT {...}``) are hidden from ``rlark logs``, the API's logs and the console's Logs tab
unless asked for; the Run's event token appears nowhere a user reads (logs, run record); the
console merges all Workers' lines in time order, naming each Worker, and marks error lines.

The server ``rlark server`` builds (tests/server.py AppServer, its controller running; the
machine held, so the Jobs wait Pending and start no Worker) and the real CLI. The Workers'
logs are files written where the local runtime writes them, given to the Workers of a Run the
controller queued (live, as the console's follow link needs) or ended (Stopped, for a follow
that ends by itself).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from rlark.record.build import build_record
from rlark.store import JobRow, ProjectRow, RunRow
from tests.test_api import job_yaml, set_worker_logs
from tests.test_cli import LiveServer, serve_held

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOKEN = "5e1f0c0ffee0ddba11"  # a Run's event token, as the controller makes them


def event(ts: float, name: str, **data) -> str:
    return "RLARK_EVENT " + json.dumps({"ts": ts, "event": name, **data, "tok": TOKEN})


HEAD = [event(1700000000.0, "phase", phase="Preparing"),
        "2023-11-14 22:13:21,000\tINFO head: loading",
        event(1700000002.0, "facts", hostname="h", ray="2.60.0"),
        "ERROR head: the batch does not fit",
        "ValueError: bad batch size",
        event(1700000004.0, "exit", code=1)]
POOL = [event(1700000000.5, "phase", phase="Preparing"),
        "pool: waiting for the head",
        event(1700000003.0, "phase", phase="Joined"),
        "pool: joined"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The module's server (tests/test_cli.py's :func:`~tests.test_cli.serve_held`), the CLI
    pointed at its default project."""
    # stamps without a zone are this machine's local time: make that UTC, so the expected
    # times below hold anywhere (the server serves in this process)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TZ", "UTC")
        time.tzset()
        for app in serve_held(tmp_path_factory, "logs-server"):
            yield LiveServer(app, "default")
    time.tzset()


def stop(server: LiveServer, name: str) -> None:
    """Have the controller end Job ``name``'s Run, Stopped (it never started: the machine is
    held), as ``rlark stop`` asks it to."""
    assert server.cli("stop", name).returncode == 0
    server.stopped(name)


def submitted(server: LiveServer, name: str, where: Path) -> None:
    """Job ``name`` submitted with ``rlark submit``, its Run queued by the controller."""
    (where / f"{name}.yaml").write_text(job_yaml(name))
    assert server.cli("submit", str(where / f"{name}.yaml")).returncode == 0
    server.waiting(name)


@pytest.fixture(scope="module")
def logged(server, tmp_path_factory):
    """A Job whose head and first pool Worker wrote lifecycle and user lines; its Run is live
    (waiting for capacity)."""
    submitted(server, "noisy", tmp_path_factory.mktemp("noisy"))
    set_worker_logs(server.store, "noisy", {"noisy-head-0": HEAD, "noisy-pool-0": POOL})
    return server


def http(server):
    import httpx

    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                        timeout=60)


def test_cli_logs_hide_lifecycle_lines_unless_asked(logged):
    out = logged.cli("logs", "noisy", "--worker", "noisy-head-0").stdout.splitlines()
    assert out == [HEAD[1], HEAD[3], HEAD[4]]
    # --tail counts the lines shown
    assert logged.cli("logs", "noisy", "--rank", "0", "--tail", "2").stdout.splitlines() == HEAD[3:5]
    shown = logged.cli("logs", "noisy", "--rank", "0", "--lifecycle").stdout
    assert shown.count("RLARK_EVENT ") == 3
    assert TOKEN not in shown and '"tok"' not in shown
    assert json.loads(shown.splitlines()[0][len("RLARK_EVENT "):]) == {
        "ts": 1700000000.0, "event": "phase", "phase": "Preparing"}


def test_api_logs_hide_lifecycle_lines_and_never_show_the_token(logged):
    c = http(logged)
    quiet = c.get("/api/v1/jobs/noisy/logs").json()
    lines = {w["name"]: w["lines"] for w in quiet["workers"]}
    assert lines["noisy-head-0"] == [HEAD[1], HEAD[3], HEAD[4]]
    assert lines["noisy-pool-0"] == [POOL[1], POOL[3]]
    loud = c.get("/api/v1/jobs/noisy/logs", params={"lifecycle": "true", "rank": 0}).json()
    assert len(loud["workers"][0]["lines"]) == len(HEAD)
    assert TOKEN not in json.dumps(loud)
    one = c.get("/api/v1/jobs/noisy/logs", params={"tail": 1, "rank": 1}).json()
    assert one["workers"][0]["lines"] == ["pool: joined"]


@pytest.mark.timeout(120)
def test_followed_logs_hide_lifecycle_lines_too(server, tmp_path):
    """A Run the controller stopped, no Worker left: following ends by itself."""
    submitted(server, "followed", tmp_path)
    stop(server, "followed")
    set_worker_logs(server.store, "followed", {"followed-pool-0": POOL})
    proc = server.cli("logs", "followed", "-f", "--rank", "1", timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [POOL[1], POOL[3]]
    loud = server.cli("logs", "followed", "-f", "--rank", "1", "--lifecycle", timeout=60)
    assert len(loud.stdout.splitlines()) == len(POOL) and TOKEN not in loud.stdout


def run_of(s, name: str) -> RunRow:
    """The current Run of Job ``name`` of the default project, in session ``s``."""
    job = s.scalar(select(JobRow).join(ProjectRow).where(JobRow.name == name,
                                                        ProjectRow.name == "default"))
    return s.get(RunRow, job.current_run_id)


def test_the_event_token_is_in_no_record(server, tmp_path):
    """Facts and a record with the token in them are what earlier servers stored (today's
    controller keeps the token out of both: controller/lifecycle.py, record.build): written
    into the rows here, a waiting Run's Workers' facts, then the ended Run's stored record."""
    submitted(server, "tokened", tmp_path)
    with server.store.session() as s:
        for w in run_of(s, "tokened").workers:  # facts as controllers stored them, token and all
            w.facts = {"hostname": "h", "ray": "2.60.0", "tok": TOKEN}
    live = server.cli("record", "tokened", "-o", "json")
    assert live.returncode == 0 and TOKEN not in live.stdout
    assert json.loads(live.stdout)["workers"]["items"][0]["facts"] == {"hostname": "h", "ray": "2.60.0"}
    # a record stored when the Run ended (before the token was left out) is cleaned on reading
    stop(server, "tokened")
    with server.store.session() as s:
        run = run_of(s, "tokened")
        assert run.record is not None  # the controller stored it as the Run ended
        record = copy.deepcopy(run.record)
        assert record["workers"]["items"][0]["facts"] == {"hostname": "h", "ray": "2.60.0"}
        record["workers"]["items"][0]["facts"]["tok"] = TOKEN
        run.record = record
    for fmt in ("json", "yaml", "text"):
        assert TOKEN not in server.cli("record", "tokened", "-o", fmt).stdout, fmt
    page = http(server).get("/jobs/tokened?tab=record")
    assert page.status_code == 200 and TOKEN not in page.text
    assert TOKEN not in http(server).get("/jobs/tokened/record.json").text


def test_build_record_leaves_the_token_out():
    worker = SimpleNamespace(name="w", role="head", node_rank=0, is_head=True, host=None, ip=None,
                             node_ip=None, ray_node_id=None, lifecycle={}, phase="Succeeded",
                             reason=None, exit_code=0, started_at=None, finished_at=None,
                             log_path=None, facts={"python": "3.11", "tok": TOKEN})
    run = SimpleNamespace(spec={}, started_at=None, finished_at=None, number=1, uid="u",
                          cause="Submitted", runtime="local", phase="Succeeded", reason="",
                          message="", exit_code=0, created_at=datetime.now(timezone.utc),
                          running_at=None)
    rec = build_record(SimpleNamespace(name="j"), run, [worker])
    assert TOKEN not in json.dumps(rec) and rec["versions"]["python"] == ["3.11"]


# --- the console's Logs tab ------------------------------------------------------------------------


def lines_of(page: str) -> list[tuple[str, str, str]]:
    """(classes, worker, text) of each log line on the Logs tab."""
    found = re.findall(r'<span class="(ln[^"]*)" data-worker="([^"]+)"[^>]*>(.*?)\n</span>', page, re.S)
    return [(cls, w, re.sub(r"<[^>]+>", "", text).replace("&#x27;", "'")) for cls, w, text in found]


def test_console_logs_hide_lifecycle_lines_merge_by_time_and_mark_errors(logged):
    c = http(logged)
    page = c.get("/jobs/noisy?tab=logs").text
    shown = lines_of(page)
    assert [t for _, _, t in shown] == [f"[noisy-head-0] {x}" for x in (HEAD[1], HEAD[3], HEAD[4])] + [
        f"[noisy-pool-0] {x}" for x in (POOL[1], POOL[3])]
    assert TOKEN not in page and "RLARK_EVENT" not in page.split('id="log-lines"')[1]
    errors = [t for cls, _, t in shown if "ln-err" in cls]
    assert errors == [f"[noisy-head-0] {HEAD[3]}", f"[noisy-head-0] {HEAD[4]}"]
    assert 'id="log-errors"' in page
    # merged by time, each line named by its Worker (the hidden lifecycle lines' times count)
    merged = [t for _, _, t in lines_of(c.get("/jobs/noisy?tab=logs&order=time").text)]
    assert merged == [f"[noisy-pool-0] {POOL[1]}", f"[noisy-head-0] {HEAD[1]}",
                      f"[noisy-head-0] {HEAD[3]}", f"[noisy-head-0] {HEAD[4]}",
                      f"[noisy-pool-0] {POOL[3]}"]
    loud = c.get("/jobs/noisy?tab=logs&lifecycle=1").text
    assert sum(1 for cls, _, _ in lines_of(loud) if "ln-event" in cls) == 5
    assert TOKEN not in loud
    assert "lifecycle=true" in re.search(r'data-url="([^"]+)"', loud).group(1)
    assert "lifecycle" not in re.search(r'data-url="([^"]+)"', page).group(1)


@pytest.mark.parametrize("line, error", [
    ("Traceback (most recent call last):", True), ("ValueError: bad batch size", True),
    ("  torch.OutOfMemoryError: CUDA out of memory", True), ("2026-01-02 03:04:05 ERROR x", True),
    ("FATAL: cannot connect", True), ("+ exit 3: the command exited with code 3", True),
    ("loss=0.25 errors=0", False), ("exited with code 0", False), ("no error here", False),
    ("INFO ErrorHandler installed", False)])
def test_error_lines(line, error):
    from rlark.console.logview import is_error

    assert is_error(line) is error


def test_csv_times_are_all_in_one_form_with_a_zone(logged):
    c = http(logged)
    for query in ("", "?lifecycle=1", "?order=time"):
        rows = list(csv.reader(io.StringIO(c.get("/jobs/noisy/logs.csv" + query).text)))
        assert rows[0] == ["worker", "role", "time", "line"]
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", r[2]) for r in rows[1:]
                   if r[2]), rows
        assert TOKEN not in "".join(",".join(r) for r in rows)
    rows = list(csv.reader(io.StringIO(c.get("/jobs/noisy/logs.csv?lifecycle=1").text)))
    head = [r for r in rows[1:] if r[0] == "noisy-head-0"]
    assert head[0][2] == "2023-11-14T22:13:20.000+00:00"  # the lifecycle line's own ts
    text = c.get("/jobs/noisy/logs.txt").text
    assert "RLARK_EVENT" not in text and text.splitlines()[0] == f"[noisy-head-0] {HEAD[1]}"


# --- the end of a log around a huge line (issue 19 item 9) -------------------------------------------


def test_lines_backward_match_the_lines_forward_for_any_content(tmp_path):
    """Differential: every line, cut at ``max_line`` as reading forward cuts it, whatever the
    chunk size and wherever lines and chunk borders fall (small sizes, many random files)."""
    import random

    from rlark.loglines import cut_line
    from rlark.services.logs import lines_backward

    rng = random.Random(19)
    for case in range(300):
        parts = [bytes(rng.choice(b"ab\n") for _ in range(rng.randint(0, 40)))
                 for _ in range(rng.randint(0, 6))]
        data = b"".join(parts)
        path = tmp_path / f"f{case}"
        path.write_bytes(data)
        max_line, chunk = rng.randint(1, 12), rng.randint(1, 9)
        with open(path, "rb") as f:
            got = [line for line, _ in lines_backward(f, len(data), chunk=chunk, max_line=max_line)]
        text = data[:-1] if data.endswith(b"\n") else data
        want = [cut_line(line, max_line) for line in text.split(b"\n")] if data else []
        assert list(reversed(got)) == want, (data, max_line, chunk)


def test_the_end_of_a_log_keeps_the_lines_before_a_huge_one_with_bounded_memory(tmp_path):
    import tracemalloc

    from rlark.loglines import CUT_MARK, MAX_LINE_BYTES
    from rlark.services.logs import is_user_line, tail_lines

    log = tmp_path / "w.log"
    with open(log, "wb") as f:
        f.write(b"before the long line\n")
        for _ in range(40):  # 40 MiB in one line, without a newline: the Worker's last 16 MiB
            f.write(b"x" * (1 << 20))
        f.write(b"\nRLARK_EVENT {\"event\": \"exit\", \"code\": 0}\n")
    tracemalloc.start()
    lines, size = tail_lines(str(log), None, is_user_line)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert size == log.stat().st_size
    assert lines[0] == "before the long line"  # no "left out" mark: everything is answered
    assert len(lines) == 2 and lines[1].endswith(CUT_MARK.decode())
    assert len(lines[1]) == MAX_LINE_BYTES + len(CUT_MARK)
    assert peak < 6 * MAX_LINE_BYTES, peak  # a chunk, the kept part of one line, the answer
    last, _ = tail_lines(str(log), 1, is_user_line)
    assert last == [lines[1]]
