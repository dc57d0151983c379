"""The workload's side of the lifecycle channel: what the bootstrap reports to its keeper
(:func:`emit`, JSON lines on ``RLARK_REPORT_FD``) and what the keeper tells it
(:class:`KeeperLink`, ``RLARK_CONTROL_FD``). :func:`attach` takes both descriptors from the
environment once, at the start of ``worker``.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from typing import MutableMapping

from rlark.bootstrap.config import EXIT_STOPPED, BootstrapError
from rlark.bootstrap.lifecycle import lifecycle_line

_emit_lock = threading.Lock()
#: the keeper's report pipe (RLARK_REPORT_FD, keeper.py): what this program reports goes there as
#: one JSON object per line, and the keeper alone writes the Worker's lifecycle lines. Without a
#: keeper (a test running the bootstrap alone) reports are lifecycle lines on stdout.
_report_fd: int | None = None


def emit(event: str, **data) -> None:
    """Report one event: a JSON line ``{"ts": <unix seconds>, "event": ..., ...}`` to the keeper
    (which checks it and writes it as a lifecycle line), or ``RLARK_EVENT {json}`` on stdout
    when there is no keeper."""
    body = {"ts": round(time.time(), 3), "event": event, **data}
    text = json.dumps(body)
    with _emit_lock:
        if _report_fd is not None:
            data_out = (text + "\n").encode()
            while data_out:
                try:
                    data_out = data_out[os.write(_report_fd, data_out):]
                except InterruptedError:
                    continue
                except OSError:  # the keeper is gone: nobody to report to
                    return
            return
        sys.stdout.write(lifecycle_line(event, body["ts"], **data) + "\n")
        sys.stdout.flush()


def passthrough(line: bytes) -> None:
    """Write one line of a child's output to this Worker's stdout (its log) whole: never inside
    a lifecycle line :func:`emit` writes there. A closed stdout loses the line, nothing else."""
    with _emit_lock:
        try:
            sys.stdout.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        except (OSError, ValueError):
            pass


class KeeperLink:
    """What the keeper tells this program (RLARK_CONTROL_FD, keeper.py): one line
    ``run_finished <exit status> <run start, unix seconds>`` once the head's run script ended.
    The end of the pipe means the keeper is gone: this Worker is being torn down."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = b""

    def wait(self, timeout: float) -> tuple[int, float] | None:
        """``(exit status, run start)`` once said, else None after ``timeout`` seconds.

        Raises:
            BootstrapError: ``Stopped`` when the keeper is gone.
        """
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                chunk = os.read(self.fd, 4096)
            except InterruptedError:
                return None
            if not chunk:
                raise BootstrapError("Stopped", "the keeper is gone", EXIT_STOPPED)
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            parts = line.decode(errors="replace").split()
            if len(parts) == 3 and parts[0] == "run_finished":
                try:
                    return int(parts[1]), float(parts[2])
                except ValueError:
                    continue
        return None


#: set by :func:`attach` from RLARK_CONTROL_FD (None: no keeper)
_control: KeeperLink | None = None


def attach(environ: MutableMapping[str, str]) -> None:
    """Take the keeper's descriptors out of ``environ`` (``os.environ``: they are removed, so
    nothing this program starts inherits their numbers): reports go to ``RLARK_REPORT_FD``,
    the keeper's word comes from ``RLARK_CONTROL_FD``. Absent ones mean no keeper."""
    global _report_fd, _control
    fd = environ.pop("RLARK_REPORT_FD", "")
    _report_fd = int(fd) if fd.isdigit() else None
    fd = environ.pop("RLARK_CONTROL_FD", "")
    _control = KeeperLink(int(fd)) if fd.isdigit() else None


def keeper_fds() -> list[int]:
    """The keeper's descriptors this program holds (:func:`attach`): what a process forked from
    it that reports nothing closes."""
    return [fd for fd in (_report_fd, _control.fd if _control is not None else None)
            if fd is not None]


def keeper_link() -> KeeperLink | None:
    """The keeper's control pipe (:func:`attach`), None when this program runs without one."""
    return _control
