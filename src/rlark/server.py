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

RUNTIMES = ("local", "kubernetes")


def build_app(database_url: str | None = None, server_url: str | None = None,
              runtime: str = "local", namespace: str | None = None) -> FastAPI:
    """The full server app; the controller runs with the app.

    ``runtime``: ``local`` (process groups on this machine, the default) or ``kubernetes``
    (Pods in ``namespace``; default: the in-cluster ServiceAccount's namespace or the kubeconfig
    context's). Kubernetes settings from the environment: ``RLARK_K8S_PENDING_TIMEOUT``,
    ``RLARK_K8S_IMAGE_PULL_GRACE``, ``RLARK_K8S_MOUNT_GRACE`` (seconds),
    ``RLARK_K8S_RAY_DASHBOARD=1``.

    Raises:
        ValueError: a setting is unusable (e.g. ``RLARK_RAY_TMP`` too long, an unknown runtime,
            no Kubernetes configuration), before anything runs.
        StoreBusy: another server already runs on this store.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; use one of {', '.join(RUNTIMES)}")
    inventory = None
    pending = None
    if runtime == "kubernetes":
        from rlark.runtimes.kubernetes.client import KubeError
        from rlark.runtimes.kubernetes.runtime import KubernetesRuntime

        policy = settings.k8s_status_policy()
        pending = policy.pending_timeout_seconds
        try:
            rt = KubernetesRuntime(namespace, policy=policy, ray_dashboard=settings.k8s_ray_dashboard())
        except KubeError as exc:
            raise ValueError(str(exc)) from None
        inventory = rt.inventory
    else:
        settings.ray_tmp_root()
        rt = LocalRuntime()
    store = Store(database_url)
    lock = ControllerLock(store.engine, owner_info(server_url)).acquire()
    controller = Controller(store, rt, on_shutdown=lock.release)
    service = JobService(store, controller.wake, runtime=runtime, inventory=inventory,
                         pending_timeout=pending)
    return create_app(service, controller)


def serve(host: str, port: int, database_url: str | None = None, log_level: str = "info",
          runtime: str = "local", namespace: str | None = None) -> None:
    """Run the server until SIGINT/SIGTERM; on shutdown every Worker it started is stopped."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = build_app(database_url, f"http://{host}:{port}", runtime=runtime, namespace=namespace)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
