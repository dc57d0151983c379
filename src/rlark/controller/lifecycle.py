"""Reading the bootstrap's lifecycle lines (``RLARK_EVENT {json}``) out of a Worker's log.

Pure: given bytes and an offset, return the events in the complete lines and the new offset, so
every runtime (log files, Pod logs) reads them the same way.
"""

from __future__ import annotations

import json

from rlark.bootstrap.worker import EVENT_PREFIX

_PREFIX = EVENT_PREFIX.encode()


def parse_lifecycle(chunk: bytes, offset: int) -> tuple[list[dict], int]:
    """Events in the complete lines of ``chunk`` (which starts at byte ``offset`` of the log).

    Returns ``(events, new_offset)``; a trailing partial line is left for the next call. Lines
    that merely contain the prefix inside other output, or carry broken JSON, are skipped.
    """
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    events = []
    for line in chunk[: end + 1].splitlines():
        if not line.startswith(_PREFIX):
            continue
        try:
            event = json.loads(line[len(_PREFIX):])
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event:
            events.append(event)
    return events, offset + end + 1


def read_new_events(path: str, offset: int, max_bytes: int = 8 * 1024 * 1024) -> tuple[list[dict], int]:
    """Read at most ``max_bytes`` of ``path`` from ``offset`` and parse lifecycle lines.

    A missing file yields no events. A line longer than ``max_bytes`` is skipped whole.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    events, new_offset = parse_lifecycle(chunk, offset)
    if new_offset == offset and len(chunk) == max_bytes:
        return [], offset + len(chunk)  # one enormous line: not ours, skip it
    return events, new_offset
