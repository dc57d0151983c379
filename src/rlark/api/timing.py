"""The time each HTTP request takes, by route, for ``GET /metrics``
(:class:`rlark.services.metrics.ServerMetrics`)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlark.services.metrics import ServerMetrics


class RequestTiming:
    """ASGI middleware: seconds from a request's arrival to its response's last byte (a followed
    log stream counts until it ends), labelled with the method, the route's path template
    (``scope["route"]``, which the router sets) and the status code. A plain ASGI middleware,
    not Starlette's ``BaseHTTPMiddleware``, so streamed responses pass through untouched."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # an app that raises before it answers is answered 500 outside

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None)
            self.metrics.observe_request(scope["method"], route, status, time.perf_counter() - began)
