"""The FastAPI application of the API: routers, error mapping, and the controller's life with
the server. The console is mounted beside it where ``rlark server`` wires the two
(:func:`rlark.server.create_app`): the API knows nothing of the console."""

from __future__ import annotations

import inspect
import json
import logging
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlark import __version__
from rlark.api.docs import mount_docs
from rlark.api.store_errors import STORE_ERRORS, store_unavailable
from rlark.api.timing import RequestTiming
from rlark.api.routers import access, jobs, logs, meta, nodes, records, secrets, volumes, webhooks
from rlark.api.security import (
    SECURITY_HEADERS,
    RequestGuard,
    SecurityPolicy,
    check_every_route_has_a_rule,
)
from rlark.findings import format_path
from rlark.services.accounts import AccountService
from rlark.services.auth import AuthService
from rlark.services.errors import (ServiceError, StoreUnavailable, TooManyRequests,
                                   Unauthenticated)
from rlark.secretbox import SecretBox
from rlark.services.jobs import JobService
from rlark.services.metrics import ServerMetrics
from rlark.services.secrets import SecretService
from rlark.services.webhooks import WebhookService
from rlark.services.logs import FollowLimits
from rlark.services.notifier import Notifier


class SafeJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate echoed back from bad input (a name, a query
    value) would otherwise make the UTF-8 encoding of the response fail with a 500."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False,
                          separators=(",", ":")).encode("ascii")


def create_api(service: JobService, controller=None, *, policy: SecurityPolicy | None = None,
               auth: AuthService | None = None, secret_box: SecretBox | None = None,
               metrics: ServerMetrics | None = None, notifier: Notifier | None = None,
               fronts: Sequence[Callable[[FastAPI], None]] = ()) -> FastAPI:
    """The app for ``service``; when a ``controller`` is given it runs while the app runs and
    shuts down (stopping its Workers) with it. ``fronts``: what else the app serves beside the
    API, each mounted on it after the API's routes and held to the same access rules (the web
    console: :func:`rlark.server.create_app`).

    ``policy``: how requests are guarded (default: authentication on, loopback ``Host`` names
    only, CORS closed; see :mod:`rlark.api.security`). ``auth``: the authentication service
    (default: one on ``service``'s store). ``secret_box``: seals and opens the project secrets
    (default: ``service``'s, else :meth:`SecretBox.from_settings` on first use, which makes the
    key file). ``metrics``: what ``GET /metrics`` serves (default: a :class:`ServerMetrics` on
    ``service``'s store, without the controller's timings, which the server wires).
    ``notifier``: sends the webhooks' deliveries while the app runs (:mod:`rlark.services.notifier`;
    none: nothing is sent, the deliveries wait in the store).

    Raises:
        RuntimeError: a route declares no access rule.
    """
    policy = policy or SecurityPolicy()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if controller is not None:
            controller.start()
        if notifier is not None:
            notifier.start()
        yield
        if notifier is not None:
            notifier.stop()
        if controller is not None:
            controller.shutdown()

    app = FastAPI(
        title="RLark",
        version=__version__,
        description="Run RLinf training on real machines: Jobs, Runs, Workers, logs, run records.",
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
        docs_url=None,  # mount_docs: the same pages without a CDN
        redoc_url=None,
    )
    mount_docs(app)
    app.state.jobs = service
    app.state.controller = controller
    app.state.policy = policy
    app.state.auth = auth or AuthService(service.store)
    app.state.accounts = AccountService(app.state.auth, server_namespace=service.namespace,
                                        quota_defaults=service.quota_defaults,
                                        profile=service.profile)
    app.state.secrets = secrets_service = SecretService(service.store,
                                                        secret_box or service.secret_box)
    app.state.webhooks = WebhookService(service.store, lambda: secrets_service.box)
    if service.secret_box is None:  # the reads mask with the box the secrets are set with
        service.secret_source = lambda: secrets_service.box
    app.state.follow_limits = FollowLimits()
    app.state.metrics = metrics = metrics or ServerMetrics(lambda: app.state.jobs.store)

    _answer_errors(app, service)

    app.include_router(jobs.router)
    app.include_router(logs.router)
    app.include_router(records.router)
    app.include_router(meta.router)
    app.include_router(meta.metrics_router)
    app.include_router(nodes.router)
    app.include_router(access.router)
    app.include_router(secrets.router)
    app.include_router(volumes.router)
    app.include_router(webhooks.router)
    for mount in fronts:  # e.g. the web console at / (its pages are not in the OpenAPI schema)
        mount(app)
    check_every_route_has_a_rule(app)
    _document_bearer_auth(app)
    if policy.cors_origins:  # closed unless configured: then only these origins, tokens only
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(policy.cors_origins),
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)
    app.add_middleware(RequestGuard, policy=policy, auth=lambda: app.state.auth)
    # outermost: a refusal by the guard (401, 403, 400) is timed too
    app.add_middleware(RequestTiming, metrics=metrics)
    return app


def create_metrics_api(api: FastAPI, policy: SecurityPolicy) -> FastAPI:
    """The app of ``rlark server --metrics-address``: ``GET /metrics`` of ``api`` (the same
    :class:`ServerMetrics`, the same route) and nothing else, on a listener of its own, behind
    the same request guard with the same authentication (a site administrator's token) and
    ``policy`` (:func:`rlark.server.security_policy` of the metrics address: its own ``Host``
    names). Every refusal is JSON, as the API's are: a scraper has no login page. It has no
    lifespan of its own: the controller lives and ends with ``api``. docs/security.md says why
    one would serve the metrics apart.

    Raises:
        RuntimeError: a route declares no access rule.
    """
    app = FastAPI(title="RLark metrics", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url=None, default_response_class=SafeJSONResponse)
    for key in ("jobs", "auth", "metrics", "policy"):
        setattr(app.state, key, getattr(api.state, key))
    _answer_errors(app, api.state.jobs)
    app.include_router(meta.metrics_router)
    check_every_route_has_a_rule(app)
    app.add_middleware(RequestGuard, policy=replace(policy, api_only=True),
                       auth=lambda: api.state.auth)
    return app


def _answer_errors(app: FastAPI, service: JobService) -> None:
    """Every error answered in the API's JSON shape (``{"detail": {"code", "message"}}``, never a
    traceback): service refusals with their status, bad parameters 422 naming the field, an
    unreachable database 503, unknown routes 404, anything else 500."""

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, exc: ServiceError):
        headers = {}
        if isinstance(exc, (TooManyRequests, StoreUnavailable)):
            headers["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, Unauthenticated):
            headers["WWW-Authenticate"] = 'Bearer realm="rlark"'
        return SafeJSONResponse(status_code=exc.status, content={"detail": exc.to_dict()},
                                headers=headers)

    @app.exception_handler(RequestValidationError)
    async def request_error(_request: Request, exc: RequestValidationError):
        errors = []
        for e in exc.errors():
            loc = [p for p in e.get("loc", ()) if p not in ("query", "path", "body")]
            value = e.get("input")
            if isinstance(value, (bytes, bytearray)):  # a body that was not JSON (e.g. YAML)
                value = value[:200].decode("utf-8", errors="replace")
            errors.append({"field": format_path(loc), "message": e.get("msg"), "value": value})
        text = "; ".join(f"{e['field']}={e['value']!r}: {e['message']}" for e in errors)
        return SafeJSONResponse(status_code=422, content={
            "detail": {"code": "Invalid", "message": f"bad request parameter: {text}",
                       "errors": errors}})

    async def store_error(request: Request, exc: Exception):
        down = await run_in_threadpool(store_unavailable, service.store, exc)
        if down is None:  # the database answers: a damaged database or a bug
            return await unexpected(request, exc)
        # the app's ServiceError handler, as the console wraps it: a page on a console path
        handler = request.app.exception_handlers[ServiceError]
        answer = handler(request, down)
        return await answer if inspect.isawaitable(answer) else answer

    for kind in STORE_ERRORS:
        app.add_exception_handler(kind, store_error)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception):
        # never a traceback or a plain-text page: say what happened in the error shape
        logging.getLogger("rlark.api").exception("unexpected error")
        # answered by Starlette's outermost middleware, outside RequestGuard: its headers here
        return SafeJSONResponse(status_code=500, headers=SECURITY_HEADERS, content={"detail": {
            "code": "InternalError",
            "message": f"the server failed ({type(exc).__name__}); the server log has the details "
                       "(a damaged database or a bug - please report it)"}})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        hints = {404: "no such route; the API is described at /docs",
                 405: "this route does not take that method; see /docs"}
        message = f"{exc.detail}: {hints.get(exc.status_code, 'see /docs')}"
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return SafeJSONResponse(status_code=exc.status_code, headers=getattr(exc, "headers", None),
                            content={"detail": {"code": code, "message": message}})


def _document_bearer_auth(app: FastAPI) -> None:
    """Say in the OpenAPI document that every operation but the public ones takes a bearer
    token (the docs page's Authorize button; clients generated from it)."""
    from fastapi.openapi.utils import get_openapi

    from rlark.api.security import Rule, api_routes, route_rule

    public = {(m.lower(), path) for path, r in api_routes(app) if route_rule(r) == Rule.public
              for m in r.methods or ()}

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "an RLark API token (`rlark token create`)"}}
            schema["security"] = [{"bearer": []}]
            for path, ops in schema.get("paths", {}).items():
                for method, op in ops.items():
                    if (method, path) in public:
                        op["security"] = []
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it
