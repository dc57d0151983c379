"""Following a Pod's log across reconnects and server processes (pure LogCursor)."""

from __future__ import annotations

import pytest

from rlark.runtimes.kubernetes.logcursor import LogCursor, parse_log_time, restore

T0 = b"2024-01-20T00:42:08.123456789Z"
T1 = b"2024-01-20T00:42:08.5Z"
T2 = b"2024-01-20T00:42:09Z"


def test_parse_log_time():
    assert parse_log_time(T0) == 1705711328 * 10**9 + 123456789
    assert parse_log_time(T1) == 1705711328 * 10**9 + 500000000
    assert parse_log_time(T2) == 1705711329 * 10**9
    assert parse_log_time(b"hello") is None and parse_log_time(b"2024-01-20T00:42:08.x1Z") is None


def test_timestamps_are_stripped_and_partial_lines_wait():
    c = LogCursor()
    assert c.feed(T0 + b" RLARK_EVENT {\"event\": \"facts\"}\n" + T1 + b" par") == \
        b"RLARK_EVENT {\"event\": \"facts\"}\n"
    assert c.feed(b"tial\n") == b"partial\n"
    assert c.feed(T2 + b" no newline at the end") == b""
    assert c.flush() == b"no newline at the end\n"


def test_reconnect_skips_what_was_written():
    c = LogCursor()
    assert c.resume(now=0) is None  # nothing written yet: from the start
    c.feed(T0 + b" a\n" + T1 + b" b\n" + T1 + b" c\n")
    since = c.resume(now=1705711328.5 + 10)
    assert since == 11  # ceil(now - last line) + 1
    # the server replays from `since` seconds ago: older lines and the two lines at T1 again
    replay = T0 + b" a\n" + T1 + b" b\n" + T1 + b" c\n" + T1 + b" d\n" + T2 + b" e\n"
    assert c.feed(replay) == b"d\ne\n"


def test_lines_without_timestamps_are_kept():
    c = LogCursor()
    assert c.feed(b"plain line\n") == b"plain line\n"


# --- across server processes: the state saved beside the file ----------------------------------------

T3 = b"2024-01-20T00:42:10Z"


def test_state_round_trips_and_a_new_cursor_skips_what_the_file_holds():
    c = LogCursor()
    c.resume(now=0)
    written = c.feed(T0 + b" a\n" + T1 + b" b\n" + T1 + b" c\n")
    saved = c.state()
    assert saved == {"size": len(written), "lines": 3, "last_ns": parse_log_time(T1), "at_last": 2}
    later = LogCursor.from_state(saved)  # another process
    assert later.state() == saved
    assert later.resume(now=1705711328.5 + 10) == 11
    assert later.feed(T0 + b" a\n" + T1 + b" b\n" + T1 + b" c\n" + T1 + b" d\n" + T2 + b" e\n") == b"d\ne\n"
    assert later.state() == {"size": len(written) + 4, "lines": 5, "last_ns": parse_log_time(T2),
                             "at_last": 1}


def test_a_file_without_a_saved_state_is_resumed_by_its_lines():
    c = LogCursor.after_lines(2, size=4)
    assert c.resume(now=0) is None  # from the start of the log
    assert c.feed(T0 + b" a\n" + T1 + b" b\n" + T1 + b" c\n") == b"c\n"
    assert c.state() == {"size": 6, "lines": 3, "last_ns": parse_log_time(T1), "at_last": 1}
    # a reconnect before any timestamped line: the lines are skipped again, not only once
    d = LogCursor.after_lines(1, size=2)
    d.resume(now=0)
    assert d.feed(T0 + b" a\n" + T1 + b" par") == b""
    d.resume(now=0)
    assert d.feed(T0 + b" a\n" + T1 + b" b\n") == b"b\n"


def test_restore_cuts_back_what_was_written_after_the_last_save():
    c = LogCursor()
    c.resume(now=0)
    c.feed(T0 + b" a\n" + T1 + b" b\n")
    saved = c.state()
    # the process died after appending "c\n" but before saving: the file is 2 bytes longer
    again = restore(saved, file_size=saved["size"] + 2)
    assert again is not None and again.size == saved["size"]
    again.resume(now=1705711330)
    assert again.feed(T0 + b" a\n" + T1 + b" b\n" + T2 + b" c\n") == b"c\n"
    assert restore(saved, file_size=saved["size"]).state() == saved


def test_restore_gives_up_on_states_it_cannot_trust():
    assert restore(None, 10) is None
    assert restore({"size": 11, "lines": 1, "last_ns": None, "at_last": 0}, 10) is None  # file was cut
    for bad in ({}, {"size": -1, "lines": 0, "last_ns": None, "at_last": 0},
                {"size": 1, "lines": "2", "last_ns": None, "at_last": 0}, [1, 2], "x"):
        assert restore(bad, 10) is None, bad
    with pytest.raises(ValueError):
        LogCursor.from_state({"size": 1})


def test_a_cursor_counts_what_it_writes_also_on_flush_and_plain_lines():
    c = LogCursor()
    out = c.feed(b"plain\n" + T0 + b" x") + c.flush()
    assert out == b"plain\nx\n" and c.state() == {"size": 8, "lines": 2, "last_ns": parse_log_time(T0),
                                                   "at_last": 1}
