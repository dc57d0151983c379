"""Wiring for ``rlark server``: store -> runtime -> controller -> services -> API."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from rlark import settings
from rlark.api.app import create_app
from rlark.controller.loop import Controller
from rlark.runtimes.local import LocalRuntime
from rlark.services.jobs import JobService
from rlark.store import Store
from rlark.store.lock import ControllerLock, owner_info


def build_app(database_url: str | None = None, server_url: str | None = None) -> FastAPI:
    """The full server app on the local runtime; the controller runs with the app.

    Raises:
        ValueError: a setting is unusable (e.g. ``RLARK_RAY_TMP`` too long), before anything runs.
        StoreBusy: another server already runs on this store.
    """
    settings.ray_tmp_root()
    store = Store(database_url)
    lock = ControllerLock(store.engine, owner_info(server_url)).acquire()
    controller = Controller(store, LocalRuntime(), on_shutdown=lock.release)
    service = JobService(store, controller.wake, runtime="local")
    return create_app(service, controller)


def serve(host: str, port: int, database_url: str | None = None, log_level: str = "info") -> None:
    """Run the server until SIGINT/SIGTERM; on shutdown every local Worker is stopped."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = build_app(database_url, f"http://{host}:{port}")
    uvicorn.run(app, host=host, port=port, log_level=log_level)
