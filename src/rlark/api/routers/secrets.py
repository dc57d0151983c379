"""/api/v1/secrets: a project's RLark-managed secrets (names and keys; never a value back)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from rlark.api.security import ProjectAccess, allow_project
from rlark.services.errors import Invalid, TooLarge
from rlark.services.secrets import MAX_SECRET_BYTES, SecretService
from rlark.store import ProjectRole

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member)]

SECRET_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "type": "object", "required": ["data"], "additionalProperties": False,
            "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"},
                                    "description": "key -> value (values are never answered)"}}},
            "example": {"data": {"api_key": "..."}}}},
    }
}


def secrets(request: Request) -> SecretService:
    return request.app.state.secrets


async def _data(request: Request) -> Any:
    """The body's ``data``, parsed here rather than by a pydantic model: a validation error
    would echo the input, values included, back in its message.

    Raises:
        Invalid: not a JSON object with exactly ``data``. TooLarge: over 2 MiB.
    """
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > 2 * MAX_SECRET_BYTES:
            raise TooLarge("the request body is larger than 2 MiB; a secret holds at most 1 MiB")
    try:
        doc = json.loads(body)
    except ValueError:
        raise Invalid('the body must be JSON: {"data": {"KEY": "VALUE", ...}}') from None
    if not isinstance(doc, dict) or set(doc) != {"data"}:
        fields = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise Invalid(f'the body must be {{"data": {{"KEY": "VALUE", ...}}}}; got {fields}')
    return doc["data"]


Service = Annotated[SecretService, Depends(secrets)]
Key = Annotated[str | None, Query(max_length=253, pattern=r"^[-._a-zA-Z0-9]+$",
                                  description="delete only this key")]


@router.get("", summary="The project's secrets: names, keys (set/unset), who changed them last")
def list_secrets(svc: Service, access: Reader) -> list[dict]:
    """Every secret of the project (``?project=``, default ``default``) and every one its Jobs
    refer to: ``[{"name", "exists", "keys": [{"key", "state": "set"|"unset", "usedBy"}],
    "updatedAt", "updatedBy", ...}]``. Never a value."""
    return svc.list(access.principal, access.project)


@router.get("/{name}", summary="One secret: its keys (set/unset) and who changed it last")
def get_secret(name: str, svc: Service, access: Reader) -> dict:
    return svc.get(access.principal, access.project, name)


@router.patch("/{name}", openapi_extra=SECRET_BODY,
              summary="Create a secret, or add/change some of its keys")
async def patch_secret(name: str, request: Request, svc: Service, access: Writer) -> dict:
    """Body ``{"data": {"KEY": "VALUE"}}``: those keys are set, the others kept. The answer is
    the secret's view (no value). Runs started from now on get the new values."""
    data = await _data(request)
    return await run_in_threadpool(svc.set, access.principal, access.client, access.project,
                                   name, data)


@router.put("/{name}", openapi_extra=SECRET_BODY,
            summary="Create a secret, or give it exactly these keys")
async def put_secret(name: str, request: Request, svc: Service, access: Writer) -> dict:
    """Body ``{"data": {"KEY": "VALUE"}}``: the secret's keys become exactly these."""
    data = await _data(request)
    return await run_in_threadpool(svc.set, access.principal, access.client, access.project,
                                   name, data, True)


@router.delete("/{name}", summary="Delete a secret (or one of its keys)")
def delete_secret(name: str, svc: Service, access: Writer, key: Key = None) -> dict:
    return svc.delete(access.principal, access.client, access.project, name, key)
