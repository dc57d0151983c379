"""The console's error pages: a refusal by an access rule or a service, no such page or
method, a bad query value, and a failure of the server itself, as pages in the console's layout
and the reader's language (:func:`rlark.console.mount_console` sets them as the handlers for
console paths).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from rlark.console.i18n import Translator
from rlark.services.errors import NotFound, ServiceError, StoreUnavailable
from rlark.console.pages import _gone, _locale, _render


#: title and explanation (catalog keys) of a refused console page, by HTTP status
ERROR_TEXTS = {401: ("error.unauthenticated", "error.loginAgain"),
               403: ("error.forbidden", "error.notAllowed"),
               404: ("error.notFound", "error.noPage"),
               429: ("error.tooMany", "error.tryLater"),
               503: ("error.storeDown", "error.storeRetry")}


def error_page(request: Request, exc: ServiceError) -> Response:
    """The console's page for a :class:`ServiceError` that reached the app (the access rules'
    ``NotFound``/``Forbidden``, a service's refusal): HTML in the page's language, with the
    service's own words below.

    A Job page whose project the caller has no role in gets exactly the page of a Job that
    does not exist: nobody learns that another project's Job is there.
    """
    t = Translator(_locale(request))
    name = request.path_params.get("name")
    if isinstance(exc, NotFound) and name is not None and request.url.path.startswith("/jobs/"):
        return _gone(request, str(name))
    title, text = ERROR_TEXTS.get(exc.status, ("error.title", "error.refused"))
    # without the database the page cannot ask who the caller is (their projects, a notice)
    resp = _render(request, "error.html", exc.status, title=t(title), message=t(text),
                   detail=exc.message, login=exc.status == 401,
                   full=not isinstance(exc, StoreUnavailable))
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def http_error_page(request: Request, exc: Exception) -> Response:
    """The console's page for no such page (404), a method a page does not take (405) or a
    query value a page cannot use (422: FastAPI's ``RequestValidationError``)."""
    from fastapi.exceptions import RequestValidationError

    t = Translator(_locale(request))
    if isinstance(exc, RequestValidationError):
        status, text = 422, "error.badRequest"
    else:
        status = getattr(exc, "status_code", 500)
        text = {404: "error.noPage", 405: "error.methodNotAllowed"}.get(status, "error.refused")
    title = "error.notFound" if status == 404 else "error.title"
    resp = _render(request, "error.html", status, title=t(title), message=t(text))
    for k, v in (getattr(exc, "headers", None) or {}).items():  # Allow: on a 405
        resp.headers[k] = v
    return resp


def failure_page(request: Request, exc: Exception) -> Response:
    """The console's page for a failure of the server itself (500): the reader's language, the
    console's layout, nothing of the failure but its kind (the log has the rest).

    Answered outside :class:`rlark.api.security.RequestGuard` (Starlette's outermost
    middleware), so it sets :data:`SECURITY_HEADERS` itself; drawn without a notice or the
    project switcher, which need the store, in case the store is what failed."""
    import logging

    from rlark.api.security import SECURITY_HEADERS

    logging.getLogger("rlark.console").error("unexpected error on %s", request.url.path,
                                             exc_info=exc)
    t = Translator(_locale(request))
    try:
        resp = _render(request, "error.html", 500, full=False, title=t("error.title"),
                       message=t("error.internal"), detail=type(exc).__name__)
    except Exception:  # noqa: BLE001 - the page itself cannot be drawn: a plain one
        resp = HTMLResponse(f"<!doctype html><title>{t('error.title')}</title>"
                            f"<h1>{t('error.title')}</h1><p>{t('error.internal')}</p>",
                            status_code=500)
    resp.headers.update(SECURITY_HEADERS)
    return resp
