"""Encryption at rest of RLark-managed secrets, with a key kept apart from the database.

Values are sealed with Fernet from ``cryptography`` (AES-128-CBC with an HMAC-SHA256 over the
whole token; https://cryptography.io/en/latest/fernet/), never with home-made crypto. The key:

* ``RLARK_SECRET_KEY``: one Fernet key (32 url-safe base64 bytes, what
  ``rlark secret key`` or ``Fernet.generate_key()`` prints), or several comma-separated to rotate:
  the first seals, every one opens (``MultiFernet``);
* else the key file ``RLARK_SECRET_KEY_FILE`` / ``rlark server --secret-key-file`` (default
  ``$RLARK_HOME/secret.key``), one key per line, made with mode 0600 on the first start when the
  database holds no secrets yet.

The key is never written to the database, a log line or an error message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

KEY_ENV = "RLARK_SECRET_KEY"
KEY_FILE_ENV = "RLARK_SECRET_KEY_FILE"


class SecretKeyError(ValueError):
    """The key is missing, malformed, or not the one the stored secrets were sealed with. The
    message says where the key was looked for and what to do; it never holds a key or a value."""


def key_file() -> Path:
    """Where the key file is: ``$RLARK_SECRET_KEY_FILE``, else ``$RLARK_HOME/secret.key``."""
    from rlark import settings

    given = os.environ.get(KEY_FILE_ENV, "").strip()
    return Path(given).expanduser() if given else settings.rlark_home() / "secret.key"


def _parse_keys(text: str, where: str) -> list[bytes]:
    from cryptography.fernet import Fernet

    keys = [k.strip().encode() for k in text.replace(",", "\n").splitlines() if k.strip()]
    if not keys:
        raise SecretKeyError(f"{where} holds no key")
    for i, key in enumerate(keys):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            raise SecretKeyError(
                f"{where}: key {i + 1} is not a Fernet key (32 url-safe base64-encoded bytes); "
                "make one with `rlark secret key`") from None
    return keys


@dataclass(frozen=True)
class KeySource:
    """Where the key came from, for messages: ``RLARK_SECRET_KEY`` or the key file's path."""

    where: str
    created: bool = False


def load_keys(create: bool = False) -> tuple[list[bytes], KeySource]:
    """The keys (first: the one that seals) and where they came from.

    ``create``: make the key file (mode 0600, its directory 0700) with a new key when it does
    not exist (a server's first start). Two servers starting at once make one file: it is
    created exclusively and the loser reads the winner's.

    Raises:
        SecretKeyError: no key (and ``create`` is false), or a malformed one.
    """
    from cryptography.fernet import Fernet

    if os.environ.get(KEY_ENV, "").strip():
        return _parse_keys(os.environ[KEY_ENV], KEY_ENV), KeySource(KEY_ENV)
    path = key_file()
    created = False
    if not path.exists():
        if not create:
            raise SecretKeyError(
                f"no secret key: {KEY_ENV} is not set and {path} does not exist; set "
                f"{KEY_ENV} or {KEY_FILE_ENV} (rlark server --secret-key-file) to the key the "
                "server's secrets were sealed with")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another server made it a moment ago
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key() + b"\n")
            created = True
    try:
        text = path.read_text()
    except OSError as exc:
        raise SecretKeyError(f"cannot read the secret key file {path}: {exc.strerror}") from None
    if path.stat().st_mode & 0o077:
        raise SecretKeyError(f"the secret key file {path} can be read by other users; "
                             f"`chmod 600 {path}`")
    return _parse_keys(text, str(path)), KeySource(str(path), created)


class SecretBox:
    """Seals and opens secret data (a ``{key: value}`` mapping) with the configured key(s)."""

    def __init__(self, keys: list[bytes], source: KeySource | None = None):
        from cryptography.fernet import Fernet, MultiFernet

        if not keys:
            raise SecretKeyError("no secret key given")
        self._fernet = MultiFernet([Fernet(k) for k in keys])
        self.source = source or KeySource("the given key")

    def __repr__(self) -> str:  # never the key
        return f"SecretBox(key from {self.source.where})"

    @classmethod
    def from_settings(cls, create: bool = False) -> "SecretBox":
        """A box with :func:`load_keys`'s keys."""
        keys, source = load_keys(create)
        return cls(keys, source)

    def seal(self, data: dict[str, str]) -> str:
        """``data`` as one Fernet token (text), with the first key."""
        return self._fernet.encrypt(json.dumps(data, sort_keys=True).encode()).decode("ascii")

    def open(self, token: str, what: str = "a secret") -> dict[str, str]:
        """The mapping sealed in ``token``.

        Raises:
            SecretKeyError: none of the keys opens it (another key sealed it, or it was changed),
                naming ``what`` and where the key came from.
        """
        from cryptography.fernet import InvalidToken

        try:
            data = json.loads(self._fernet.decrypt(token.encode("ascii")))
        except (InvalidToken, ValueError, UnicodeError):
            raise SecretKeyError(
                f"{what} cannot be opened with the secret key from {self.source.where}: it was "
                f"sealed with another key (set {KEY_ENV} or {KEY_FILE_ENV} to that one; several "
                "comma-separated keys are all tried)") from None
        if not isinstance(data, dict):
            raise SecretKeyError(f"{what} does not hold a mapping of keys to values")
        return {str(k): str(v) for k, v in data.items()}


def new_key() -> str:
    """A new Fernet key (text), for ``RLARK_SECRET_KEY`` or a key file."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")
