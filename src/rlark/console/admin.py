"""The console's pages for people and access: users (site administrators), projects and their
members (site administrators create and delete projects; a project's admins manage its
members), the caller's own API tokens, and the audit log.

Every change goes through :class:`AccountService`, which authorizes and audits it; the routes
parse the form, call it, and render. A new API token is shown once, in the answer to the form
that made it (never in a notice cookie, never again).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypedDict
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rlark.api.security import Access, ProjectAccess, allow_admin, allow_project, allow_user
from rlark.console.i18n import Translator
from rlark.console.pages import (
    _accepted_form,
    _flash,
    _int,
    _locale,
    _redirect,
    _refuse,
    _render,
    _text,
)
from rlark.services.accounts import MAX_TOKEN_DAYS, AccountService
from rlark.services.errors import ServiceError
from rlark.store import ProjectRole

router = APIRouter(include_in_schema=False)
Admin = Annotated[Access, allow_admin()]
User = Annotated[Access, allow_user()]
ProjectAdmin = Annotated[ProjectAccess, allow_project(ProjectRole.admin, in_path=True)]

ROLES = [r.value for r in ProjectRole]
AUDIT_PAGE = 100
#: action prefixes offered by the audit page's filter
AUDIT_ACTIONS = ("job.", "user.", "token.", "project.", "member.", "login.", "logout",
                 "request.denied")
#: what each user button asks of :meth:`AccountService.update_user`, and the notice it leaves
class _UserChange(TypedDict, total=False):
    """What one action of the Users page changes (keywords of AccountService.update_user)."""

    disabled: bool
    admin: bool


USER_UPDATES: dict[str, tuple[_UserChange, str]] = {
    "disable": ({"disabled": True}, "flash.userDisabled"),
    "enable": ({"disabled": False}, "flash.userEnabled"),
    "admin": ({"admin": True}, "flash.userAdmin"),
    "unadmin": ({"admin": False}, "flash.userNotAdmin"),
}


def _accounts(request: Request) -> AccountService:
    return request.app.state.accounts


def _t(request: Request, key: str, **args: Any) -> str:
    return Translator(_locale(request))(key, **args)


def _role(value: str | None) -> ProjectRole | None:
    return ProjectRole(value) if value in ROLES else None


# --- users ---------------------------------------------------------------------------------------


def _users_page(request: Request, access: Access, status: int = 200, **extra: Any) -> Response:
    svc = _accounts(request)
    ctx: dict[str, Any] = {"error": None, "form": {}, "new_token": None, "new_user": None}
    ctx.update(extra)
    return _render(request, "admin_users.html", status, users=svc.list_users(access.principal),
                   all_projects=[p["name"] for p in svc.list_projects(access.principal)],
                   roles=ROLES, **ctx)


@router.get("/admin/users")
def users_page(request: Request, access: Admin) -> Response:
    return _users_page(request, access)


@router.post("/admin/users")
async def create_user(request: Request, access: Admin) -> Response:
    """Create a user: optionally a site administrator, with a password, a role in a project and
    a first API token (shown once, on the page this answers with)."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    project = _text(form.get("project"), 63) or None
    role = (_role(form.get("role")) or ProjectRole.member) if project else None
    try:
        user = await run_in_threadpool(lambda: _accounts(request).create_user(
            access.principal, access.client, _text(form.get("name"), 63),
            admin=form.get("admin") == "1", password=form.get("password") or None,
            project=project, role=role,
            token_name="console" if form.get("token") == "1" else None))
    except ServiceError as exc:
        failed = exc  # the lambda runs in a thread; name the error outside the except scope
        return await run_in_threadpool(lambda: _users_page(
            request, access, failed.status, error=failed.message,
            form={k: v for k, v in form.items() if k != "password"}))
    if "token" in user:
        return await run_in_threadpool(lambda: _users_page(
            request, access, 200, new_token=user["token"], new_user=user["name"]))
    return _flash(_redirect(request, "/admin/users"), "ok", "flash.userCreated", name=user["name"])


@router.post("/admin/users/{name}/{action}")
async def user_action(request: Request, name: str, action: str, access: Admin) -> Response:
    """Disable, enable, make or unmake a site administrator, or delete a user."""
    if action not in USER_UPDATES and action != "delete":
        return _refuse(request, 404, "error.noPage")
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    svc = _accounts(request)
    try:
        if action == "delete":
            await run_in_threadpool(svc.delete_user, access.principal, access.client, name)
            key = "flash.userDeleted"
        else:
            changes, key = USER_UPDATES[action]
            await run_in_threadpool(lambda: svc.update_user(access.principal, access.client, name,
                                                            **changes))
    except ServiceError as exc:
        return _flash(_redirect(request, "/admin/users"), "error", text=exc.message)
    return _flash(_redirect(request, "/admin/users"), "ok", key, name=name)


# --- projects and members -------------------------------------------------------------------------


def _projects_page(request: Request, access: Access, status: int = 200, **extra: Any) -> Response:
    svc = _accounts(request)
    projects = [svc.get_project(access.principal, p["name"])
                for p in svc.list_projects(access.principal)]
    ctx: dict[str, Any] = {"error": None, "form": {}}
    ctx.update(extra)
    profile = svc.profile
    return _render(request, "admin_projects.html", status, all_projects=projects, roles=ROLES,
                   queues=bool(profile is not None and profile.queues), **ctx)


@router.get("/admin/projects")
def projects_page(request: Request, access: User) -> Response:
    """The caller's projects with their members; forms for what the caller may change."""
    return _projects_page(request, access)


@router.post("/admin/projects")
async def create_project(request: Request, access: Admin) -> Response:
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    name = _text(form.get("name"), 63)
    try:
        await run_in_threadpool(_accounts(request).create_project, access.principal,
                                access.client, name, _text(form.get("namespace"), 63) or None,
                                _text(form.get("queue"), 63) or None)
    except ServiceError as exc:
        failed = exc  # the lambda runs in a thread; name the error outside the except scope
        return await run_in_threadpool(lambda: _projects_page(
            request, access, failed.status, error=failed.message, form=form))
    return _flash(_redirect(request, "/admin/projects"), "ok", "flash.projectCreated", name=name)


@router.post("/admin/projects/{project}/queue")
async def set_queue(request: Request, project: str, access: Admin) -> Response:
    """Set the queue the project's new Runs wait in (empty: the server's)."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    queue = _text(dict(pairs).get("queue"), 63) or None
    back = _redirect(request, "/admin/projects")
    try:
        await run_in_threadpool(_accounts(request).set_queue, access.principal, access.client,
                                project, queue)
    except ServiceError as exc:
        return _flash(back, "error", text=exc.message)
    return _flash(back, "ok", "flash.queueSet", project=project, queue=queue or "—")


@router.post("/admin/projects/{project}/delete")
async def delete_project(request: Request, project: str, access: Admin) -> Response:
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    try:
        await run_in_threadpool(_accounts(request).delete_project, access.principal,
                                access.client, project)
    except ServiceError as exc:
        return _flash(_redirect(request, "/admin/projects"), "error", text=exc.message)
    return _flash(_redirect(request, "/admin/projects"), "ok", "flash.projectDeleted", name=project)


@router.post("/admin/projects/{project}/members")
async def set_member(request: Request, project: str, access: ProjectAdmin) -> Response:
    """Give a user a role in the project (a new member, or a new role)."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    user = _text(form.get("user"), 63)
    role = _role(form.get("role"))
    back = _redirect(request, "/admin/projects")
    if role is None:
        return _flash(back, "error", "flash.noRole")
    try:
        await run_in_threadpool(_accounts(request).set_member, access.principal, access.client,
                                project, user, role)
    except ServiceError as exc:
        return _flash(back, "error", text=exc.message)
    return _flash(back, "ok", "flash.memberSet", name=user, project=project, role=role.value)


@router.post("/admin/projects/{project}/members/{user}/remove")
async def remove_member(request: Request, project: str, user: str,
                        access: ProjectAdmin) -> Response:
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    back = _redirect(request, "/admin/projects")
    try:
        await run_in_threadpool(_accounts(request).remove_member, access.principal,
                                access.client, project, user)
    except ServiceError as exc:
        return _flash(back, "error", text=exc.message)
    return _flash(back, "ok", "flash.memberRemoved", name=user, project=project)


# --- the caller's API tokens ----------------------------------------------------------------------


def _tokens_page(request: Request, access: Access, status: int = 200, **extra: Any) -> Response:
    ctx: dict[str, Any] = {"error": None, "form": {}, "new_token": None}
    ctx.update(extra)
    return _render(request, "tokens.html", status,
                   tokens=_accounts(request).list_tokens(access.principal),
                   max_days=MAX_TOKEN_DAYS, **ctx)


@router.get("/tokens")
def tokens_page(request: Request, access: User) -> Response:
    return _tokens_page(request, access)


@router.post("/tokens")
async def create_token(request: Request, access: User) -> Response:
    """A new API token of the caller's, with an optional expiry in days; shown once."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    days_text = _text(form.get("days"), 10)
    days = _int(days_text, None, lo=1, hi=MAX_TOKEN_DAYS) if days_text else None
    if days_text and days is None:
        return await run_in_threadpool(lambda: _tokens_page(
            request, access, 422, error=_t(request, "tokens.badDays", max=MAX_TOKEN_DAYS),
            form=form))
    try:
        made = await run_in_threadpool(lambda: _accounts(request).create_token(
            access.principal, access.client, _text(form.get("name"), 63), expires_in_days=days))
    except ServiceError as exc:
        failed = exc  # the lambda runs in a thread; name the error outside the except scope
        return await run_in_threadpool(lambda: _tokens_page(
            request, access, failed.status, error=failed.message, form=form))
    return await run_in_threadpool(lambda: _tokens_page(request, access, 200, new_token=made))


@router.post("/tokens/{token_id}/revoke")
async def revoke_token(request: Request, token_id: str, access: User) -> Response:
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    back = _redirect(request, "/tokens")
    number = _int(token_id)
    if number is None:
        return _flash(back, "error", "flash.noToken")
    try:
        tok = await run_in_threadpool(_accounts(request).revoke_token, access.principal,
                                      access.client, number)
    except ServiceError as exc:
        return _flash(back, "error", text=exc.message)
    return _flash(back, "ok", "flash.tokenRevoked", name=tok["name"])


# --- audit ------------------------------------------------------------------------------------------


@router.get("/admin/audit")
def audit_page(request: Request, access: User, project: str | None = None,
               user: str | None = None, action: str | None = None,
               page: str | None = None) -> Response:
    """The audit log, newest first: everything for site administrators, their projects'
    entries for project admins (the service refuses anyone else: 403)."""
    project = _text(project, 63) or None
    user = _text(user, 63) or None
    action = _text(action, 32)
    action = action if re.fullmatch(r"[a-z._]+", action) else None
    page_n = _int(page, 1) or 1
    data = _accounts(request).audit(access.principal, project=project, actor=user, action=action,
                                    limit=AUDIT_PAGE + 1, offset=(page_n - 1) * AUDIT_PAGE)
    items = data["items"]
    params = {k: v for k, v in (("project", project), ("user", user), ("action", action)) if v}
    me = _accounts(request).me(access.principal)
    administered = sorted(p for p, r in me["projects"].items() if r == ProjectRole.admin.value)
    return _render(request, "admin_audit.html", entries=items[:AUDIT_PAGE],
                   has_next=len(items) > AUDIT_PAGE, page=page_n,
                   page_url=lambda n: "/admin/audit?" + urlencode({**params, "page": n}),
                   f_project=project or "", f_user=user or "", f_action=action or "",
                   administered=administered, actions=AUDIT_ACTIONS)
