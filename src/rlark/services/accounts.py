"""Users, API tokens, projects and their members: what the ``user``, ``token`` and ``project``
commands, their API routes and the console's admin pages share.

Long because: users, tokens, projects and members are one permission model (who may do
what to whom); the routes, CLI and console call this one service for all of it.

Who may do what:

* a site administrator (``users.is_admin``) manages users, projects and every token, and is an
  admin in every project;
* a project's ``admin`` manages that project's members; ``member`` and ``viewer`` may list them;
* everyone manages their own tokens and password.

Every change is audited (:mod:`rlark.services.audit`) in its own transaction.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from rlark.record.build import iso
from rlark.services import audit, quotas
from rlark.services.auth import (
    DEFAULT_PROJECT,
    SHOWN_PREFIX,
    AuthService,
    Principal,
    authorize,
    digest,
    forbid_unless_admin,
    new_token,
    utcnow,
)
from rlark.services.errors import Conflict, Invalid, NotFound
from rlark.spec import DNS1123_LABEL
from rlark.store import (
    JobRow,
    MembershipRow,
    ProjectRole,
    ProjectRow,
    SessionRow,
    TokenRow,
    UserRow,
)

if TYPE_CHECKING:
    from rlark.runtimes.base import RuntimeProfile

USER_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
MAX_TOKEN_DAYS = 3650


def project_namespace(project: ProjectRow | str, explicit: str | None, server_namespace: str | None) -> str | None:
    """The Kubernetes namespace of a project's Pods: its own when set; else
    ``<server namespace>-<project>`` (``rlark-default`` for ``default``: no project shares the
    server's namespace, which holds RLark's own Secrets), cut at 63 characters; None when the
    server has no namespace (local runtime). The answer can still be the server's namespace (an
    explicit one, or a cut); :func:`check_not_server_namespace` refuses that."""
    name = project.name if isinstance(project, ProjectRow) else project
    if explicit:
        return explicit
    if server_namespace is None:
        return None
    return f"{server_namespace}-{name}"[:63].rstrip("-")


def check_not_server_namespace(project: str, namespace: str | None,
                               server_namespace: str | None) -> None:
    """Refuse a project whose Pods would run in the server's own namespace.

    Raises:
        Invalid: ``namespace`` is ``server_namespace``: every Pod there may name RLark's own
            Secrets (the database URL, the secret key, the admin token) in ``secretKeyRef``.
    """
    if server_namespace is not None and namespace == server_namespace:
        raise Invalid(f"project {project!r} would run its Pods in namespace {namespace!r}, the "
                      "RLark server's own, which holds RLark's Secrets (database URL, secret "
                      "key, admin token); give the project a namespace of its own "
                      f"(--namespace, e.g. {f'{server_namespace}-{project}'[:63]})")


def projects_in_namespace(s: Session, namespace: str, server_namespace: str | None) -> list[str]:
    """Names of the projects whose Runs go to ``namespace`` (:func:`project_namespace`)."""
    return sorted(p.name for p in s.scalars(select(ProjectRow))
                  if project_namespace(p, p.namespace, server_namespace) == namespace)


def check_projects_for(store: Any, server_namespace: str) -> None:
    """At a Kubernetes server's start: refuse to run while any project maps to the server's own
    namespace (one given with ``--namespace`` before this was refused).

    Raises:
        ValueError: naming each such project and the fix.
    """
    with store.session() as s:
        bad = projects_in_namespace(s, server_namespace, server_namespace)
    if bad:
        names = ", ".join(repr(n) for n in bad)
        raise ValueError(
            f"project{'s' if len(bad) > 1 else ''} {names} run{'' if len(bad) > 1 else 's'} "
            f"Pods in namespace {server_namespace!r}, this server's own, which holds RLark's "
            "Secrets (database URL, secret key, admin token) that any Pod there could name; "
            "run the server in a namespace of its own (--namespace / RLARK_NAMESPACE), or "
            "delete the project once its Jobs are gone and create it again with --namespace")


def user_view(u: UserRow, roles: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": u.name, "admin": u.is_admin, "disabled": u.disabled,
            "hasPassword": u.password_hash is not None, "createdAt": iso(u.created_at),
            "createdBy": u.created_by,
            "projects": roles if roles is not None else
            {m.project.name: m.role.value for m in u.memberships}}


def token_view(t: TokenRow) -> dict[str, Any]:
    now = utcnow()
    state = ("revoked" if t.revoked_at else
             "expired" if t.expires_at is not None and t.expires_at <= now else "active")
    return {"id": t.id, "name": t.name, "user": t.user.name, "prefix": t.prefix + "...",
            "state": state, "createdAt": iso(t.created_at), "expiresAt": iso(t.expires_at),
            "revokedAt": iso(t.revoked_at), "lastUsedAt": iso(t.last_used_at)}


def _check_name(kind: str, name: object, pattern: re.Pattern[str]) -> None:
    """Raises Invalid unless ``name`` (from a request body: any JSON value) is a valid name."""
    if not isinstance(name, str) or len(name) > 63 or not pattern.match(name):
        chars = "lower-case letters, digits, '-', '.' and '_'" if pattern is USER_NAME else \
            "lower-case letters, digits and '-'"
        raise Invalid(f"{kind} name {name!r} is not valid: use 1-63 {chars}, starting and ending "
                      "with a letter or digit")


class _NewToken(NamedTuple):
    raw: str  # the token itself, shown once
    row: TokenRow


class AccountService:
    """Users, tokens, projects and members on the :class:`AuthService`'s store.

    ``server_namespace``: the Kubernetes runtime's namespace (None on the local runtime), for
    :func:`project_namespace`. ``quota_defaults``: the server's per-project quotas.
    ``profile``: the server's runtime profile, for a project's queue (``queue_of``,
    ``check_queue``); None: no runtime with queues (a project's queue is refused).
    """

    def __init__(self, auth: AuthService, server_namespace: str | None = None,
                 quota_defaults: "quotas.Quotas | None" = None,
                 profile: "RuntimeProfile | None" = None):
        self.auth = auth
        self.store = auth.store
        self.server_namespace = server_namespace
        self.profile = profile
        #: the server's per-project quotas (JobService's), for the project views
        self.quota_defaults = quota_defaults or quotas.server_defaults()

    # --- lookups ----------------------------------------------------------------------------------

    @staticmethod
    def _user(s: Session, name: str) -> UserRow:
        user = s.scalar(select(UserRow).where(UserRow.name == name)) if USER_NAME.match(name or "") else None
        if user is None:
            raise NotFound(f"no user named {name!r}; `rlark user list` lists them")
        return user

    @staticmethod
    def project_row(s: Session, name: str) -> ProjectRow:
        """The project named ``name``.

        Raises:
            NotFound: no such project.
        """
        row = s.scalar(select(ProjectRow).where(ProjectRow.name == name)) if DNS1123_LABEL.match(name or "") else None
        if row is None:
            raise NotFound(f"no project named {name!r} that you can see; `rlark project list` shows yours")
        return row

    def namespace_of(self, project: ProjectRow) -> str | None:
        return project_namespace(project, project.namespace, self.server_namespace)

    @staticmethod
    def _enabled_admins(s: Session) -> int:
        return s.scalar(select(func.count()).select_from(UserRow)
                        .where(UserRow.is_admin.is_(True), UserRow.disabled.is_(False))) or 0

    # --- me -----------------------------------------------------------------------------------------

    def me(self, principal: Principal) -> dict[str, Any]:
        """The caller: name, site admin or not, how they authenticated (``tokenId``: the id of
        the API token used, if any), and their role per project (``{project: role}``; every
        project for a site administrator)."""
        with self.store.session() as s:
            if principal.is_admin:
                roles = {p: "admin" for p in s.scalars(select(ProjectRow.name).order_by(ProjectRow.name))}
            else:
                roles = {p: r.value for p, r in sorted(principal.roles.items())}
        return {"name": principal.name, "admin": principal.is_admin, "via": principal.via,
                "tokenId": principal.token_id, "projects": roles}

    # --- users ----------------------------------------------------------------------------------------

    def list_users(self, principal: Principal) -> list[dict[str, Any]]:
        forbid_unless_admin(principal, "list users")
        with self.store.session() as s:
            return [user_view(u) for u in s.scalars(select(UserRow).order_by(UserRow.name))]

    def get_user(self, principal: Principal, name: str) -> dict[str, Any]:
        if name != principal.name:
            forbid_unless_admin(principal, "see other users")
        with self.store.session() as s:
            return user_view(self._user(s, name))

    def create_user(self, principal: Principal, client: str | None, name: str, *,
                    admin: bool = False, password: str | None = None,
                    project: str | None = None, role: ProjectRole | None = None,
                    token_name: str | None = None) -> dict[str, Any]:
        """A new user, optionally with a role in ``project`` and a first API token (returned
        once as ``token``).

        Raises:
            Forbidden: the caller is not a site administrator. Invalid: a bad name or password.
            Conflict: the name is taken. NotFound: no such project.
        """
        forbid_unless_admin(principal, "create users")
        _check_name("user", name, USER_NAME)
        if (project is None) != (role is None):
            raise Invalid("give both a project and a role for the new user, or neither")
        pw_hash = self._password(password) if password is not None else None
        raw = None
        with self.store.session() as s:
            if s.scalar(select(UserRow.id).where(UserRow.name == name)) is not None:
                raise Conflict(f"a user named {name!r} exists")
            user = UserRow(name=name, is_admin=admin, password_hash=pw_hash, created_by=principal.name)
            s.add(user)
            s.flush()
            detail = "site administrator" if admin else "user"
            if project is not None and role is not None:  # both or neither (checked above)
                prow = self.project_row(s, project)
                s.add(MembershipRow(user_id=user.id, project_id=prow.id, role=role))
                detail += f", {role.value} of {project}"
            if token_name is not None:
                raw = self._add_token(s, user, token_name, None).raw
            audit.record(s, principal.actor(client), "user.create", target=name, detail=detail,
                         project=project)
            s.flush()
            s.refresh(user)
            out = user_view(user)
        if raw is not None:
            out["token"] = raw
        return out

    def update_user(self, principal: Principal, client: str | None, name: str, *,
                    disabled: bool | None = None, admin: bool | None = None,
                    password: str | None = None,
                    current_password: str | None = None) -> dict[str, Any]:
        """Disable or enable a user, make or unmake a site administrator (site administrators
        only), or set a password: your own with ``current_password`` (checked as a login is:
        :meth:`AuthService.check_current_password`), anyone else's as site administrator
        without theirs. Disabling a user also ends their console sessions (their tokens stop
        working while disabled).

        Raises:
            Forbidden, NotFound, Invalid, TooManyRequests; Conflict: it would leave no enabled
            site administrator.
        """
        own = name == principal.name and principal.user_id is not None
        if not own or disabled is not None or admin is not None:
            forbid_unless_admin(principal, "change other users, or anyone's admin or disabled state")
        pw_hash = self._password(password) if password is not None else None
        if pw_hash is not None and own:
            self.auth.check_current_password(principal, current_password, client)
        with self.store.session() as s:
            user = self._user(s, name)
            changes = []
            if disabled is not None and disabled != user.disabled:
                user.disabled = disabled
                changes.append("disabled" if disabled else "enabled")
            if admin is not None and admin != user.is_admin:
                user.is_admin = admin
                changes.append("made site administrator" if admin else "no longer site administrator")
            if pw_hash is not None:
                changes.append("password set by a site administrator" if not own
                               else "first password set" if user.password_hash is None
                               else "password changed (current password given)")
                user.password_hash = pw_hash
                # console sessions opened with the old password end (tokens stay: revoke them)
                s.execute(delete(SessionRow).where(SessionRow.user_id == user.id,
                                                   SessionRow.token_id.is_(None)))
            s.flush()
            if self._enabled_admins(s) == 0:
                raise Conflict("that would leave no enabled site administrator; make another "
                               "user an administrator first")
            if disabled:
                s.execute(delete(SessionRow).where(SessionRow.user_id == user.id))
            if changes:
                audit.record(s, principal.actor(client), "user.update", target=name,
                             detail=", ".join(changes))
            return user_view(user)

    def delete_user(self, principal: Principal, client: str | None, name: str) -> dict[str, Any]:
        """Delete a user with their tokens, sessions and memberships (audit entries stay).

        Raises:
            Forbidden, NotFound; Conflict: it is the caller, or the last site administrator.
        """
        forbid_unless_admin(principal, "delete users")
        if name == principal.name:
            raise Conflict("you cannot delete yourself; another site administrator can")
        with self.store.session() as s:
            user = self._user(s, name)
            s.delete(user)
            s.flush()
            if self._enabled_admins(s) == 0:
                raise Conflict("that would leave no enabled site administrator")
            audit.record(s, principal.actor(client), "user.delete", target=name)
        return {"name": name, "deleted": True}

    def _password(self, password: str) -> str:
        try:
            return self.auth.hash_password(password)
        except ValueError as exc:
            raise Invalid(f"password: {exc}") from None

    # --- tokens ---------------------------------------------------------------------------------------

    @staticmethod
    def _add_token(s: Session, user: UserRow, name: str, expires_in_days: int | None) -> _NewToken:
        """A new token row of ``user`` added to ``s`` with the raw token (shown once).

        Raises:
            Invalid: a bad name or lifetime.
        """
        name = (name or "").strip()
        # control and format characters (e.g. U+202E, which reverses how a list shows the name)
        if not name or len(name) > 63 or any(unicodedata.category(c) in ("Cc", "Cf") for c in name):
            raise Invalid(f"token name {name!r} is not valid: 1-63 printable characters")
        if expires_in_days is not None and not 1 <= expires_in_days <= MAX_TOKEN_DAYS:
            raise Invalid(f"expiresInDays = {expires_in_days}: use 1 to {MAX_TOKEN_DAYS} days, "
                          "or leave it out for a token that does not expire")
        raw = new_token()
        expires = utcnow() + timedelta(days=expires_in_days) if expires_in_days else None
        row = TokenRow(user_id=user.id, name=name, prefix=raw[:SHOWN_PREFIX], digest=digest(raw),
                       expires_at=expires)
        s.add(row)
        return _NewToken(raw, row)

    def create_token(self, principal: Principal, client: str | None, name: str, *,
                     expires_in_days: int | None = None, user: str | None = None) -> dict[str, Any]:
        """A new API token for the caller (or, for a site administrator, for ``user``); the
        answer's ``token`` is the only time it is shown.

        Raises:
            Forbidden, NotFound, Invalid.
        """
        owner = user or principal.name
        if owner != principal.name:
            forbid_unless_admin(principal, "create tokens for other users")
        if principal.user_id is None and owner == principal.name:
            raise Invalid("this server runs without authentication; it has no users to make tokens for")
        with self.store.session() as s:
            row = self._user(s, owner)
            raw, tok = self._add_token(s, row, name, expires_in_days)
            s.flush()  # tok.id
            audit.record(s, principal.actor(client), "token.create", target=f"{owner}/{tok.name}",
                         detail=f"token {tok.prefix}... (id {tok.id})"
                         + (f", expires in {expires_in_days} days" if expires_in_days else ""))
            out = token_view(tok)
        out["token"] = raw
        return out

    def list_tokens(self, principal: Principal, user: str | None = None,
                    all_users: bool = False) -> list[dict[str, Any]]:
        """The caller's tokens; a site administrator's ``user``'s, or everyone's."""
        if all_users or (user and user != principal.name):
            forbid_unless_admin(principal, "list other users' tokens")
        with self.store.session() as s:
            stmt = select(TokenRow).join(UserRow, UserRow.id == TokenRow.user_id)
            if not all_users:
                stmt = stmt.where(UserRow.name == (user or principal.name))
            return [token_view(t) for t in s.scalars(stmt.order_by(TokenRow.id))]

    def revoke_token(self, principal: Principal, client: str | None, token_id: int) -> dict[str, Any]:
        """Revoke a token (yours, or anyone's as site administrator); idempotent.

        Raises:
            NotFound: no such token among those the caller may see.
        """
        with self.store.session() as s:
            tok = s.get(TokenRow, token_id)
            if tok is None or (tok.user_id != principal.user_id and not principal.is_admin):
                raise NotFound(f"no token with id {token_id} among yours; `rlark token list` shows them")
            if tok.revoked_at is None:
                tok.revoked_at = utcnow()
                # console sessions opened with this token end with it
                s.execute(delete(SessionRow).where(SessionRow.token_id == tok.id))
                audit.record(s, principal.actor(client), "token.revoke",
                             target=f"{tok.user.name}/{tok.name}", detail=f"token {tok.prefix}... (id {tok.id})")
            return token_view(tok)

    # --- projects ---------------------------------------------------------------------------------------

    def _project_view(self, s: Session, p: ProjectRow, role: str | None,
                      members: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": p.name, "namespace": self.namespace_of(p), "role": role,
                              "createdAt": iso(p.created_at), "createdBy": p.created_by,
                              "jobs": s.scalar(select(func.count()).select_from(JobRow)
                                               .where(JobRow.project_id == p.id)),
                              "quotas": quotas.effective(p, self.quota_defaults).view(),
                              "quotasSet": {k: v for k, v in (p.quotas or {}).items() if v is not None},
                              "usage": quotas.usage(s, p.id),
                              "queue": self.profile.queue_of(p.queue) if self.profile else None,
                              "queueSet": p.queue}
        if members:
            out["members"] = [{"user": m.user.name, "role": m.role.value}
                              for m in sorted(p.memberships, key=lambda m: m.user.name)]
        return out

    def list_projects(self, principal: Principal) -> list[dict[str, Any]]:
        """The projects the caller has a role in (every project for a site administrator)."""
        with self.store.session() as s:
            rows = s.scalars(select(ProjectRow).order_by(ProjectRow.name)).all()
            roles = {p.name: principal.role_in(p.name) for p in rows}
            return [self._project_view(s, p, role.value)
                    for p in rows if (role := roles[p.name]) is not None]

    def get_project(self, principal: Principal, name: str) -> dict[str, Any]:
        """A project with its members (any role in it may read this).

        Raises:
            NotFound: no such project, or the caller has no role in it.
        """
        role = authorize(principal, name, ProjectRole.viewer)
        with self.store.session() as s:
            return self._project_view(s, self.project_row(s, name), role.value, members=True)

    def _check_queue(self, queue: str) -> str:
        try:
            if self.profile is None:
                raise ValueError("this server's runtime has no queues")
            return self.profile.check_queue(queue)
        except ValueError as exc:
            raise Invalid(f"queue {queue!r}: {exc}") from None

    def create_project(self, principal: Principal, client: str | None, name: str,
                       namespace: str | None = None, queue: str | None = None) -> dict[str, Any]:
        """A new project (site administrators only). ``namespace``: its Kubernetes namespace
        (default: see :func:`project_namespace`); no two projects share one, and none is the
        server's own (:func:`check_not_server_namespace`). ``queue``: the queue its Runs wait in
        (Kubernetes: a Kueue LocalQueue of its namespace; ``none``: none; None: the server's,
        ``--k8s-queue``).

        Raises:
            Forbidden, Invalid, Conflict.
        """
        forbid_unless_admin(principal, "create projects")
        _check_name("project", name, DNS1123_LABEL)
        if queue is not None:
            queue = self._check_queue(queue)
        if namespace is not None:
            _check_name("namespace", namespace, DNS1123_LABEL)
            if namespace.startswith("kube-"):
                raise Invalid(f"namespace {namespace!r} belongs to Kubernetes itself; give the "
                              "project a namespace of its own")
        check_not_server_namespace(name, project_namespace(name, namespace, self.server_namespace),
                                   self.server_namespace)
        with self.store.session() as s:
            if s.scalar(select(ProjectRow.id).where(ProjectRow.name == name)) is not None:
                raise Conflict(f"a project named {name!r} exists")
            wanted = project_namespace(name, namespace, self.server_namespace)
            if wanted is not None:
                for other in s.scalars(select(ProjectRow)):
                    if self.namespace_of(other) == wanted:
                        raise Conflict(f"namespace {wanted!r} already belongs to project {other.name!r}; "
                                       "give this project its own namespace (--namespace)")
            row = ProjectRow(name=name, namespace=namespace, queue=queue, created_by=principal.name)
            s.add(row)
            s.flush()
            detail = ", ".join(x for x in (f"namespace {wanted}" if wanted else "",
                                           f"queue {queue}" if queue else "") if x)
            audit.record(s, principal.actor(client), "project.create", project=name, target=name,
                         detail=detail)
            return self._project_view(s, row, "admin", members=True)

    def set_queue(self, principal: Principal, client: str | None, name: str,
                  queue: str | None) -> dict[str, Any]:
        """Set the queue a project's new Runs wait in (site administrators only): a name (on
        Kubernetes a Kueue LocalQueue of the project's namespace), ``none`` for none, None for
        the server's (``--k8s-queue``). Runs already queued stay where they are.

        Raises:
            Forbidden, NotFound, Invalid (a bad name; a runtime without queues).
        """
        forbid_unless_admin(principal, "set a project's queue")
        if queue is not None:
            queue = self._check_queue(queue)
        with self.store.session() as s:
            row = self.project_row(s, name)
            row.queue = queue
            audit.record(s, principal.actor(client), "project.queue", project=name, target=name,
                         detail=queue or "the server's")
            s.flush()
            return self._project_view(s, row, "admin", members=True)

    def set_quotas(self, principal: Principal, client: str | None, name: str,
                   values: dict[str, Any]) -> dict[str, Any]:
        """Set a project's own quotas (site administrators only): ``{"maxJobs": n,
        "maxActiveWorkers": n}``, a quota left out unchanged, None back to the server's default.
        Lowering a quota below the use stops nothing; it refuses what would go further.

        Raises:
            Forbidden, NotFound, Invalid (an unknown quota or a bad value).
        """
        forbid_unless_admin(principal, "set quotas")
        given = quotas.check_overrides(values)
        with self.store.session() as s:
            row = self.project_row(s, name)
            own = {**(row.quotas or {}), **given}
            row.quotas = {k: v for k, v in own.items() if v is not None} or None
            audit.record(s, principal.actor(client), "project.quota", project=name, target=name,
                         detail=", ".join(f"{k}={'default' if v is None else v}" for k, v in given.items()))
            s.flush()
            return self._project_view(s, row, "admin", members=True)

    def delete_project(self, principal: Principal, client: str | None, name: str) -> dict[str, Any]:
        """Delete an empty project (site administrators only; never ``default``).

        Raises:
            Forbidden, NotFound; Conflict: it still has Jobs, or it is ``default``.
        """
        forbid_unless_admin(principal, "delete projects")
        with self.store.session() as s:
            row = self.project_row(s, name)
            if name == DEFAULT_PROJECT:
                raise Conflict("the project 'default' cannot be deleted")
            jobs = s.scalar(select(func.count()).select_from(JobRow).where(JobRow.project_id == row.id))
            if jobs:
                raise Conflict(f"project {name!r} still has {jobs} Job{'s' if jobs != 1 else ''}; "
                               "delete them first")
            s.delete(row)
            audit.record(s, principal.actor(client), "project.delete", project=name, target=name)
        return {"name": name, "deleted": True}

    def set_member(self, principal: Principal, client: str | None, project: str, user: str,
                   role: ProjectRole) -> dict[str, Any]:
        """Give ``user`` ``role`` in ``project`` (project admins and site administrators).

        Raises:
            NotFound, Forbidden.
        """
        own = authorize(principal, project, ProjectRole.admin)
        with self.store.session() as s:
            prow = self.project_row(s, project)
            urow = self._user(s, user)
            m = s.scalar(select(MembershipRow).where(MembershipRow.user_id == urow.id,
                                                     MembershipRow.project_id == prow.id))
            before = m.role.value if m is not None else None
            if m is None:
                s.add(MembershipRow(user_id=urow.id, project_id=prow.id, role=role))
            else:
                m.role = role
            if before != role.value:
                audit.record(s, principal.actor(client), "member.set", project=project, target=user,
                             detail=f"{before or 'no role'} -> {role.value}")
            s.flush()
            s.refresh(prow)
            return self._project_view(s, prow, own.value, members=True)

    def remove_member(self, principal: Principal, client: str | None, project: str,
                      user: str) -> dict[str, Any]:
        """Take ``user``'s role in ``project`` away (project admins and site administrators).

        Raises:
            NotFound: no such project or user, or the user has no role there. Forbidden.
        """
        own = authorize(principal, project, ProjectRole.admin)
        with self.store.session() as s:
            prow = self.project_row(s, project)
            urow = self._user(s, user)
            m = s.scalar(select(MembershipRow).where(MembershipRow.user_id == urow.id,
                                                     MembershipRow.project_id == prow.id))
            if m is None:
                raise NotFound(f"user {user!r} has no role in project {project!r}")
            audit.record(s, principal.actor(client), "member.remove", project=project, target=user,
                         detail=f"was {m.role.value}")
            s.delete(m)
            s.flush()
            s.refresh(prow)
            return self._project_view(s, prow, own.value, members=True)

    # --- audit --------------------------------------------------------------------------------------------

    def audit(self, principal: Principal, *, project: str | None = None, actor: str | None = None,
              action: str | None = None, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """Audit entries, newest first. Site administrators see everything; a project admin
        sees the entries of the projects they administer (``project`` narrows it).

        Raises:
            NotFound, Forbidden: ``project`` is not one the caller administers; Forbidden: a
                caller who administers nothing.
        """
        if project is not None:
            authorize(principal, project, ProjectRole.admin)
        if principal.is_admin:
            visible = None
        else:
            visible = [p for p, r in principal.roles.items() if r == ProjectRole.admin]
            if not visible:
                forbid_unless_admin(principal, "read the audit log (project admins see their projects')")
        with self.store.session() as s:
            return audit.query(s, projects=visible, project=project, actor=actor, action=action,
                               limit=limit, offset=offset)
