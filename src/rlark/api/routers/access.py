"""Who may do what: /api/v1/me, login, tokens, users, projects and their members, audit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.concurrency import run_in_threadpool

from rlark.api.security import (Access, ProjectAccess, allow_admin, allow_project, allow_public,
                                allow_user)
from rlark.services.accounts import MAX_TOKEN_DAYS, AccountService
from rlark.services.auth import AuthService
from rlark.store import ProjectRole

router = APIRouter(prefix="/api/v1", tags=["access"])
INT32_MAX = 2**31 - 1


def accounts(request: Request) -> AccountService:
    return request.app.state.accounts


def auth_service(request: Request) -> AuthService:
    return request.app.state.auth


Accounts = Annotated[AccountService, Depends(accounts)]
User = Annotated[Access, allow_user()]
Admin = Annotated[Access, allow_admin()]
#: a role in the ``{project}`` of the path
ProjectViewer = Annotated[ProjectAccess, allow_project(ProjectRole.viewer, in_path=True)]
ProjectAdmin = Annotated[ProjectAccess, allow_project(ProjectRole.admin, in_path=True)]
Name = Annotated[str, Field(min_length=1, max_length=63)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LoginBody(_Body):
    user: Name
    password: Annotated[str, Field(min_length=1, max_length=1024)]
    token_name: Name = Field("cli", alias="tokenName")
    expires_in_days: Annotated[StrictInt | None, Field(ge=1, le=MAX_TOKEN_DAYS, alias="expiresInDays")] = 30


class TokenBody(_Body):
    name: Name
    expires_in_days: Annotated[StrictInt | None, Field(ge=1, le=MAX_TOKEN_DAYS, alias="expiresInDays")] = None
    user: Name | None = Field(None, description="site administrators: make it for this user")


class UserBody(_Body):
    name: Name
    admin: StrictBool = False
    password: Annotated[str | None, Field(max_length=1024)] = None
    project: Name | None = None
    role: ProjectRole | None = None
    token_name: Name | None = Field(None, alias="tokenName",
                                    description="also make a first API token (shown once)")


class UserPatch(_Body):
    disabled: StrictBool | None = None
    admin: StrictBool | None = None
    password: Annotated[str | None, Field(max_length=1024)] = None
    current_password: Annotated[str | None, Field(
        max_length=1024, alias="currentPassword",
        description="your current password, to change your own")] = None


class ProjectBody(_Body):
    name: Name
    namespace: Name | None = None
    #: the queue its Runs wait in (Kubernetes: a Kueue LocalQueue of its namespace; "none":
    #: none; left out: the server's, --k8s-queue)
    queue: Name | None = None


class QueueBody(_Body):
    """A project's queue: a name (Kubernetes: a Kueue LocalQueue of its namespace), "none" for
    none, null for the server's (``rlark server --k8s-queue``)."""

    queue: Name | None


class MemberBody(_Body):
    role: ProjectRole


class QuotaBody(_Body):
    """A project's own quotas; a quota left out stays as it is, null returns it to the server's
    default."""

    max_jobs: Annotated[StrictInt | None, Field(ge=1, le=1_000_000, alias="maxJobs")] = None
    max_active_workers: Annotated[StrictInt | None, Field(ge=1, le=1_000_000,
                                                          alias="maxActiveWorkers")] = None


# --- me and login ------------------------------------------------------------------------------


@router.get("/me", summary="Who you are: name, site admin, your role per project")
def me(svc: Accounts, access: User) -> dict:
    return svc.me(access.principal)


@router.post("/login", summary="Trade a user name and password for a new API token",
             dependencies=[allow_public()])
async def login(request: Request, body: LoginBody, svc: Accounts) -> dict:
    """For ``rlark login --user NAME``: checks the password (failed attempts are audited and
    rate limited: 429 with Retry-After), then makes an API token (``token``, shown once)."""
    client = request.client.host if request.client else None
    auth: AuthService = request.app.state.auth
    user = await run_in_threadpool(auth.check_password, body.user, body.password, client)
    principal = await run_in_threadpool(auth.principal_for, user.id)
    return await run_in_threadpool(svc.create_token, principal, client, body.token_name,
                                   expires_in_days=body.expires_in_days)


# --- tokens ---------------------------------------------------------------------------------------


@router.get("/tokens", summary="Your API tokens (site administrators: anyone's)")
def list_tokens(svc: Accounts, access: User,
                user: Annotated[str | None, Query(max_length=63)] = None,
                all: bool = False) -> list[dict]:
    return svc.list_tokens(access.principal, user, all)


@router.post("/tokens", status_code=201, summary="Make an API token (shown once, as `token`)")
def create_token(body: TokenBody, svc: Accounts, access: User) -> dict:
    return svc.create_token(access.principal, access.client, body.name,
                            expires_in_days=body.expires_in_days, user=body.user)


@router.delete("/tokens/{token_id}", summary="Revoke an API token")
def revoke_token(token_id: Annotated[int, Path(ge=1, le=INT32_MAX)], svc: Accounts,
                 access: User) -> dict:
    return svc.revoke_token(access.principal, access.client, token_id)


# --- users ---------------------------------------------------------------------------------------


@router.get("/users", summary="Users (site administrators)")
def list_users(svc: Accounts, access: Admin) -> list[dict]:
    return svc.list_users(access.principal)


@router.post("/users", status_code=201, summary="Create a user (site administrators)")
def create_user(body: UserBody, svc: Accounts, access: Admin) -> dict:
    return svc.create_user(access.principal, access.client, body.name, admin=body.admin,
                           password=body.password, project=body.project, role=body.role,
                           token_name=body.token_name)


@router.get("/users/{name}", summary="A user (yourself, or anyone for site administrators)")
def get_user(name: str, svc: Accounts, access: User) -> dict:
    return svc.get_user(access.principal, name)


@router.patch("/users/{name}", summary="Disable/enable, make admin, or set a password")
def update_user(name: str, body: UserPatch, svc: Accounts, access: User) -> dict:
    """Anyone may change their own password, giving the current one (``currentPassword``; a
    wrong one is refused with 403, audited and counted as a failed login: 429 with
    ``Retry-After`` after too many); site administrators set other users' passwords without
    theirs. Everything else is for site administrators."""
    return svc.update_user(access.principal, access.client, name, disabled=body.disabled,
                           admin=body.admin, password=body.password,
                           current_password=body.current_password)


@router.delete("/users/{name}", summary="Delete a user (site administrators)")
def delete_user(name: str, svc: Accounts, access: Admin) -> dict:
    return svc.delete_user(access.principal, access.client, name)


# --- projects ---------------------------------------------------------------------------------------


@router.get("/projects", summary="Projects you have a role in (site administrators: all)")
def list_projects(svc: Accounts, access: User) -> list[dict]:
    return svc.list_projects(access.principal)


@router.post("/projects", status_code=201, summary="Create a project (site administrators)")
def create_project(body: ProjectBody, svc: Accounts, access: Admin) -> dict:
    return svc.create_project(access.principal, access.client, body.name, body.namespace,
                              body.queue)


@router.get("/projects/{project}", summary="A project and its members")
def get_project(project: str, svc: Accounts, access: ProjectViewer) -> dict:
    return svc.get_project(access.principal, project)


@router.delete("/projects/{project}", summary="Delete an empty project (site administrators)")
def delete_project(project: str, svc: Accounts, access: Admin) -> dict:
    return svc.delete_project(access.principal, access.client, project)


@router.put("/projects/{project}/quotas",
            summary="Set a project's own quotas: maxJobs, maxActiveWorkers (site administrators)")
def set_quotas(project: str, body: QuotaBody, svc: Accounts, access: Admin) -> dict:
    """``{"maxJobs": n, "maxActiveWorkers": n}``: a quota left out stays as it is; ``null``
    returns it to the server's default. The answer is the project, with ``quotas`` (what holds
    now), ``quotasSet`` (the project's own) and ``usage``."""
    given = body.model_dump(by_alias=True, exclude_unset=True)
    return svc.set_quotas(access.principal, access.client, project, given)


@router.put("/projects/{project}/queue",
            summary="Set the queue a project's new Runs wait in (site administrators)")
def set_queue(project: str, body: QueueBody, svc: Accounts, access: Admin) -> dict:
    """``{"queue": "team-a"}`` (on Kubernetes a Kueue LocalQueue of the project's namespace),
    ``{"queue": "none"}`` for none, ``{"queue": null}`` for the server's. The answer is the
    project, with ``queue`` (what its new Runs use) and ``queueSet`` (its own setting)."""
    return svc.set_queue(access.principal, access.client, project, body.queue)


@router.put("/projects/{project}/members/{user}", summary="Give a user a role in the project")
def set_member(project: str, user: str, body: MemberBody, svc: Accounts, access: ProjectAdmin) -> dict:
    return svc.set_member(access.principal, access.client, project, user, body.role)


@router.delete("/projects/{project}/members/{user}", summary="Take a user's role in the project away")
def remove_member(project: str, user: str, svc: Accounts, access: ProjectAdmin) -> dict:
    return svc.remove_member(access.principal, access.client, project, user)


# --- audit ---------------------------------------------------------------------------------------------


@router.get("/audit", summary="Audit log, newest first (site admins: all; project admins: theirs)")
def list_audit(
    svc: Accounts,
    access: User,
    project: Annotated[str | None, Query(max_length=63)] = None,
    actor: Annotated[str | None, Query(max_length=63, alias="user")] = None,
    action: Annotated[str | None, Query(max_length=32, pattern=r"^[a-z._]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> dict:
    return svc.audit(access.principal, project=project, actor=actor, action=action, limit=limit,
                     offset=offset)

