"""RLark-managed secrets: what ``rlark secret``, ``/api/v1/secrets`` and the controller share.

A secret belongs to a project and has a name (DNS-1123 label) and one or more keys, like a
Kubernetes Secret; a Job takes a value with ``env[].valueFrom.secretKeyRef: {name, key}``.
Members set and delete a project's secrets, viewers list them; nobody reads a value back: no
view, audit entry, Event or error message holds one (they say *set* / *unset*). Values are
sealed at rest (:mod:`rlark.secretbox`); the controller opens those a Run needs when it
launches it, and the read paths open them only to mask them (``***``) in what they answer.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlark.preflight import SECRET_KEY
from rlark.record.build import iso
from rlark.secretbox import SecretBox, SecretKeyError
from rlark.services import audit
from rlark.services.auth import Principal, authorize, utcnow
from rlark.services.errors import Invalid, NotFound
from rlark.spec import DNS1123_LABEL, document_secret_refs
from rlark.store import JobRow, ProjectRole, ProjectRow, SecretRow, Store

#: limits on what one secret holds (a Kubernetes Secret holds at most 1 MiB in all)
MAX_KEYS = 64
MAX_VALUE_BYTES = 64 * 1024
MAX_SECRET_BYTES = 1024 * 1024
#: values shorter than this are not masked in answers (``***`` in place of every "1" or "ab"
#: would garble the text and hide nothing worth hiding)
MIN_MASKED_LENGTH = 4
MASK = "***"


def check_name(name: Any) -> str:
    """``name`` if it can name an RLark secret (a DNS-1123 label, at most 63 characters).

    Raises:
        Invalid: it cannot.
    """
    if not isinstance(name, str) or len(name) > 63 or not DNS1123_LABEL.match(name):
        shown = name[:63] if isinstance(name, str) else type(name).__name__
        raise Invalid(f"secret name {shown!r} is not valid: use 1-63 lower-case letters, digits "
                      "and '-', starting and ending with a letter or digit")
    return name


def check_data(data: Any) -> dict[str, str]:
    """``data`` (``{key: value}``) if every key can be a secret key (letters, digits, '-', '_',
    '.'; a Kubernetes Secret's rule) and every value is text an environment variable can hold,
    within :data:`MAX_KEYS`, :data:`MAX_VALUE_BYTES` and :data:`MAX_SECRET_BYTES`. Messages name
    keys, never values.

    Raises:
        Invalid: what is wrong, and how to fix it.
    """
    if not isinstance(data, dict) or not data:
        raise Invalid("data must be a mapping of at least one key to its value, e.g. "
                      '{"api_key": "..."}')
    if len(data) > MAX_KEYS:
        raise Invalid(f"data has {len(data)} keys; a secret holds at most {MAX_KEYS}")
    total = 0
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 253 or not SECRET_KEY.match(key):
            raise Invalid(f"data: key {str(key)[:80]!r} is not valid: use letters, digits, '-', "
                          "'_' and '.'")
        if not isinstance(value, str):
            raise Invalid(f"data.{key}: the value must be a string, not "
                          f"{type(value).__name__}")
        if "\x00" in value:
            raise Invalid(f"data.{key}: the value holds a NUL character, which no environment "
                          "variable can hold")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise Invalid(f"data.{key}: the value is not valid Unicode text") from None
        if size > MAX_VALUE_BYTES:
            raise Invalid(f"data.{key}: the value is {size} bytes; at most "
                          f"{MAX_VALUE_BYTES // 1024} KiB (put larger files in a mount)")
        total += size
    if total > MAX_SECRET_BYTES:
        raise Invalid(f"data holds {total} bytes in all; a secret holds at most 1 MiB")
    return dict(data)


def _project(s: Session, name: str) -> ProjectRow:
    row = s.scalar(select(ProjectRow).where(ProjectRow.name == name)) \
        if DNS1123_LABEL.match(name or "") else None
    if row is None:
        raise NotFound(f"no project named {name!r} that you can see; `rlark project list` shows yours")
    return row


def _row(s: Session, project: ProjectRow, name: str) -> SecretRow | None:
    return s.scalar(select(SecretRow).where(SecretRow.project_id == project.id,
                                            SecretRow.name == name))


def _used_by(s: Session, project: ProjectRow) -> dict[tuple[str, str], list[str]]:
    """``(secret, key)`` -> names of the project's Jobs whose spec refers to it."""
    out: dict[tuple[str, str], list[str]] = {}
    for name, spec in s.execute(select(JobRow.name, JobRow.spec)
                                .where(JobRow.project_id == project.id).order_by(JobRow.name)):
        for ref in document_secret_refs(spec):
            out.setdefault(ref, []).append(name)
    return out


def secret_view(row: SecretRow | None, name: str, project: str,
                used: dict[tuple[str, str], list[str]]) -> dict[str, Any]:
    """A secret as everyone who may see it sees it: its keys, each ``set`` or ``unset`` (a key a
    Job refers to that the secret does not have), the Jobs that use each key, who changed it
    last and when. ``exists`` is false for a secret that Jobs refer to but nobody set. Never a
    value."""
    keys = list(row.keys) if row is not None else []
    wanted = sorted({k for (n, k) in used if n == name} - set(keys))
    return {
        "name": name,
        "project": project,
        "exists": row is not None,
        "keys": [{"key": k, "state": "set", "usedBy": used.get((name, k), [])} for k in keys]
        + [{"key": k, "state": "unset", "usedBy": used[(name, k)]} for k in wanted],
        "createdAt": iso(row.created_at) if row is not None else None,
        "createdBy": row.created_by if row is not None else None,
        "updatedAt": iso(row.updated_at) if row is not None else None,
        "updatedBy": row.updated_by if row is not None else None,
    }


def missing_refs(s: Session, project_id: int,
                 refs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(secret, key)`` references the project has no RLark-managed value for (read from
    the key names: nothing is opened)."""
    refs = list(refs)
    names = {n for n, _ in refs}
    have = {row.name: set(row.keys) for row in s.scalars(
        select(SecretRow).where(SecretRow.project_id == project_id, SecretRow.name.in_(names)))} \
        if names else {}
    return [(n, k) for n, k in refs if k not in have.get(n, ())]


def managed_names(s: Session, project_id: int, names: Iterable[str]) -> set[str]:
    """Which of ``names`` are secrets RLark manages in the project."""
    names = set(names)
    if not names:
        return set()
    return set(s.scalars(select(SecretRow.name).where(SecretRow.project_id == project_id,
                                                      SecretRow.name.in_(names))))


def open_refs(s: Session, project_id: int, refs: Iterable[tuple[str, str]],
              box: SecretBox) -> dict[tuple[str, str], str]:
    """The values of the references the project's RLark-managed secrets have (``(secret, key)``
    -> value); references to secrets RLark does not manage are left out (on Kubernetes they name
    Kubernetes Secrets), as are keys a managed secret lacks.

    Raises:
        SecretKeyError: a secret cannot be opened with the server's key.
    """
    refs = list(refs)
    names = {n for n, _ in refs}
    if not names:
        return {}
    opened: dict[str, dict[str, str]] = {}
    for row in s.scalars(select(SecretRow).where(SecretRow.project_id == project_id,
                                                 SecretRow.name.in_(names))):
        opened[row.name] = box.open(row.sealed, f"secret {row.name!r}")
    return {(n, k): opened[n][k] for n, k in refs if n in opened and k in opened[n]}


def masked_pieces(values: Iterable[str]) -> set[str]:
    """What to look for to mask ``values``: each value, and each line of a value of several
    lines (a PEM key) on its own, since logs are served line by line (those of at least
    :data:`MIN_MASKED_LENGTH` characters, surrounding whitespace dropped from lines)."""
    pieces = set()
    for v in values:
        pieces.add(v)
        if "\n" in v or "\r" in v:
            pieces.update(line.strip() for line in v.splitlines())
    return {p for p in pieces if len(p) >= MIN_MASKED_LENGTH}


def masker(values: Iterable[str]) -> Callable[[str], str]:
    """A function that replaces each of ``values`` (and each line of a value of several lines:
    :func:`masked_pieces`), longest first, by ``***`` in a text."""
    chosen = sorted(masked_pieces(values), key=len, reverse=True)
    if not chosen:
        return lambda text: text
    pattern = re.compile("|".join(re.escape(v) for v in chosen))
    return lambda text: pattern.sub(MASK, text)


def mask_data(data: Any, mask: Callable[[str], str]) -> Any:
    """``data`` (JSON-ready: dicts, lists, scalars) with ``mask`` applied to every string."""
    if isinstance(data, str):
        return mask(data)
    if isinstance(data, dict):
        return {k: mask_data(v, mask) for k, v in data.items()}
    if isinstance(data, list):
        return [mask_data(v, mask) for v in data]
    return data


def verify_key(store: Store, box: SecretBox) -> int:
    """Open every stored secret with ``box`` (a server's start): the count opened.

    Raises:
        SecretKeyError: one cannot be opened (the message names the secret, its project and
            where the key came from).
    """
    n = 0
    with store.session() as s:
        for row, project in s.execute(select(SecretRow, ProjectRow.name)
                                      .join(ProjectRow, ProjectRow.id == SecretRow.project_id)):
            box.open(row.sealed, f"secret {row.name!r} of project {project!r}")
            n += 1
    return n


def server_box(store: Store) -> SecretBox:
    """The box of a starting server: the configured key, the key file made on the first start
    (when the database holds no secret yet), and every stored secret opened once with it.

    Raises:
        SecretKeyError: no key while secrets are stored (a new key would lose them), a malformed
            key, or a key that does not open the stored secrets.
    """
    with store.session() as s:
        stored = s.scalar(select(SecretRow.id).limit(1)) is not None
    try:
        box = SecretBox.from_settings(create=not stored)
    except SecretKeyError as exc:
        if stored:
            raise SecretKeyError(f"{exc}. The database holds secrets sealed with that key; "
                                 "without it they cannot be opened") from None
        raise
    verify_key(store, box)
    return box


class SecretService:
    """Set, list and delete a project's secrets; every change audited (``secret.set``,
    ``secret.delete``: the secret's name and key names, never a value)."""

    def __init__(self, store: Store, box: SecretBox | None = None):
        self.store = store
        self._box = box

    @property
    def box(self) -> SecretBox:
        """The box given, else one from the settings (the key file made when missing), made on
        first use: an app that never touches a secret makes no key file."""
        if self._box is None:
            self._box = SecretBox.from_settings(create=True)
        return self._box

    def list(self, principal: Principal, project: str) -> list[dict[str, Any]]:
        """The project's secrets and those its Jobs refer to, by name (viewers and up)."""
        authorize(principal, project, ProjectRole.viewer)
        with self.store.session() as s:
            prow = _project(s, project)
            rows = {r.name: r for r in s.scalars(select(SecretRow).where(
                SecretRow.project_id == prow.id))}
            used = _used_by(s, prow)
            names = sorted(set(rows) | {n for n, _ in used})
            return [secret_view(rows.get(n), n, project, used) for n in names]

    def get(self, principal: Principal, project: str, name: str) -> dict[str, Any]:
        """One secret (viewers and up).

        Raises:
            NotFound: no such secret, and no Job refers to one of that name.
        """
        authorize(principal, project, ProjectRole.viewer)
        check_name(name)
        with self.store.session() as s:
            prow = _project(s, project)
            used = _used_by(s, prow)
            row = _row(s, prow, name)
            if row is None and not any(n == name for n, _ in used):
                raise NotFound(f"no secret named {name!r} in project {project!r}; "
                               "`rlark secret list` lists them")
            return secret_view(row, name, project, used)

    def set(self, principal: Principal, client: str | None, project: str, name: str,
            data: Any, replace: bool = False) -> dict[str, Any]:
        """Give secret ``name`` the keys of ``data`` (members and up): a new secret, or the
        keys added to / changed in an existing one (``replace``: its keys become exactly
        ``data``'s). Runs started from now on get the new values; running ones keep theirs.

        Raises:
            Invalid: a bad name, key or value (see :func:`check_data`).
            Forbidden / NotFound: the caller's role (see :func:`authorize`).
        """
        authorize(principal, project, ProjectRole.member)
        check_name(name)
        data = check_data(data)
        actor = principal.actor(client)
        with self.store.session() as s:
            prow = _project(s, project)
            row = _row(s, prow, name)
            now = utcnow()
            if row is None:
                merged, verb = data, "created"
                row = SecretRow(project_id=prow.id, name=name, created_at=now, created_by=actor.name)
                s.add(row)
            else:
                merged = data if replace else {**self.box.open(row.sealed, f"secret {name!r}"), **data}
                verb = "replaced" if replace else "updated"
            check_data(merged)
            row.keys = sorted(merged)
            row.sealed = self.box.seal(merged)
            row.updated_at, row.updated_by = now, actor.name
            audit.record(s, actor, "secret.set", project=project, target=name,
                         detail=f"{verb}; keys set: {', '.join(sorted(data))}")
            s.flush()
            return secret_view(row, name, project, _used_by(s, prow))

    def delete(self, principal: Principal, client: str | None, project: str, name: str,
               key: str | None = None) -> dict[str, Any]:
        """Delete secret ``name``, or only its ``key`` (members and up). Jobs that refer to it
        keep their spec; their next Run fails with ``SecretMissing`` until it is set again.

        Raises:
            NotFound: no such secret or key.
        """
        authorize(principal, project, ProjectRole.member)
        check_name(name)
        actor = principal.actor(client)
        with self.store.session() as s:
            prow = _project(s, project)
            row = _row(s, prow, name)
            if row is None:
                raise NotFound(f"no secret named {name!r} in project {project!r}; "
                               "`rlark secret list` lists them")
            if key is not None and key not in row.keys:
                raise NotFound(f"secret {name!r} has no key {key[:80]!r}; its keys: "
                               f"{', '.join(row.keys)}")
            if key is None or row.keys == [key]:
                s.delete(row)
                detail = "deleted"
            else:
                data = self.box.open(row.sealed, f"secret {name!r}")
                data.pop(key)
                row.keys, row.sealed = sorted(data), self.box.seal(data)
                row.updated_at, row.updated_by = utcnow(), actor.name
                detail = f"key deleted: {key}"
            audit.record(s, actor, "secret.delete", project=project, target=name, detail=detail)
        return {"name": name, "project": project, "key": key, "deleted": True}
