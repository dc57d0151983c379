"""/api/v1/webhooks: a project's webhooks and their delivery logs (project admins; the signing
secret is never answered)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from rlark.api.security import ProjectAccess, allow_project
from rlark.services.errors import Invalid, TooLarge
from rlark.services.webhooks import ALL_EVENTS, WebhookService
from rlark.store import ProjectRole

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])
Admin = Annotated[ProjectAccess, allow_project(ProjectRole.admin)]
MAX_BODY = 16 * 1024

WEBHOOK_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "type": "object", "required": ["name", "url"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "description": "a DNS-1123 label"},
                "url": {"type": "string", "description": "http(s) URL of the receiver"},
                "events": {"type": "array", "items": {"type": "string", "enum": ALL_EVENTS},
                           "description": "default: all"},
                "format": {"type": "string", "enum": ["rlark", "slack"], "default": "rlark"},
                "secret": {"type": "string", "minLength": 16, "maxLength": 256,
                           "description": "signs every request (X-RLark-Signature); never "
                                          "answered"}}},
            "example": {"name": "alerts", "url": "https://hooks.example.com/rlark",
                        "events": ["run.failed", "run.succeeded"], "format": "rlark",
                        "secret": "..."}}},
    }
}


def webhooks(request: Request) -> WebhookService:
    return request.app.state.webhooks


Service = Annotated[WebhookService, Depends(webhooks)]


async def _body(request: Request) -> Any:
    """The JSON body, parsed here rather than by a pydantic model: a validation error would echo
    the input, the secret included, back in its message.

    Raises:
        Invalid: not JSON. TooLarge: over 16 KiB.
    """
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge("the request body is larger than 16 KiB; a webhook is a name, a URL, "
                           "events, a format and a secret")
    try:
        return json.loads(body)
    except ValueError:
        raise Invalid('the body must be JSON: {"name": ..., "url": ..., "events": [...]}') from None


@router.get("", summary="The project's webhooks (the secret shown as set/unset)")
def list_webhooks(svc: Service, access: Admin) -> list[dict]:
    """``[{"name", "url", "events", "format", "secret": "set"|"unset", "createdAt",
    "createdBy", "deliveries": {"pending", "succeeded", "failed"}}]`` (``?project=``)."""
    return svc.list(access.principal, access.project)


@router.post("", status_code=201, openapi_extra=WEBHOOK_BODY, summary="Register a webhook")
async def create_webhook(request: Request, svc: Service, access: Admin) -> dict:
    """RLark POSTs each Run event the webhook wants to its URL (docs/notifications.md)."""
    body = await _body(request)
    return await run_in_threadpool(svc.create, access.principal, access.client, access.project,
                                   body)


@router.get("/{name}", summary="One webhook")
def get_webhook(name: str, svc: Service, access: Admin) -> dict:
    return svc.get(access.principal, access.project, name)


@router.delete("/{name}", summary="Delete a webhook (and its delivery log)")
def delete_webhook(name: str, svc: Service, access: Admin) -> dict:
    return svc.delete(access.principal, access.client, access.project, name)


@router.get("/{name}/deliveries", summary="A webhook's delivery log, newest first")
def list_deliveries(name: str, svc: Service, access: Admin,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict]:
    """``[{"id", "event", "job", "run", "state", "attempts", "lastStatus", "lastError",
    "lastAttemptAt", "nextAttemptAt", "createdAt"}]``."""
    return svc.deliveries(access.principal, access.project, name, limit)
