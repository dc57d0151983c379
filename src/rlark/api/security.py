"""Request hygiene and authentication for every route, and the authorization rules routes declare.

:class:`RequestGuard` (ASGI middleware) runs before any route, in this order:

1. ``Host`` must be on the allow-list (loopback names by default): a page on a name that resolves
   to this server (DNS rebinding) gets nowhere. ``/healthz`` too: a probe names an allowed host.
2. State-changing methods refuse cross-site requests (:func:`cross_site_reason`, the one
   cross-site check of the API and the console's forms alike): ``Sec-Fetch-Site`` other than
   ``same-origin``/``none``, an ``Origin`` other than this server's (a configured CORS origin
   only with an ``Authorization`` header), or ``Origin: null``.
3. API request bodies must be JSON or YAML (a browser cannot send those cross-site without a CORS
   preflight, which RLark never grants unless configured to).
4. Authentication: ``Authorization: Bearer <API token>``, or the console's session cookie. The
   cookie is accepted by the console and by the API's read-only (GET/HEAD) routes only, so no
   state-changing API call can ride on a browser's cookie. Only :data:`PUBLIC_PATHS` pass
   without; others get 401 (API, as JSON) or a redirect to the login page (console). When the
   database does not answer, credentials cannot be checked: the request goes on without a
   caller and the route's access rule answers 503 (:func:`principal_of`), not a 401.
5. Every response it lets out, refusals included, carries :data:`SECURITY_HEADERS` (a
   response that sets its own ``Content-Security-Policy``, such as the API docs pages, keeps
   it).

Routes then declare who may call them with one of :func:`allow_public`, :func:`allow_user`,
:func:`allow_project` (viewer / member / admin of the project named by the ``project`` query or
path parameter) and :func:`allow_admin`; the app refuses to start with a route that declares
nothing (:func:`check_every_route_has_a_rule`).
"""

from __future__ import annotations

import enum
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable
from urllib.parse import quote, urlsplit

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlark.api.store_errors import STORE_ERRORS, store_unavailable
from rlark.services import audit
from rlark.services.audit import Actor
from rlark.services.auth import DEFAULT_PROJECT, OPEN_PRINCIPAL, AuthService, Principal, authorize
from rlark.services.errors import Forbidden, NotFound, ServiceError, Unauthenticated
from rlark.store import ProjectRole

log = logging.getLogger("rlark.security")

SESSION_COOKIE = "rlark_session"
#: the console's current project (its project switcher); the API never reads it
PROJECT_COOKIE = "rlark_project"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: request state key: the database was unreachable when the request's credentials were checked
STORE_DOWN = "store_down"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: media types an API request body may have (everything else: 415)
BODY_TYPES = frozenset({"application/json", "application/yaml", "application/x-yaml", "text/yaml",
                        "text/x-yaml"})
#: paths served without authentication (exact, or a prefix when they end with "/")
PUBLIC_PATHS = ("/healthz", "/livez", "/login", "/api/v1/login", "/static/", "/static-docs/", "/lang/")

#: what the console's pages may load and run: scripts and styles from this server's files only
#: (no inline script, style or eval: htmx runs with ``allowEval`` off), no plugins, forms posted
#: only here, and no page of another origin may frame it (clickjacking)
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'")
#: headers every response carries (docs/security.md): no framing by any page (the older
#: ``X-Frame-Options`` and CSP's ``frame-ancestors``), no content-type sniffing, and the
#: ``Referer`` (console URLs name Jobs and projects) only to this origin
SECURITY_HEADERS: dict[str, str] = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
}
_RAW_SECURITY_HEADERS = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                         for k, v in SECURITY_HEADERS.items()]


@dataclass(frozen=True)
class SecurityPolicy:
    """How the server guards its door (``rlark server`` options, see docs/security.md).

    Attributes:
        auth: require authentication (off only on loopback; server.py enforces that).
        allowed_hosts: ``Host`` names accepted (without port); ``*.example.com`` matches
            subdomains; ``*`` turns the check off.
        cors_origins: origins (``https://app.example.com``) a browser may call the API from with
            an API token; empty: CORS closed.
        secure_cookies: mark cookies Secure; None: when the request came over HTTPS.
        api_only: every path is the API's: a refusal is JSON, never a redirect to a login page
            (a listener without the console: ``rlark server --metrics-address``).
    """

    auth: bool = True
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    cors_origins: tuple[str, ...] = ()
    secure_cookies: bool | None = None
    extra_public: tuple[str, ...] = field(default=())
    api_only: bool = False


#: ``Host`` = a name or IPv4 address, or an IPv6 address in brackets, and an optional port
#: (RFC 9110 7.2 / RFC 3986 3.2.2); anything else (userinfo, paths, fragments) is refused
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?$")


def _host_name(host_header: str | None) -> str | None:
    """``example.com:8470`` -> ``example.com``; ``[::1]:8470`` -> ``::1``; None if it is not
    a plain host[:port]."""
    m = _HOST.match((host_header or "").strip())
    if m is None or (m.group("port") and int(m.group("port")) > 65535):
        return None
    return (m.group("v6") or m.group("name")).lower()


def host_allowed(host_header: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a request's ``Host`` is one of ``allowed`` (see :class:`SecurityPolicy`)."""
    if "*" in allowed:
        return True
    name = _host_name(host_header)
    if name is None:
        return False
    for entry in allowed:
        entry = entry.lower().strip("[]")
        if entry.startswith("*.") and name.endswith(entry[1:]):
            return True
        if name == entry:
            return True
    return False


def _netloc(scheme: str, host: str | None) -> str:
    """``host[:port]`` with the scheme's default port dropped, lower case."""
    parts = urlsplit(f"{scheme}://{host or ''}")
    try:
        port = parts.port
    except ValueError:
        return ""
    default = {"http": 80, "https": 443}.get(scheme)
    name = parts.hostname or ""
    if ":" in name:
        name = f"[{name}]"
    return name if port in (None, default) else f"{name}:{port}"


def cross_site_reason(headers: Headers, scheme: str, cors_origins: tuple[str, ...]) -> str | None:
    """Why a state-changing request looks cross-site (None: it does not). The one cross-site
    check: :class:`RequestGuard` applies it to every state-changing request, the API's and the
    console's forms alike, before any route runs.

    Browsers send ``Sec-Fetch-Site`` (``cross-site``/``same-site`` refused: another port of the
    same host is the same *site* but not the same *origin*) and ``Origin`` (compared with
    ``Host`` by scheme-default port and case, as RFC 6454 serialises origins); non-browser
    clients send neither and must bring a token instead. ``cors_origins`` (lower case, no
    trailing slash) pass only with an ``Authorization`` header: CORS is for API tokens, never
    for a request riding on the console's cookie.
    """
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if (origin is not None and origin.rstrip("/").lower() in cors_origins
            and "authorization" in headers):
        return None
    if site is not None and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {site}"
    if origin is not None:
        if origin == "null":
            return "Origin: null"
        parts = urlsplit(origin)
        if _netloc(parts.scheme.lower() or scheme, parts.netloc) != _netloc(scheme, headers.get("host")):
            return f"Origin {origin!r} is not this server's"
    return None


def is_public(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in PUBLIC_PATHS)


def is_api_path(path: str) -> bool:
    """Whether a refusal at ``path`` is the API's (JSON 401) rather than the console's (a
    redirect to the login page); /metrics is the API's: a scraper has no browser."""
    return path.startswith("/api/") or path in ("/openapi.json", "/metrics")


async def _send_json(send: Send, status: int, code: str, message: str,
                     headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": {"code": code, "message": message}}, ensure_ascii=True).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"cache-control", b"no-store")]
    raw += [(k.lower().encode(), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _send_redirect(send: Send, location: str, htmx: bool) -> None:
    if htmx:  # htmx swaps fragments: ask it to load the login page as a whole page
        raw = [(b"hx-redirect", location.encode("latin-1")), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 200, "headers": raw})
    else:
        raw = [(b"location", location.encode("latin-1")), (b"content-length", b"0"),
               (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 303, "headers": raw})
    await send({"type": "http.response.body", "body": b""})


def _with_security_headers(send: Send) -> Send:
    """``send`` that adds each of :data:`SECURITY_HEADERS` a response does not set itself."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or [])
            present = {name.lower() for name, _ in headers}
            headers += [(k, v) for k, v in _RAW_SECURITY_HEADERS if k not in present]
            message = {**message, "headers": headers}
        await send(message)

    return sending


class RequestGuard:
    """The middleware described in the module docstring. ``auth``: returns the app's
    :class:`AuthService` (read per request, so tests can swap the store behind an app)."""

    def __init__(self, app: ASGIApp, policy: SecurityPolicy, auth: Callable[[], AuthService]):
        self.app = app
        self.policy = policy
        self.auth = auth
        self.cors = tuple(o.rstrip("/").lower() for o in policy.cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # RLark serves none; refuse rather than guess
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send)
        headers = Headers(scope=scope)
        path: str = scope["path"]
        method: str = scope["method"]
        if not host_allowed(headers.get("host"), self.policy.allowed_hosts):
            await _send_json(send, 400, "HostNotAllowed",
                             f"Host {headers.get('host')!r} is not one this server answers to; "
                             "an administrator can add it with `rlark server --allowed-host NAME`")
            return
        if method not in SAFE_METHODS:
            why = cross_site_reason(headers, scope.get("scheme", "http"), self.cors)
            if why:
                await _send_json(send, 403, "CrossSiteRefused",
                                 f"refused a cross-site {method} ({why}): RLark acts only on "
                                 "requests from its own pages or from clients with an API token")
                return
            if is_api_path(path) and (headers.get("content-length", "0") not in ("", "0")
                                  or "transfer-encoding" in headers):
                media = headers.get("content-type", "").split(";")[0].strip().lower()
                if media not in BODY_TYPES:
                    await _send_json(send, 415, "UnsupportedMediaType",
                                     f"Content-Type {media or '(none)'!r} is not accepted: send "
                                     "application/json or application/yaml")
                    return
        if (method == "OPTIONS" and "access-control-request-method" in headers
                and (headers.get("origin") or "").rstrip("/").lower() in self.cors):
            # a CORS preflight from a configured origin: browsers never send credentials with
            # one, and CORSMiddleware answers it without running any route
            await self.app(scope, receive, send)
            return
        down = None
        try:
            principal = await run_in_threadpool(self._authenticate, headers, method, path)
        except Unauthenticated as exc:
            principal, problem = None, exc.message
        except STORE_ERRORS as exc:
            # credentials that cannot be checked now: the route answers 503 (JSON or a page,
            # as its own refusals) instead of a 401 that would send the caller to log in again
            down = await run_in_threadpool(store_unavailable, self.auth().store, exc)
            if down is None:
                raise
            principal, problem = None, down.message
            scope.setdefault("state", {})[STORE_DOWN] = down
        else:
            problem = "log in first: send `Authorization: Bearer <API token>` (`rlark login`)"
        if principal is None and not is_public(path) and down is None:
            if is_api_path(path) or self.policy.api_only:
                await _send_json(send, 401, "Unauthenticated", problem,
                                 {"WWW-Authenticate": 'Bearer realm="rlark"'})
            else:
                query = scope.get("query_string", b"").decode("latin-1")
                here = path + (f"?{query}" if query else "")
                await _send_redirect(send, f"/login?next={quote(here, safe='')}",
                                     headers.get("hx-request") == "true")
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _authenticate(self, headers: Headers, method: str, path: str) -> Principal | None:
        return authenticate(headers, method, path, self.policy, self.auth())


def authenticate(headers: Headers, method: str, path: str, policy: SecurityPolicy,
                 auth: AuthService) -> Principal | None:
    """The caller of a request, or None when it sent no credentials at all.

    Raises:
        Unauthenticated: credentials that do not hold (or a cookie on a state-changing API call).
    """
    if not policy.auth:
        return OPEN_PRINCIPAL
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("use `Authorization: Bearer <API token>`")
        return auth.from_token(value.strip())
    cookie = _cookie(headers, SESSION_COOKIE)
    if cookie:
        if is_api_path(path) and method not in SAFE_METHODS:
            raise Unauthenticated(
                "state-changing API requests need an API token (`Authorization: Bearer ...`); "
                "a console session works for the console's pages and for reading the API")
        return auth.from_session(cookie)
    return None


def access_check(request: Request, project: str, needed: ProjectRole) -> Callable[[], bool]:
    """A check, callable later (from any thread), that the request's credentials still hold and
    still give ``needed`` in ``project``: a long-lived response (a followed log) ends when its
    token is revoked or its caller's role is taken away."""
    headers = Headers(raw=list(request.headers.raw))
    method, path = request.method, request.url.path
    policy, auth = request.app.state.policy, request.app.state.auth

    def check() -> bool:
        try:
            principal = authenticate(headers, method, path, policy, auth)
            if principal is None:
                return False
            authorize(principal, project, needed)
        except ServiceError:
            return False
        return True

    return check


def _cookie(headers: Headers, name: str) -> str | None:
    from http.cookies import CookieError, SimpleCookie

    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None and morsel.value else None


# --- authorization: what a route declares ----------------------------------------------------------


class Rule(str, enum.Enum):
    """Who may call a route (the route-table test reads these)."""

    public = "public"  # anyone, no authentication
    user = "user"  # any authenticated user; the service checks what it touches
    project_viewer = "project:viewer"
    project_member = "project:member"
    project_admin = "project:admin"
    site_admin = "admin"


@dataclass(frozen=True)
class Access:
    """What an authorized route gets: the caller, the project it acts in (project rules), the
    caller's role there, and the client's address."""

    principal: Principal
    client: str | None
    project: str | None = None
    role: ProjectRole | None = None

    @property
    def actor(self) -> Actor:
        return self.principal.actor(self.client)


@dataclass(frozen=True, kw_only=True)
class ProjectAccess(Access):
    """What a route behind :func:`allow_project` gets: :class:`Access` whose project and role
    are always set."""

    project: str
    role: ProjectRole


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def principal_of(request: Request) -> Principal:
    """The caller RequestGuard authenticated.

    Raises:
        Unauthenticated: none (a public route asking for one).
        StoreUnavailable: the credentials could not be checked: the database is unreachable.
    """
    state = request.scope.get("state", {})
    principal = state.get("principal")
    if principal is None and state.get(STORE_DOWN) is not None:
        raise state[STORE_DOWN]
    if principal is None:
        raise Unauthenticated("log in first: send `Authorization: Bearer <API token>` (`rlark login`)")
    return principal


def _denied(request: Request, principal: Principal | None, project: str | None, exc: ServiceError) -> None:
    """Audit a refused state change."""
    if request.method in SAFE_METHODS:
        return
    try:
        with request.app.state.auth.store.session() as s:
            audit.record(s, Actor(principal.name if principal else None, _client(request)),
                         "request.denied", project=project, target=request.url.path,
                         outcome="denied", detail=f"{request.method}: {exc.message}")
    except Exception:  # noqa: BLE001 - never let the audit hide the refusal itself
        log.exception("could not audit a refused request")


class _Public:
    rule = Rule.public

    def __call__(self, request: Request) -> None:
        return None


class _User:
    rule = Rule.user

    def __call__(self, request: Request) -> Access:
        return Access(principal_of(request), _client(request))


class _SiteAdmin:
    rule = Rule.site_admin

    def __call__(self, request: Request) -> Access:
        principal = principal_of(request)
        if not principal.is_admin:
            exc = Forbidden("only a site administrator may do this")
            _denied(request, principal, None, exc)
            raise exc
        return Access(principal, _client(request))


def _project_checker(needed: ProjectRole, rule: Rule, source: str):
    """A dependency that authorizes ``needed`` in the project named by the ``project`` query
    parameter (default ``default``), the path parameter, or (console) the query parameter, else
    the console's project cookie."""

    def check(request: Request, project: str) -> ProjectAccess:
        principal = principal_of(request)
        try:
            role = authorize(principal, project, needed)
        except (NotFound, Forbidden) as exc:
            _denied(request, principal, project, exc)
            raise
        return ProjectAccess(principal, _client(request), project=project, role=role)

    # three signatures, one per place the project is named: FastAPI reads the parameters
    def in_path(request: Request, project: Annotated[str, Path(max_length=63)]) -> ProjectAccess:
        return check(request, project)

    def in_console(request: Request,
                   project: Annotated[str | None, Query(max_length=63)] = None) -> ProjectAccess:
        return check(request, project or request.cookies.get(PROJECT_COOKIE) or DEFAULT_PROJECT)

    def in_query(request: Request,
                 project: Annotated[str, Query(max_length=63, description=(
                     "the project the Job belongs to"))] = DEFAULT_PROJECT) -> ProjectAccess:
        return check(request, project)

    dependency = {"path": in_path, "console": in_console}.get(source, in_query)
    dependency.rule = rule  # type: ignore[attr-defined]  # read by the route-rule checks
    return dependency


_ROLE_RULES = {ProjectRole.viewer: Rule.project_viewer, ProjectRole.member: Rule.project_member,
               ProjectRole.admin: Rule.project_admin}
_PROJECT_DEPS = {(role, source): _project_checker(role, rule, source)
                 for role, rule in _ROLE_RULES.items() for source in ("query", "path", "console")}
_PUBLIC, _USER, _ADMIN = _Public(), _User(), _SiteAdmin()


def allow_public() -> Any:
    """Anyone (health, the login routes)."""
    return Depends(_PUBLIC)


def allow_user() -> Any:
    """Any authenticated user: ``Access`` without a project."""
    return Depends(_USER)


def allow_admin() -> Any:
    """Site administrators only."""
    return Depends(_ADMIN)


def allow_project(role: ProjectRole, *, in_path: bool = False, console: bool = False) -> Any:
    """At least ``role`` in the project of the ``project`` query parameter (default
    ``default``); of the ``{project}`` path parameter with ``in_path``; with ``console``, of the
    query parameter, else the console's current project (:data:`PROJECT_COOKIE`)."""
    return Depends(_PROJECT_DEPS[(role, "path" if in_path else "console" if console else "query")])


def route_rule(route: APIRoute) -> Rule | None:
    """The rule a route declares (None: none)."""
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        rule = getattr(dep.call, "rule", None)
        if isinstance(rule, Rule):
            return rule
        stack.extend(dep.dependencies)
    return None


def api_routes(app: FastAPI) -> list[tuple[str, APIRoute]]:
    """Every ``(path, route)`` of ``app``, those of included routers too (FastAPI 0.165 keeps an
    included router as one lazily flattened entry in ``app.routes``)."""
    found: list[tuple[str, APIRoute]] = []

    def walk(routes, prefix: str) -> None:
        for r in routes:
            if isinstance(r, APIRoute):
                found.append((prefix + r.path, r))
            elif hasattr(r, "original_router"):
                walk(r.original_router.routes, prefix + getattr(r.include_context, "prefix", ""))

    walk(app.routes, "")
    return found


def check_every_route_has_a_rule(app: FastAPI) -> None:
    """Refuse to build an app with a route that says nothing about who may call it.

    Raises:
        RuntimeError: naming the routes without a rule.
    """
    missing = [f"{sorted(r.methods or ())} {path}" for path, r in api_routes(app)
               if route_rule(r) is None]
    if missing:
        raise RuntimeError("routes without an access rule (rlark.api.security.allow_*): "
                           + ", ".join(missing))
