"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, served with the assets
the ``fastapi-offline`` package ships instead of FastAPI's default CDN links: clusters RLark runs
on are often without internet, and a blank /docs page there explains nothing.

Both pages carry a Content-Security-Policy of their own, looser than the console's
(:data:`rlark.api.security.CONTENT_SECURITY_POLICY`) where Swagger UI and ReDoc need it: the one
inline script FastAPI's page has runs by a nonce made per answer, and their styles may be inline
(both libraries set styles from JavaScript)."""

from __future__ import annotations

import secrets
from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from rlark.api.security import allow_user

ASSETS_URL = "/static-docs"


def _docs_policy(nonce: str) -> str:
    """The docs pages' Content-Security-Policy (ReDoc searches in a Web Worker made from a
    ``blob:`` URL)."""
    return (f"default-src 'self'; script-src 'self' 'nonce-{nonce}'; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
            "font-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'")


def _with_nonce(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a nonce on its inline scripts (``<script>`` without ``src``) and the
    policy that lets exactly those run."""
    nonce = secrets.token_urlsafe(18)
    body = bytes(page.body).decode("utf-8").replace("<script>", f'<script nonce="{nonce}">')
    return HTMLResponse(body, status_code=page.status_code,
                        headers={"Content-Security-Policy": _docs_policy(nonce)})


def mount_docs(app: FastAPI) -> None:
    """Add ``/docs``, ``/redoc`` and their assets under :data:`ASSETS_URL` to ``app`` (created
    with ``docs_url=None, redoc_url=None``). URLs honour the ASGI ``root_path`` (a proxy prefix)."""
    assets = files("fastapi_offline") / "static"
    app.mount(ASSETS_URL, StaticFiles(directory=str(assets)), name="static-docs")

    @app.get("/docs", include_in_schema=False, dependencies=[allow_user()])
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _with_nonce(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        ))

    @app.get("/redoc", include_in_schema=False, dependencies=[allow_user()])
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _with_nonce(get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} API",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png", with_google_fonts=False,
        ))
