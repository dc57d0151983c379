"""The web console: server-rendered pages (Jinja2 + htmx) over :class:`JobService`.

Pages: the Jobs list (``/jobs``), the Create Job wizard (``/create``; also edit and clone), and
a Job's detail (``/jobs/<name>``: overview, events, logs, run record, spec). Routes parse,
call the service, render; every label comes from the catalogs in ``catalogs/`` (English and
Simplified Chinese).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

HTMX_VERSION = "2.0.11"
STATIC_DIR = Path(__file__).parent / "static"


def mount_console(app: FastAPI) -> None:
    """Serve the console at ``/`` (its assets at ``/static``) on ``app``."""
    from rlark.console.routes import router

    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
