"""Reading the bootstrap's lifecycle lines (``RLARK_EVENT {json}``) out of a Worker's log.

Pure: given bytes and an offset, return the events in the complete lines and the new offset, so
every runtime (log files, Pod logs) reads them the same way.
"""

from __future__ import annotations

import json

from rlark.bootstrap.worker import EVENT_PREFIX

_PREFIX = EVENT_PREFIX.encode()


def parse_lifecycle(chunk: bytes, offset: int, token: str | None = None) -> tuple[list[dict], int]:
    """Events in the complete lines of ``chunk`` (which starts at byte ``offset`` of the log).

    Returns ``(events, new_offset)``; a trailing partial line is left for the next call. Lines
    that merely contain the prefix inside other output, or carry broken JSON, are skipped; so are
    lines without this Run's event ``token`` when one is given (printed by the run script, not
    by the bootstrap).
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
        if isinstance(event, dict) and "event" in event and (token is None or event.get("tok") == token):
            events.append(event)
    return events, offset + end + 1


def read_new_events(path: str, offset: int, token: str | None = None,
                    max_bytes: int = 8 * 1024 * 1024, to_end: bool = False) -> tuple[list[dict], int]:
    """Read at most ``max_bytes`` of ``path`` from ``offset`` (everything up to the end of the
    file with ``to_end``, for a Worker that has exited) and parse lifecycle lines.

    A missing file yields no events. A line longer than ``max_bytes`` is skipped whole.
    """
    events: list[dict] = []
    try:
        with open(path, "rb") as f:
            while True:
                f.seek(offset)
                chunk = f.read(max_bytes)
                found, new_offset = parse_lifecycle(chunk, offset, token)
                events.extend(found)
                if new_offset == offset and len(chunk) == max_bytes:
                    new_offset = offset + len(chunk)  # one enormous line: not ours, skip it
                offset = new_offset
                if not to_end or len(chunk) < max_bytes:
                    return events, offset
    except FileNotFoundError:
        return events, offset
