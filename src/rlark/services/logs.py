"""Reading Worker logs: the last N lines, and following new lines as they are written.

Local Workers write to files under ``$RLARK_HOME/logs``; the files outlive the Workers and the
server, so logs stay readable after a Job ended and after a restart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from rlark import settings
from rlark.bootstrap.worker import EVENT_PREFIX

if TYPE_CHECKING:
    from rlark.store import JobRow

CHUNK = 64 * 1024


#: a log answered whole is cut to its last 16 MiB (a Worker may write gigabytes)
MAX_WHOLE_BYTES = 16 * 1024 * 1024


#: a lifecycle line's event token (``"tok": "<hex>"``), for lines that are not valid JSON
_TOKEN_FIELD = re.compile(r'\s*"tok"\s*:\s*"[^"]*"\s*,?')


def is_lifecycle(line: str) -> bool:
    """Whether ``line`` is one of the bootstrap's lifecycle lines (``RLARK_EVENT {json}``):
    RLark's own bookkeeping, which user-facing logs leave out unless asked for."""
    return line.startswith(EVENT_PREFIX)


def is_user_line(line: str) -> bool:
    """Not a lifecycle line (:func:`is_lifecycle`): what a user's own logs show by default."""
    return not line.startswith(EVENT_PREFIX)


def redact(line: str, mask: Callable[[str], str] | None = None) -> str:
    """``line`` as users may read it: a lifecycle line without the Run's event token (the
    secret that marks genuine lifecycle lines; controller/lifecycle.py); with ``mask`` (a
    Worker's from :meth:`~rlark.services.jobs.JobService.worker_logs`) the values of the Job's
    secrets replaced by ``***``, as CI systems do, since a script may print them."""
    if mask is not None:
        line = mask(line)
    if not line.startswith(EVENT_PREFIX) or "tok" not in line:
        return line
    try:
        body = json.loads(line[len(EVENT_PREFIX):])
    except ValueError:
        body = None
    if isinstance(body, dict):
        body.pop("tok", None)
        return EVENT_PREFIX + json.dumps(body)
    return _TOKEN_FIELD.sub("", line)


def user_lines(lines: Iterable[str], lifecycle: bool = False) -> list[str]:
    """Log lines as ``rlark logs``, the API and the console show them: lifecycle lines left out
    (``lifecycle=False``, the default) or kept without their token (:func:`redact`)."""
    if lifecycle:
        return [redact(line) for line in lines]
    return [line for line in lines if not line.startswith(EVENT_PREFIX)]


def tail_lines(path: str | None, n: int | None,
               keep: Callable[[str], bool] | None = None,
               drop: bool = True) -> tuple[list[str], int]:
    """The last ``n`` lines of the file (when ``n`` is None: all, or the lines of its last
    :data:`MAX_WHOLE_BYTES` when it is bigger) and the file size in bytes (the offset to follow
    from). With ``keep`` (e.g. :func:`is_user_line`) only lines it accepts are counted: ``n``
    of them, however many other lines lie between; they alone are returned, or with
    ``drop=False`` every line from the first of them on (a reader that wants the others for
    context, such as the times lifecycle lines carry). A missing file has no lines."""
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
            step = CHUNK
            while pos > 0 and _count(data, pos > 0, keep) <= n:
                step = min(step, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
                step = min(step * 2, 16 * CHUNK)  # many skipped lines: read faster
    lines = data.decode("utf-8", errors="replace").splitlines()
    if keep is not None and not drop:
        if n is None:
            return lines, size
        kept = [i for i, line in enumerate(lines) if keep(line)][-n:] if n > 0 else []
        return (lines[kept[0]:] if kept else []), size
    if keep is not None:
        lines = [line for line in lines if keep(line)]
    if n is not None:
        lines = lines[-n:] if n > 0 else []
    return lines, size


def _count(data: bytes, partial_first: bool, keep: Callable[[str], bool] | None) -> int:
    """How many complete lines of ``data`` ``keep`` accepts (all lines without ``keep``)."""
    if keep is None:
        return data.count(b"\n")
    lines = data.split(b"\n")[1 if partial_first else 0:-1]
    return sum(1 for line in lines if keep(line.decode("utf-8", errors="replace")))


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
