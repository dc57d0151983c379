"""The credentials file, ``$RLARK_HOME/credentials``: API tokens by server URL, mode 0600.

The server writes its first administrator's token there on its first start (so the ``rlark``
CLI on the same machine works at once); ``rlark login`` adds entries, ``rlark logout`` removes
them. The CLI takes a token from ``--token``/``RLARK_TOKEN`` first, then from this file.

Format (JSON)::

    {"servers": {"http://127.0.0.1:8470": {"token": "rlark_...", "user": "admin",
                                          "project": "default"}},
     "current": "http://127.0.0.1:8470"}
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from rlark import settings

FILE_NAME = "credentials"


class CredentialsError(RuntimeError):
    """The credentials file cannot be used (unreadable, not JSON, or readable by others)."""


def path() -> Path:
    """``$RLARK_HOME/credentials``."""
    return settings.rlark_home() / FILE_NAME


def load(file: Path | None = None) -> dict[str, Any]:
    """The file's content (``{"servers": {}}`` when it does not exist).

    Raises:
        CredentialsError: it is readable or writable by group or others (like ssh, RLark will
            not use a key others can read), or it is not valid JSON.
    """
    file = file or path()
    try:
        st = file.stat()
    except FileNotFoundError:
        return {"servers": {}}
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(f"{file} is accessible by other users (mode {stat.S_IMODE(st.st_mode):o}); "
                               f"make it private with `chmod 600 {file}`")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise CredentialsError(f"{file} cannot be read as RLark credentials ({exc}); remove it "
                               "and run `rlark login` again") from None
    if not isinstance(data, dict) or not isinstance(data.get("servers", {}), dict):
        raise CredentialsError(f"{file} is not an RLark credentials file; remove it and run `rlark login`")
    data.setdefault("servers", {})
    return data


def save(data: dict[str, Any], file: Path | None = None) -> Path:
    """Write the file atomically with mode 0600 (never readable by others, not even briefly)."""
    file = file or path()
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".credentials-", dir=file.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return file


def entry(server: str, file: Path | None = None) -> dict[str, Any] | None:
    """The stored entry for ``server`` (a normalised URL), or None."""
    return load(file).get("servers", {}).get(server.rstrip("/"))


def put(server: str, token: str, user: str | None = None, project: str | None = None,
        current: bool = False, file: Path | None = None) -> Path:
    """Store ``token`` for ``server`` (``current``: also make it the CLI's default server)."""
    data = load(file)
    item = {"token": token}
    if user:
        item["user"] = user
    old = data["servers"].get(server.rstrip("/")) or {}
    if project or old.get("project"):
        item["project"] = project or old["project"]
    data["servers"][server.rstrip("/")] = item
    if current:
        data["current"] = server.rstrip("/")
    return save(data, file)


def set_project(server: str, project: str | None, file: Path | None = None) -> Path:
    """Make ``project`` the default project of the CLI's Job commands on ``server`` (None: back
    to ``default``); the entry is made when there is none (a token may come from RLARK_TOKEN)."""
    data = load(file)
    item = data["servers"].setdefault(server.rstrip("/"), {})
    if project:
        item["project"] = project
    else:
        item.pop("project", None)
    return save(data, file)


def remove(server: str, file: Path | None = None) -> bool:
    """Forget ``server``'s token; True when there was one."""
    data = load(file)
    found = data["servers"].pop(server.rstrip("/"), None) is not None
    if data.get("current") == server.rstrip("/"):
        data.pop("current")
    if found:
        save(data, file)
    return found
