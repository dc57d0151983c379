"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, served with the assets
the ``fastapi-offline`` package ships instead of FastAPI's default CDN links: clusters RLark runs
on are often without internet, and a blank /docs page there explains nothing."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from rlark.api.security import allow_user

ASSETS_URL = "/static-docs"


def mount_docs(app: FastAPI) -> None:
    """Add ``/docs``, ``/redoc`` and their assets under :data:`ASSETS_URL` to ``app`` (created
    with ``docs_url=None, redoc_url=None``). URLs honour the ASGI ``root_path`` (a proxy prefix)."""
    assets = files("fastapi_offline") / "static"
    app.mount(ASSETS_URL, StaticFiles(directory=str(assets)), name="static-docs")

    @app.get("/docs", include_in_schema=False, dependencies=[allow_user()])
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False, dependencies=[allow_user()])
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} API",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png", with_google_fonts=False,
        )
