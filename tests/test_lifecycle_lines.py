"""Only the bootstrap's lifecycle lines count: the Run's event token, and reading to the end.
And the last lines of a failing Worker's log that go with its failure: bounded, without
lifecycle lines or ``ray start``'s progress output."""

from __future__ import annotations

import json

import pytest

from rlark.controller.lifecycle import (
    TAIL_MAX_BYTES,
    TAIL_MAX_LINES,
    check_event,
    parse_lifecycle,
    read_new_events,
    read_tail,
    tail_lines,
    with_tail,
)


def line(event: str, tok: str | None = None, **data) -> bytes:
    body = {"ts": 1.0, "event": event, **data}
    if tok:
        body["tok"] = tok
    return b"RLARK_EVENT " + json.dumps(body).encode() + b"\n"


def test_lines_without_the_runs_token_are_ignored():
    chunk = (line("running", "secret") + line("run_finished", exit_code=0)
             + line("run_finished", "old-run-token", exit_code=0) + line("exit", "secret", code=7))
    events, offset = parse_lifecycle(chunk, 0, token="secret")
    assert [e["event"] for e in events] == ["running", "exit"]
    assert offset == len(chunk)
    # without a token (a Run from before tokens existed) every well-formed line counts
    assert len(parse_lifecycle(chunk, 0)[0]) == 4


def test_read_to_end_finds_the_last_line_after_a_flood(tmp_path):
    log = tmp_path / "w.log"
    with open(log, "wb") as f:
        f.write(line("running", "t"))
        f.write((b"x" * 999 + b"\n") * 30_000)  # ~30 MB of run-script output
        f.write(line("run_finished", "t", exit_code=0))
    events, offset = read_new_events(str(log), 0, "t", max_bytes=1024 * 1024)
    assert [e["event"] for e in events] == ["running"]  # one pass reads one chunk
    events, offset = read_new_events(str(log), offset, "t", max_bytes=1024 * 1024, to_end=True)
    assert [e["event"] for e in events] == ["run_finished"]
    assert offset == log.stat().st_size


def test_missing_log_yields_nothing(tmp_path):
    assert read_new_events(str(tmp_path / "gone.log"), 0, "t", to_end=True) == ([], 0)


#: what `ray start --head` prints on its way up (Ray 2.60, seen on this machine)
RAY_START = b"""2026-11-30 21:43:00,693\tINFO usage_lib.py:448 -- Usage stats collection is disabled.
2026-11-30 21:43:00,694\tINFO scripts.py:1043 -- \x1b[37mLocal node IP\x1b[39m: \x1b[1m127.0.0.9\x1b[22m
2026-11-30 21:43:00,695\tWARNING authentication_token_setup.py:73 -- Token authentication is disabled for this Ray cluster.
2026-11-30 21:43:13,746\tSUCC scripts.py:1084 -- \x1b[32m--------------------\x1b[39m
2026-11-30 21:43:13,746\tSUCC scripts.py:1085 -- \x1b[32mRay runtime started.\x1b[39m
2026-11-30 21:43:13,748\tINFO scripts.py:1092 -- To add another node to this Ray cluster, run
2026-11-30 21:43:13,750\tINFO scripts.py:1266 -- This command will now block forever until terminated by a signal.
"""


def test_tail_keeps_what_explains_and_drops_lifecycle_and_ray_progress_lines():
    log = (line("phase", "t", phase="Preparing") + b"Collecting rlark-no-such-package\n\n"
           + b"\x1b[31mERROR: No matching distribution found for rlark-no-such-package\x1b[0m\n"
           + line("failed", "t", reason="PrepareFailed") + RAY_START
           + b"[2026-11-30 21:44:15,788 W 2 2] gcs_client.cc:210: Failed to get cluster ID\n"
           + b"2026-11-30 21:44:16,000\tERROR scripts.py:1 -- ray start failed\n"
           + b"Exception: The current node timed out during startup.")  # no newline: died mid-line
    assert tail_lines(log) == [
        "Collecting rlark-no-such-package",
        "ERROR: No matching distribution found for rlark-no-such-package",
        "[2026-11-30 21:44:15,788 W 2 2] gcs_client.cc:210: Failed to get cluster ID",
        "2026-11-30 21:44:16,000\tERROR scripts.py:1 -- ray start failed",
        "Exception: The current node timed out during startup.",
    ]


def test_tail_drops_rays_state_dumps_and_the_workloads_lookalike_lines():
    """Ray's components print their debug state (``[state-dump]``, dozens of lines) into what
    `ray start --block` shows: 20 of those made a failure's whole tail (issue 19 item 11)."""
    dump = b"".join(b"[2026-12-01 10:00:0%d,000 I 7 7] (raylet) node_manager.cc:1 [state-dump] "
                    b"NodeManager: counter %d\n" % (i % 10, i) for i in range(40))
    log = (b"Traceback (most recent call last):\n" + b"RuntimeError: the user's own error\n"
           + dump + b'(workload) RLARK_EVENT {"event": "run_finished", "exit_code": 0}\n')
    assert tail_lines(log) == ["Traceback (most recent call last):",
                               "RuntimeError: the user's own error"]


def test_tail_is_bounded_to_20_lines_and_4_kib():
    assert (TAIL_MAX_LINES, TAIL_MAX_BYTES) == (20, 4096)
    many = b"".join(b"line %d\n" % i for i in range(100))
    assert tail_lines(many) == [f"line {i}" for i in range(80, 100)]
    wide = b"".join(b"%03d " % i + b"x" * 996 + b"\n" for i in range(10))  # 1000 bytes each
    out = tail_lines(wide)
    assert [l[:3] for l in out] == ["006", "007", "008", "009"]
    assert sum(len(l.encode()) + 1 for l in out) <= TAIL_MAX_BYTES
    huge = tail_lines(b"start" + b"y" * 10_000 + b"end\n")
    assert len(huge) == 1 and huge[0].startswith("\u2026") and huge[0].endswith("yyyend")
    assert len(huge[0].encode()) <= TAIL_MAX_BYTES


def test_read_tail_reads_the_end_of_a_large_log(tmp_path):
    log = tmp_path / "w.log"
    log.write_bytes(b"old\n" * 100_000 + b"partial-" + b"z" * 70_000 + b"\n" + b"last words\n")
    assert read_tail(str(log)) == ["last words"]  # the cut line at the window's start is dropped
    assert read_tail(str(tmp_path / "gone.log")) == [] and read_tail(None) == []


def test_with_tail():
    assert with_tail("m", "w-0", []) == "m"
    assert with_tail("m", "w-0", ["a", "b"]) == "m\nlast lines of w-0:\na\nb"


def test_a_log_left_at_a_new_workers_path_is_set_aside_not_read(tmp_path):
    """A store made again on an old $RLARK_HOME gives a new Run the path of an old Run's log: its
    lines (an old "stopped", an old exit) must not become the new Worker's."""
    from rlark.controller.launch import set_aside_stale_log

    log = tmp_path / "job" / "1" / "job-head-0.log"
    log.parent.mkdir(parents=True)
    log.write_text('RLARK_EVENT {"ts": 1, "event": "exit", "code": 0}\n')
    set_aside_stale_log(str(log))
    assert not log.exists()
    (kept,) = log.parent.glob("job-head-0.log.stale-*")
    assert "exit" in kept.read_text()
    set_aside_stale_log(str(log))  # nothing there: nothing to do
    assert list(log.parent.iterdir()) == [kept]


@pytest.mark.parametrize("event, ok", [
    ({"event": "run_finished", "ts": 1.0, "exit_code": 137, "oom_kills": 1, "memory_limit": 1 << 30}, True),
    ({"event": "failed", "ts": 1.0, "reason": "PrepareFailed", "exit_code": 137, "oom_kills": 2}, True),
    # what a keeper counted is typed like the rest: a count of at least 1, a limit in bytes
    ({"event": "run_finished", "ts": 1.0, "exit_code": 137, "oom_kills": 0}, False),
    ({"event": "run_finished", "ts": 1.0, "exit_code": 137, "oom_kills": True}, False),
    ({"event": "run_finished", "ts": 1.0, "exit_code": 137, "oom_kills": "1"}, False),
    ({"event": "failed", "ts": 1.0, "reason": "PrepareFailed", "memory_limit": -1}, False),
    ({"event": "failed", "ts": 1.0, "reason": "PrepareFailed", "memory_limit": 1 << 64}, False),
])
def test_oom_fields_of_a_line_are_typed(event, ok):
    assert (check_event(event) is not None) == ok
