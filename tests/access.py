"""Credentials for tests: the site administrator's token of a store, users with a role in a
project, and a TestClient that sends a token (and a Host the server accepts)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from rlark.services.accounts import AccountService
from rlark.services.auth import OPEN_PRINCIPAL, AuthService
from rlark.store import ProjectRole, Store

BASE_URL = "http://127.0.0.1"  # the TestClient's default host ("testserver") is not allowed


def admin_token(store: Store) -> str:
    """A token of the site administrator ``admin`` (created on a store without users)."""
    auth = AuthService(store)
    token = auth.bootstrap()
    if token is not None:
        return token
    return AccountService(auth).create_token(OPEN_PRINCIPAL, None, "test", user="admin")["token"]


def make_user(store: Store, name: str, project: str | None = "default",
              role: ProjectRole | str | None = ProjectRole.member, admin: bool = False,
              password: str | None = None) -> str:
    """A new user (a role in ``project`` unless None) and a token of theirs; projects other
    than ``default`` are created when missing."""
    accounts = AccountService(AuthService(store))
    if project is not None:
        names = [p["name"] for p in accounts.list_projects(OPEN_PRINCIPAL)]
        if project not in names:
            accounts.create_project(OPEN_PRINCIPAL, None, project)
    user = accounts.create_user(OPEN_PRINCIPAL, None, name, admin=admin, password=password,
                                project=project, role=ProjectRole(role) if role else None,
                                token_name="test")
    return user["token"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def api_client(app, token: str | None, **kw) -> TestClient:
    """A TestClient for ``app`` on an allowed Host, sending ``token`` (None: no credentials)."""
    kw.setdefault("raise_server_exceptions", False)
    return TestClient(app, base_url=BASE_URL, headers=bearer(token) if token else {}, **kw)
