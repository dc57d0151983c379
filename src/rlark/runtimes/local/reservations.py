"""Host-wide reservations of loopback addresses and port blocks for local Workers.

The store only knows the Workers of its own server; several RLark servers (other RLARK_HOMEs,
other users' sessions) may share one machine. Between choosing a free port block and Ray binding
it there are seconds in which another server could choose the same block (seen: a second head's
`ray start` joined the first Job's GCS). Each reservation is an ``flock`` on a file under
``/tmp/rlark-locks`` (``$RLARK_LOCK_DIR``: :func:`rlark.settings.lock_dir`) held by the server
that placed the Worker, until the Worker is gone; the operating system drops it if that server
dies. The directory is host-wide, not under ``$RLARK_HOME``, because the servers that must see each
other's reservations have different homes.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TextIO

from rlark import settings


class Reservations:
    """Non-blocking flocks on ``<dir>/<kind>-<key>.lock``; one open file per held reservation."""

    def __init__(self, directory: str | None = None):
        self.dir = Path(directory or settings.lock_dir())
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(self.dir, 0o1777)  # shared by every user's servers, like /tmp itself
        except PermissionError:
            pass
        self._held: dict[str, TextIO] = {}  # name -> its open lock file (flock held)

    def try_reserve(self, kind: str, key: str | int) -> bool:
        """Take the reservation; False when another process (or this one) holds it."""
        name = f"{kind}-{key}"
        if name in self._held:
            return False
        try:  # never through a link: the directory is writable by every user of the machine
            fd = os.open(self.dir / f"{name}.lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT
                         | os.O_NOFOLLOW, 0o644)
        except OSError:
            return False
        f = open(fd, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        self._held[name] = f
        return True

    def release(self, kind: str, key: str | int | None) -> None:
        if key is None:
            return
        f = self._held.pop(f"{kind}-{key}", None)
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    def held(self) -> set[str]:
        return set(self._held)
