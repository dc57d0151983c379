"""Logging in and out of the console, and its project switcher.

``POST /login`` trades a user name and password, or an API token, for a console session
(:meth:`AuthService.login`: audited, rate limited); the session's cookie is ``HttpOnly``,
``SameSite=Lax`` and ``Secure`` over TLS, and its CSRF token goes into every form the console
renders (:func:`rlark.console.pages.csrf_ok` checks it).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from rlark.api.security import (
    PROJECT_COOKIE,
    SESSION_COOKIE,
    ProjectAccess,
    allow_project,
    allow_public,
    allow_user,
)
from rlark.console.i18n import Translator
from rlark.console.pages import (
    _accepted_form,
    _flash,
    _form,
    _locale,
    _BadForm,
    _refuse,
    _render,
    _safe_next,
    principal_of_page,
)
from rlark.services.auth import DEFAULT_PROJECT, AuthService, Principal
from rlark.services.errors import TooManyRequests, Unauthenticated
from rlark.store import ProjectRole

router = APIRouter(include_in_schema=False)
#: how long the switcher's choice is kept
PROJECT_COOKIE_DAYS = 365
#: where the first start writes the site administrator's token (said on the login page)
CREDENTIALS_PATH = "$RLARK_HOME/credentials"


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def secure_cookie(request: Request) -> bool:
    """Whether cookies get ``Secure``: as the policy says (``secure_cookies``), by default when
    the request came over HTTPS (directly, or through a proxy uvicorn trusts)."""
    wanted = request.app.state.policy.secure_cookies
    if wanted is not None:
        return bool(wanted)
    return request.url.scheme == "https"


def _login_page(request: Request, status: int = 200, error: str | None = None,
                name: str = "", next_url: str = "/jobs") -> Response:
    """The login form; ``error``: what went wrong, already in the page's language."""
    return _render(request, "login.html", status, error=error, login_name=name,
                   next_url=_safe_next(next_url, "/jobs"), credentials_path=CREDENTIALS_PATH)


@router.get("/login", dependencies=[allow_public()])
def login_page(request: Request, next: str | None = None) -> Response:
    """The login form; someone already logged in (or a server without authentication) goes on
    to ``next``."""
    principal = principal_of_page(request)
    if principal is not None or not request.app.state.policy.auth:
        return RedirectResponse(_safe_next(next, "/jobs"), status_code=303)
    return _login_page(request, next_url=next or "/jobs")


@router.post("/login", dependencies=[allow_public()])
async def login(request: Request) -> Response:
    """Start a console session: 303 to ``next`` with the session cookie; the form again with
    an error (401) when the name, password or token do not hold; 429 with ``Retry-After`` after
    too many failed attempts."""
    try:
        form = dict(await _form(request))
    except _BadForm:
        return _refuse(request, 413, "error.formTooLarge")
    next_url = _safe_next(form.get("next"), "/jobs")
    if not request.app.state.policy.auth:
        return RedirectResponse(next_url, status_code=303)
    name = form.get("user", "")[:63]
    t = Translator(_locale(request))
    auth: AuthService = request.app.state.auth
    try:
        cookie, principal = await run_in_threadpool(
            lambda: auth.login(_client(request), name=name, password=form.get("password", "")[:1024],
                               token=form.get("token", "")[:200]))
    except TooManyRequests as exc:
        text = t("login.tooMany", seconds=exc.retry_after)
        resp = _login_page(request, 429, text, name, next_url)
        resp.headers["Retry-After"] = str(exc.retry_after)
        return resp
    except Unauthenticated:
        text = t("login.badToken") if form.get("token") else t("login.failed")
        return _login_page(request, 401, text, name, next_url)
    resp = RedirectResponse(next_url, status_code=303)
    resp.set_cookie(SESSION_COOKIE, cookie, max_age=int(auth.session_lifetime.total_seconds()),
                    path="/", httponly=True, samesite="lax", secure=secure_cookie(request))
    project = _landing_project(principal, request.cookies.get(PROJECT_COOKIE))
    if project is not None:
        _set_project(request, resp, project)
    return resp


def _landing_project(principal: Principal, current: str | None) -> str | None:
    """The project to switch to after a login: None to stay on the current one (or
    ``default``) when the user has a role there, else the first of theirs."""
    if principal.role_in(current or DEFAULT_PROJECT) is not None or not principal.roles:
        return None
    return sorted(principal.roles)[0]


def _set_project(request: Request, resp: Response, project: str) -> None:
    resp.set_cookie(PROJECT_COOKIE, project, max_age=PROJECT_COOKIE_DAYS * 24 * 3600, path="/",
                    httponly=True, samesite="lax", secure=secure_cookie(request))


@router.post("/logout", dependencies=[allow_user()])
async def logout(request: Request) -> Response:
    """End the console session (its cookie stops working) and go to the login page."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        auth: AuthService = request.app.state.auth
        await run_in_threadpool(auth.logout, cookie, _client(request))
    resp = _flash(RedirectResponse("/login", status_code=303), "ok", "flash.loggedOut")
    resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax",
                       secure=secure_cookie(request))
    return resp


@router.get("/project")
def switch_project(request: Request,
                   access: Annotated[ProjectAccess,
                                     allow_project(ProjectRole.viewer, console=True)]) -> Response:
    """The project switcher: remember ``?project=`` (one the caller has a role in; else the
    not-found page) and show its Jobs."""
    resp = RedirectResponse("/jobs", status_code=303)
    _set_project(request, resp, access.project)
    return resp
