"""Who is asking: API tokens, console sessions, passwords, the first administrator, and the
one authorization rule every front end uses (:func:`authorize`).

* API tokens are ``rlark_`` + 43 URL-safe characters (256 random bits, :mod:`secrets`); the store
  keeps only their SHA-256 digest (a fast digest is right for high-entropy secrets and lets the
  lookup use an index; GitHub and PyPI store their tokens the same way) and a short prefix to
  recognise them by. A token is shown once, when it is made.
* Console sessions: a random cookie value, stored as its digest, with a CSRF token and an expiry.
* Passwords (optional, for the console's login form): Argon2id hashes from ``argon2-cffi``.
* Failed logins are rate limited per client address and per user name (``limits``).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Mapping

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

if TYPE_CHECKING:
    from limits import RateLimitItem

from rlark.services import audit
from rlark.services.audit import Actor
from rlark.services.errors import Forbidden, NotFound, TooManyRequests, Unauthenticated
from rlark.store import (
    MembershipRow,
    ProjectRole,
    ProjectRow,
    SessionRow,
    Store,
    TokenRow,
    UserRow,
)

TOKEN_PREFIX = "rlark_"
#: characters of a token kept in clear to tell tokens apart in lists ("rlark_" + 6)
SHOWN_PREFIX = 12
DEFAULT_PROJECT = "default"
ADMIN_USER = "admin"
#: a token's last use is written at most this often (seconds), not on every request
LAST_USED_RESOLUTION = 60.0
MIN_PASSWORD_LENGTH = 10
#: the audit log's actor for a failed login whose user is not known (never what was typed: a
#: password typed into the name field must not be stored); user names cannot contain "("
ANONYMOUS = "(anonymous)"
#: the per-user failed-login limit is this many times the per-address one: a user is not locked
#: out as soon as one address is, but guessing one account from many addresses is still bounded
USER_LIMIT_FACTOR = 3


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def digest(secret: str) -> str:
    """SHA-256 of a token or session id, hex (64 characters)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    """A new API token: ``rlark_`` + 43 URL-safe characters (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: a user, their roles by project name, and how they proved it
    (``token``, ``session``, or ``open`` when the server runs without authentication)."""

    name: str
    user_id: int | None
    is_admin: bool
    roles: Mapping[str, ProjectRole] = field(default_factory=dict)
    via: str = "token"
    #: the session's CSRF token (console sessions only)
    csrf: str | None = None
    token_id: int | None = None

    def role_in(self, project: str) -> ProjectRole | None:
        """The caller's role in ``project`` (site administrators are admins everywhere);
        None: no role, so the project is invisible to them."""
        if self.is_admin:
            return ProjectRole.admin
        return self.roles.get(project)

    def readable_projects(self) -> list[str] | None:
        """Projects whose Jobs the caller may see; None: all (site administrators)."""
        return None if self.is_admin else sorted(self.roles)

    def actor(self, client: str | None = None) -> Actor:
        return Actor(self.name, client)


#: the caller when the server runs without authentication (loopback only; see server.py)
OPEN_PRINCIPAL = Principal(name="local", user_id=None, is_admin=True, via="open")


def authorize(principal: Principal, project: str, needed: ProjectRole) -> ProjectRole:
    """The one authorization rule for anything inside a project.

    Returns the caller's role. Raises:
        NotFound: the caller has no role in ``project`` (or it does not exist): a user never
            learns that another project, or anything in it, exists.
        Forbidden: the caller's role is weaker than ``needed``.
    """
    role = principal.role_in(project)
    if role is None:
        raise NotFound(f"no project named {project!r} that you can see; `rlark project list` "
                       "shows yours (a project admin can add you with `rlark project add-member`)")
    if not role.allows(needed):
        raise Forbidden(f"your role in project {project!r} is {role.value}; this needs "
                        f"{needed.value} or more (ask a project admin)")
    return role


class LoginLimiter:
    """At most ``rate`` failed logins per client address (a ``limits`` rate string, e.g.
    ``10/5 minutes``) and :data:`USER_LIMIT_FACTOR` times as many per user name; a caller over
    either gets :class:`TooManyRequests` before its password is even checked."""

    def __init__(self, rate: str = "10/5 minutes"):
        from limits import RateLimitItem, parse, storage, strategies

        self.item = parse(rate)
        self.user_item: RateLimitItem = type(self.item)(
            self.item.amount * USER_LIMIT_FACTOR, self.item.multiples)
        self.limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage())

    def _keys(self, client: str | None, user: str | None) -> list[tuple[str, RateLimitItem, str]]:
        keys = [(f"client:{client or '-'}", self.item, "from this address")]
        if user:
            keys.append((f"user:{user}", self.user_item, "for this user name"))
        return keys

    def check(self, client: str | None, user: str | None) -> None:
        for key, item, what in self._keys(client, user):
            if not self.limiter.test(item, "login", key):
                stats = self.limiter.get_window_stats(item, "login", key)
                wait = max(1, int(stats.reset_time - time.time()) + 1)
                raise TooManyRequests(f"too many failed logins {what}; try again in {wait} s",
                                      retry_after=wait)

    def failed(self, client: str | None, user: str | None) -> None:
        for key, item, _ in self._keys(client, user):
            self.limiter.hit(item, "login", key)


class AuthService:
    """Authentication and sessions on a :class:`Store`.

    Args:
        session_hours: how long a console login lasts.
        login_rate: failed-login limit (see :class:`LoginLimiter`).
    """

    def __init__(self, store: Store, session_hours: float = 12.0, login_rate: str = "10/5 minutes"):
        self.store = store
        self.session_lifetime = timedelta(hours=session_hours)
        self.limiter = LoginLimiter(login_rate)
        self.hasher = PasswordHasher()

    @functools.cached_property
    def _dummy_hash(self) -> str:
        """Verified against when a user does not exist, so both cases take as long. Made on
        first use: an Argon2 hash costs tens of milliseconds and 64 MiB, which every app (and
        every test building one) would otherwise pay without ever checking a password."""
        return self.hasher.hash(secrets.token_hex(16))

    # --- the first start ----------------------------------------------------------------------

    def bootstrap(self, admin_token: str | None = None) -> str | None:
        """On a store without users: create the site administrator ``admin`` (admin of the
        project ``default``) with one API token, and return that token (``admin_token`` when
        given, e.g. from a Kubernetes Secret; else a new one). Returns None when users exist.

        Raises:
            ValueError: ``admin_token`` is not a usable token: not ``rlark_`` + at least 32
                characters, or the placeholder of ``secret.example.yaml``.
        """
        if admin_token is not None and (not admin_token.startswith(TOKEN_PREFIX)
                                        or len(admin_token) < len(TOKEN_PREFIX) + 32
                                        or "CHANGE-ME" in admin_token or len(admin_token) > 200):
            raise ValueError(
                "RLARK_ADMIN_TOKEN must be 'rlark_' followed by at least 32 random characters, "
                "e.g. \"rlark_$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')\"")
        try:
            return self._create_admin(admin_token)
        except IntegrityError:  # another replica, starting at the same time, made it first
            return None

    def has_users(self) -> bool:
        """Whether any user exists (False: :meth:`bootstrap` would create the administrator)."""
        with self.store.session() as s:
            return s.scalar(select(UserRow.id).limit(1)) is not None

    def _create_admin(self, admin_token: str | None) -> str | None:
        with self.store.session() as s:
            if s.scalar(select(UserRow.id).limit(1)) is not None:
                return None
            project = s.scalar(select(ProjectRow).where(ProjectRow.name == DEFAULT_PROJECT))
            if project is None:
                project = ProjectRow(name=DEFAULT_PROJECT)
                s.add(project)
            user = UserRow(name=ADMIN_USER, is_admin=True)
            s.add(user)
            s.flush()
            s.add(MembershipRow(user_id=user.id, project_id=project.id, role=ProjectRole.admin))
            raw = admin_token or new_token()
            s.add(TokenRow(user_id=user.id, name="bootstrap", prefix=raw[:SHOWN_PREFIX],
                           digest=digest(raw)))
            audit.record(s, audit.SYSTEM, "user.create", target=ADMIN_USER,
                         detail="first start: site administrator with a bootstrap token")
        return raw

    # --- who is it ----------------------------------------------------------------------------------

    @staticmethod
    def _principal(s: Session, user: UserRow, via: str, **extra) -> Principal:
        rows = s.execute(
            select(ProjectRow.name, MembershipRow.role)
            .join(MembershipRow, MembershipRow.project_id == ProjectRow.id)
            .where(MembershipRow.user_id == user.id)).all()
        return Principal(name=user.name, user_id=user.id, is_admin=user.is_admin,
                         roles={p: r for p, r in rows}, via=via, **extra)

    def from_token(self, raw: str) -> Principal:
        """The user an API token belongs to.

        Raises:
            Unauthenticated: unknown, revoked or expired token, or a disabled user.
        """
        if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
            raise Unauthenticated("that is not an RLark API token (they start with 'rlark_'); "
                                  "`rlark token create` makes one")
        want = digest(raw)
        with self.store.session() as s:
            tok = s.scalar(select(TokenRow).where(TokenRow.digest == want)
                           .options(selectinload(TokenRow.user)))
            if tok is None or not hmac.compare_digest(tok.digest, want):
                raise Unauthenticated("unknown API token; `rlark login` stores a valid one")
            if tok.revoked_at is not None:
                raise Unauthenticated(f"API token {tok.prefix}... was revoked; create a new one")
            now = utcnow()
            if tok.expires_at is not None and tok.expires_at <= now:
                raise Unauthenticated(f"API token {tok.prefix}... expired at "
                                      f"{tok.expires_at.isoformat(timespec='seconds')}; create a new one")
            if tok.user.disabled:
                raise Unauthenticated(f"user {tok.user.name!r} is disabled")
            if tok.last_used_at is None or (now - tok.last_used_at).total_seconds() > LAST_USED_RESOLUTION:
                tok.last_used_at = now
            return self._principal(s, tok.user, "token", token_id=tok.id)

    def principal_for(self, user_id: int, via: str = "password") -> Principal:
        """The principal of a user already authenticated another way (a checked password).

        Raises:
            Unauthenticated: the user was deleted or disabled since (another request).
        """
        with self.store.session() as s:
            return self._principal(s, self._still_there(s, user_id), via)

    @staticmethod
    def _still_there(s: Session, user_id: int) -> UserRow:
        """The user of an authentication checked in an earlier session of this request.

        Raises:
            Unauthenticated: deleted or disabled meanwhile (by another request)."""
        user = s.get(UserRow, user_id)
        if user is None or user.disabled:
            raise Unauthenticated("your user was deleted or disabled meanwhile; log in again")
        return user

    def from_session(self, cookie: str) -> Principal:
        """The user a console session cookie belongs to.

        Raises:
            Unauthenticated: unknown or expired session, or a disabled user.
        """
        with self.store.session() as s:
            row = s.scalar(select(SessionRow).where(SessionRow.digest == digest(cookie))
                           .options(selectinload(SessionRow.user)))
            if row is None or row.expires_at <= utcnow():
                raise Unauthenticated("your console session has ended; log in again")
            if row.user.disabled:
                raise Unauthenticated(f"user {row.user.name!r} is disabled")
            return self._principal(s, row.user, "session", csrf=row.csrf)

    # --- logging in and out -----------------------------------------------------------------------

    def check_password(self, name: str, password: str, client: str | None) -> UserRow:
        """The user whose password this is (rate limited per client and per name).

        Raises:
            TooManyRequests: too many failed logins lately. Unauthenticated: wrong name or
                password, or a disabled user (the message does not say which).
        """
        name = name[:63]  # as stored; also keys the limit (else a longer tail would dodge it)
        self.limiter.check(client, name)
        with self.store.session() as s:
            user = s.scalar(select(UserRow).where(UserRow.name == name))
            stored = user.password_hash if user is not None and user.password_hash else self._dummy_hash
            try:
                self.hasher.verify(stored, password)  # a mismatch raises
                matches = True
            except (VerificationError, InvalidHashError):
                matches = False
            if matches and user is not None and user.password_hash and not user.disabled:
                return user
            # the name only when it is a user's (it may be a password typed there)
            audit.record(s, Actor(user.name if user is not None else ANONYMOUS, client),
                         "login.failed", outcome="failed",
                         detail="wrong password" if user is not None else "unknown user name")
        self.limiter.failed(client, name)
        raise Unauthenticated("wrong user name or password")

    def check_current_password(self, principal: Principal, password: str | None,
                               client: str | None) -> None:
        """Before ``principal`` changes their own password: the current one, checked as a login
        would be (rate limited per client and per name; a wrong one audited as
        ``user.password`` ``failed`` and counted), so a stolen token or a console left open is
        not enough to take the account's password over.

        Raises:
            TooManyRequests: too many failed attempts lately. Forbidden: none given, a wrong
                one, or the user has no password yet (a site administrator sets the first:
                anyone's, theirs too).
        """
        with self.store.session() as s:
            user = s.get(UserRow, principal.user_id) if principal.user_id is not None else None
            if user is not None and user.password_hash is None and principal.is_admin:
                return  # a site administrator sets anyone's first password, theirs too
            if user is None or user.password_hash is None:
                raise Forbidden("you have no password yet to change: a site administrator sets "
                                "the first one (`rlark user passwd NAME`)")
            if password is None:
                raise Forbidden("give your current password (`currentPassword`) to change it")
            self.limiter.check(client, principal.name)
            try:
                self.hasher.verify(user.password_hash, password)  # a mismatch raises
                return
            except (VerificationError, InvalidHashError):
                pass
            audit.record(s, Actor(user.name, client), "user.password", target=user.name,
                         outcome="failed", detail="wrong current password")
        self.limiter.failed(client, principal.name)
        raise Forbidden("the current password is wrong (failed attempts count as failed "
                        "logins)")

    def login(self, client: str | None, *, name: str = "", password: str = "",
              token: str = "") -> tuple[str, Principal]:
        """A console login with a password or an API token: ``(session cookie value,
        principal)``. Failed attempts are audited and rate limited.

        Raises:
            TooManyRequests, Unauthenticated: as :meth:`check_password` / :meth:`from_token`.
        """
        token_id: int | None = None
        user_id: int | None
        if token:
            self.limiter.check(client, None)
            try:
                by_token = self.from_token(token.strip())
            except Unauthenticated:
                self.limiter.failed(client, None)
                with self.store.session() as s:
                    audit.record(s, Actor(ANONYMOUS, client), "login.failed", outcome="failed",
                                 detail="invalid API token")
                raise
            user_id, token_id = by_token.user_id, by_token.token_id
        else:
            user_id = self.check_password(name.strip(), password, client).id
        cookie = secrets.token_urlsafe(32)
        with self.store.session() as s:
            s.execute(delete(SessionRow).where(SessionRow.expires_at <= utcnow()))
            # checked in an earlier session: another request may have deleted them since
            user = self._still_there(s, user_id) if user_id is not None else None
            if user is None:  # a token principal always has a user; never proceed without one
                raise Unauthenticated("this login has no user; log in again")
            expires = utcnow() + self.session_lifetime
            if token_id is not None:  # a session never outlives the token it was opened with
                tok = s.get(TokenRow, token_id)
                if tok is None or tok.revoked_at is not None:
                    raise Unauthenticated("the API token was revoked or deleted meanwhile; log in "
                                          "with a valid one")
                expires = min(expires, tok.expires_at) if tok.expires_at is not None else expires
            row = SessionRow(user_id=user_id, digest=digest(cookie), csrf=secrets.token_urlsafe(32),
                             expires_at=expires, token_id=token_id)
            s.add(row)
            audit.record(s, Actor(user.name, client), "login.ok",
                         detail="console login with " + ("an API token" if token else "a password"))
            principal = self._principal(s, user, "session", csrf=row.csrf)
        return cookie, principal

    def logout(self, cookie: str, client: str | None = None) -> None:
        """End a console session (its cookie no longer works)."""
        with self.store.session() as s:
            row = s.scalar(select(SessionRow).where(SessionRow.digest == digest(cookie))
                           .options(selectinload(SessionRow.user)))
            if row is not None:
                audit.record(s, Actor(row.user.name, client), "logout")
                s.delete(row)

    def hash_password(self, password: str) -> str:
        """An Argon2id hash of a new password.

        Raises:
            ValueError: shorter than :data:`MIN_PASSWORD_LENGTH` characters.
        """
        if len(password) < MIN_PASSWORD_LENGTH:
            raise ValueError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
        return self.hasher.hash(password)


def forbid_unless_admin(principal: Principal, what: str) -> None:
    """Site administrators only.

    Raises:
        Forbidden: the caller is not a site administrator.
    """
    if not principal.is_admin:
        raise Forbidden(f"only a site administrator may {what}")
