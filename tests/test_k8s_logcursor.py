"""Following a Pod's log across reconnects (pure LogCursor)."""

from __future__ import annotations

from rlark.runtimes.kubernetes.logcursor import LogCursor, parse_log_time

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
