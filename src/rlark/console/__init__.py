"""The web console: server-rendered pages (Jinja2 + htmx) over :class:`JobService` and
:class:`AccountService`.

Pages: the login page (``/login``), the Jobs list (``/jobs``), the Create Job wizard
(``/create``; also edit and clone), a Job's detail (``/jobs/<name>``: overview, events, logs,
run record, spec), Nodes, the caller's API tokens (``/tokens``), a project's Webhooks (``/webhooks``) and the admin pages (users,
projects and members, audit). Routes parse, call the service, render; every label comes from
the catalogs in ``catalogs/`` (English and Simplified Chinese).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports the catalogs (i18n, messages) without the web stack
    from fastapi import FastAPI, Request, Response

HTMX_VERSION = "2.0.11"
STATIC_DIR = Path(__file__).parent / "static"


def _is_console(path: str) -> bool:
    """Paths whose errors are pages: everything the request guard does not answer as the API
    (:func:`rlark.api.security.is_api_path`)."""
    from rlark.api.security import is_api_path  # the web stack: not for the CLI's catalogs

    return not is_api_path(path)


def mount_console(app: FastAPI) -> None:
    """Serve the console at ``/`` (its assets at ``/static``) on ``app``. An error on a console
    path is an HTML page in the console's layout and the reader's language (a refusal
    (:class:`ServiceError` from an access rule or a service), no such page or method, a bad
    query value, and a failure of the server itself); API paths keep the app's JSON answers.
    Call after the app's own exception handlers are set: those are what API paths get."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.staticfiles import StaticFiles
    from starlette.exceptions import HTTPException

    from rlark.console.admin import router as admin_router
    from rlark.console.auth_pages import router as auth_router
    from rlark.console.error_pages import error_page, failure_page, http_error_page
    from rlark.console.jobs_pages import router as jobs_router
    from rlark.console.secrets_page import router as secrets_router
    from rlark.console.webhooks_page import router as webhooks_router
    from rlark.console.wizard_pages import router as wizard_router
    from rlark.services.errors import ServiceError

    app.include_router(auth_router)
    app.include_router(jobs_router)
    app.include_router(wizard_router)
    app.include_router(admin_router)
    app.include_router(secrets_router)
    app.include_router(webhooks_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def as_page(kind: type, page) -> None:
        as_json = app.exception_handlers.get(kind)

        async def handler(request: Request, exc: Exception) -> Response:
            if _is_console(request.url.path) and isinstance(exc, kind):
                return page(request, exc)
            if as_json is None:
                raise exc
            answer = as_json(request, exc)  # a handler may be a plain function or a coroutine
            return await answer if inspect.isawaitable(answer) else answer

        app.add_exception_handler(kind, handler)

    as_page(ServiceError, error_page)
    as_page(HTTPException, http_error_page)
    as_page(RequestValidationError, http_error_page)
    as_page(Exception, failure_page)
