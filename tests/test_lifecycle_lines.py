"""Only the bootstrap's lifecycle lines count: the Run's event token, and reading to the end."""

from __future__ import annotations

import json

from rlark.controller.lifecycle import parse_lifecycle, read_new_events


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
