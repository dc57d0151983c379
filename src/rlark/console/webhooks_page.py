"""The console's Webhooks page: the current project's webhooks (URL, events, format, secret
set/unset, deliveries so far), a form to register one, buttons to delete, and each webhook's
delivery log (``/webhooks/<name>``: status code, attempts, last error). Project admins only, as
the API (:class:`~rlark.services.webhooks.WebhookService`, which authorizes and audits).

A secret typed into the form goes to the server and is never shown again: not in the page that
answers the form, not in a notice, not when the form is refused.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rlark.api.security import ProjectAccess, allow_project
from rlark.console.pages import _accepted_form, _flash, _redirect, _render, _text
from rlark.services.errors import ServiceError
from rlark.services.webhooks import ALL_EVENTS, WebhookService
from rlark.store import ProjectRole

router = APIRouter(include_in_schema=False)
Admin = Annotated[ProjectAccess, allow_project(ProjectRole.admin, console=True)]


def _webhooks(request: Request) -> WebhookService:
    return request.app.state.webhooks


def _page(request: Request, access: ProjectAccess, status: int = 200, **ctx: Any) -> Response:
    items = _webhooks(request).list(access.principal, access.project)
    return _render(request, "webhooks.html", status, webhooks=items, all_events=ALL_EVENTS,
                   form=ctx.pop("form", {}), error=ctx.pop("error", None), project=access.project)


@router.get("/webhooks")
def webhooks_page(request: Request, access: Admin) -> Response:
    return _page(request, access)


@router.post("/webhooks")
async def create_webhook(request: Request, access: Admin) -> Response:
    """Register a webhook from the form (``name``, ``url``, ``events`` checked, ``format``,
    ``secret``: empty for none)."""
    pairs = await _accepted_form(request)
    if not isinstance(pairs, list):
        return pairs
    form = dict(pairs)
    body: dict[str, Any] = {"name": _text(form.get("name"), 63).strip(),
                            "url": _text(form.get("url"), 2100).strip(),
                            "events": [_text(v, 40) for k, v in pairs if k == "events"],
                            "format": _text(form.get("format"), 16) or "rlark"}
    secret = form.get("secret") or ""
    if secret:
        body["secret"] = secret
    try:
        await run_in_threadpool(_webhooks(request).create, access.principal, access.client,
                                access.project, body)
    except ServiceError as exc:  # the form again, without the secret
        return _page(request, access, 422, error=exc.message,
                     form={k: v for k, v in body.items() if k != "secret"})
    return _flash(_redirect(request, "/webhooks"), "ok", "flash.webhookCreated", name=body["name"])


@router.post("/webhooks/{name}/delete")
async def delete_webhook(request: Request, name: str, access: Admin) -> Response:
    pairs = await _accepted_form(request)
    if not isinstance(pairs, list):
        return pairs
    try:
        await run_in_threadpool(_webhooks(request).delete, access.principal, access.client,
                                access.project, name)
    except ServiceError as exc:
        return _flash(_redirect(request, "/webhooks"), "error", text=exc.message)
    return _flash(_redirect(request, "/webhooks"), "ok", "flash.webhookDeleted", name=name)


@router.get("/webhooks/{name}")
def webhook_deliveries(request: Request, name: str, access: Admin) -> Response:
    """A webhook and its delivery log, newest first."""
    svc = _webhooks(request)
    hook = svc.get(access.principal, access.project, name)
    log = svc.deliveries(access.principal, access.project, name, 100)
    return _render(request, "webhook.html", hook=hook, deliveries=log, project=access.project)
