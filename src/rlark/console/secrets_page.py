"""The console's Secrets page: the current project's secrets (names, keys set/unset, the Jobs
that use them, who changed them last), a form to set a key and buttons to delete, for members.

Every change goes through :class:`~rlark.services.secrets.SecretService` (authorized, audited).
A value typed into the form goes to the server and is never shown again: not in the page that
answers the form, not in a notice, not when the form is refused.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rlark.api.security import ProjectAccess, allow_project
from rlark.console.pages import _accepted_form, _flash, _redirect, _render, _text
from rlark.services.errors import ServiceError
from rlark.services.secrets import SecretService
from rlark.store import ProjectRole

router = APIRouter(include_in_schema=False)
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer, console=True)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member, console=True)]


def _secrets(request: Request) -> SecretService:
    return request.app.state.secrets


def _page(request: Request, access: ProjectAccess, status: int = 200, **ctx) -> Response:
    items = _secrets(request).list(access.principal, access.project)
    can_edit = access.role.allows(ProjectRole.member)
    return _render(request, "secrets.html", status, secrets=items, can_edit=can_edit,
                   form=ctx.pop("form", {}), error=ctx.pop("error", None), project=access.project)


@router.get("/secrets")
def secrets_page(request: Request, access: Reader) -> Response:
    return _page(request, access)


@router.post("/secrets")
async def set_secret(request: Request, access: Writer) -> Response:
    """Set one key of a secret (the others are kept)."""
    pairs = await _accepted_form(request)
    if not isinstance(pairs, list):
        return pairs
    form = dict(pairs)
    name, key = _text(form.get("name"), 63).strip(), _text(form.get("key"), 253).strip()
    value = form.get("value", "")
    try:
        await run_in_threadpool(_secrets(request).set, access.principal, access.client,
                                access.project, name, {key: value})
    except ServiceError as exc:  # the form again, without the value
        return _page(request, access, 422, error=exc.message, form={"name": name, "key": key})
    return _flash(_redirect(request, "/secrets"), "ok", "flash.secretSet", name=name, field=key)


@router.post("/secrets/{name}/delete")
async def delete_secret(request: Request, name: str, access: Writer) -> Response:
    """Delete a secret, or one of its keys (``key`` in the form)."""
    pairs = await _accepted_form(request)
    if not isinstance(pairs, list):
        return pairs
    key = _text(dict(pairs).get("key"), 253).strip() or None
    try:
        await run_in_threadpool(_secrets(request).delete, access.principal, access.client,
                                access.project, name, key)
    except ServiceError as exc:
        return _flash(_redirect(request, "/secrets"), "error", text=exc.message)
    return _flash(_redirect(request, "/secrets"), "ok",
                  "flash.secretKeyDeleted" if key else "flash.secretDeleted", name=name,
                  field=key or "")
