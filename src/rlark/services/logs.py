"""Reading Worker logs: the last N lines, and following new lines as they are written.

Local Workers write to files under ``$RLARK_HOME/logs``; the files outlive the Workers and the
server, so logs stay readable after a Job ended and after a restart.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from rlark import settings

if TYPE_CHECKING:
    from rlark.store import JobRow

CHUNK = 64 * 1024


#: a log answered whole is cut to its last 16 MiB (a Worker may write gigabytes)
MAX_WHOLE_BYTES = 16 * 1024 * 1024


def tail_lines(path: str | None, n: int | None) -> tuple[list[str], int]:
    """The last ``n`` lines of the file (when ``n`` is None: all, or the lines of its last
    :data:`MAX_WHOLE_BYTES` when it is bigger) and the file size in bytes (the offset to follow
    from). A missing file has no lines."""
    if not path or not os.path.exists(path):
        return [], 0
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if n is None:
            start = max(0, size - MAX_WHOLE_BYTES)
            f.seek(start)
            data = f.read(size - start)
            if start:
                data = data.split(b"\n", 1)[-1]  # drop the partial first line
        else:
            data = b""
            pos = size
            while pos > 0 and data.count(b"\n") <= n:
                step = min(CHUNK, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    lines = data.decode("utf-8", errors="replace").splitlines()
    if n is not None:
        lines = lines[-n:] if n > 0 else []
    return lines, size


def follow_lines(
    path: str | None,
    offset: int,
    still_active: Callable[[], bool],
    poll_seconds: float = 0.2,
    idle_check_seconds: float = 1.0,
) -> Iterator[str]:
    """Yield complete lines appended to ``path`` after byte ``offset``, until ``still_active()``
    turns false and the file has been read to its end. ``still_active`` is asked at most every
    ``idle_check_seconds`` while no new line arrives."""
    buf = b""
    last_check = 0.0
    active = True
    while True:
        chunk = b""
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(CHUNK)
        if chunk:
            offset += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", errors="replace")
            continue
        if not active:
            if buf:
                yield buf.decode("utf-8", errors="replace")
            return
        now = time.monotonic()
        if now - last_check >= idle_check_seconds:
            last_check = now
            active = still_active()
            if not active:
                continue  # one more read to the end of the file
        time.sleep(poll_seconds)


def job_log_dirs(job: "JobRow") -> list[Path]:
    """A Job's Worker log directories: its directory under ``$RLARK_HOME/logs`` and, for Runs
    made before logs were kept per project, the directories its Workers' log paths name; never
    anything outside RLark's own log directory."""
    dirs = {settings.job_logs_dir(job.project.name, job.name)}
    dirs |= {Path(w.log_path).parent for r in job.runs for w in r.workers if w.log_path}
    root = settings.logs_dir().resolve()
    return sorted(d for d in dirs if d.resolve().is_relative_to(root))


def remove_dirs(dirs: list[Path]) -> None:
    """Remove directories (those :func:`job_log_dirs` names), ignoring ones already gone."""
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
