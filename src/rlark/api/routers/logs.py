"""/api/v1/jobs/{name}/logs and /record."""

from __future__ import annotations

import logging
from typing import Annotated, Any, AsyncIterator, Callable, Literal

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Send

from rlark.api.deps import job_service
from rlark.api.routers.jobs import INT32_MAX, Reader
from rlark.api.security import access_check
from rlark.store import ProjectRole
from rlark.record.export import render
from rlark.services.jobs import JobService
from rlark import settings
from rlark.services.logs import (
    MAX_WHOLE_BYTES,
    follow_events,
    is_user_line,
    redact,
    tail_lines,
)

router = APIRouter(prefix="/api/v1/jobs", tags=["logs and records"])
log = logging.getLogger("rlark.api.logs")
#: a followed log checks this often (seconds) that its caller may still read it
REAUTHORIZE_SECONDS = 5.0
Service = Annotated[JobService, Depends(job_service)]


class EventStream(StreamingResponse):
    """A Server-Sent Events response that drops a client which does not take what was sent:
    a send still waiting after ``send_timeout`` seconds (the client read nothing while the
    server's socket buffers stayed full) ends the response and closes the connection (uvicorn
    also logs "ASGI callable returned without completing response" then). The stream's
    generator is closed whatever ends it (``on_close`` then runs)."""

    def __init__(self, content: AsyncIterator[str], send_timeout: float,
                 on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.send_timeout = send_timeout
        self.on_close = on_close
        #: the client was dropped for not reading
        self.dropped = False

    async def stream_response(self, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                body = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
                with anyio.move_on_after(self.send_timeout) as scope:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                if scope.cancelled_caught:
                    self.dropped = True
                    log.info("dropped a log follower that read nothing for %g s", self.send_timeout)
                    return  # uvicorn closes the connection of a response left incomplete
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                self.on_close()


@router.get("/{name}/logs", summary="Worker logs: tail, or follow as Server-Sent Events")
def get_logs(
    request: Request,
    name: str,
    jobs: Service,
    access: Reader,
    worker: str | None = None,
    role: str | None = None,
    rank: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None,
    run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    tail: Annotated[int | None, Query(ge=0, le=1_000_000, description="last N lines per Worker")] = None,
    follow: bool = False,
    lifecycle: Annotated[bool, Query(description=(
        "also RLark's own lifecycle lines (RLARK_EVENT {...}: phases and facts the bootstrap "
        "reports); hidden by default"))] = False,
):
    """Without ``follow``: ``{"workers": [{"name", "role", "nodeRank", "lines": [...]}]}``.
    With ``follow``: ``text/event-stream``: first a ``workers`` event (the chosen Worker names),
    then ``line`` events (``{"worker", "line"}``), and an ``end`` event once every chosen Worker
    has stopped and its log is read, or ``{"reason": "AccessEnded"}`` as soon as the caller's
    token, session or role no longer allows reading the Job. ``tail`` counts the lines shown (lifecycle lines only
    with ``lifecycle=true``); a lifecycle line never carries the Run's event token. Lines are
    cut at 1 MiB. A server follows at most ``RLARK_MAX_LOG_FOLLOWS`` logs at once (64), at most
    ``RLARK_MAX_LOG_FOLLOWS_PER_USER`` (8) for one user: beyond that 429 with ``Retry-After``.
    A client that reads nothing for ``RLARK_LOG_FOLLOW_SEND_TIMEOUT`` seconds (30) while the
    server has lines for it is disconnected."""
    chosen = jobs.worker_logs(name, run, worker, role, rank, access.project)
    keep = None if lifecycle else is_user_line
    if not follow:
        out = []
        for w in chosen:
            lines, size = tail_lines(w["log"], tail, keep)
            out.append({"name": w["name"], "role": w["role"], "nodeRank": w["nodeRank"],
                        "run": w["run"], "lines": [redact(line, w["mask"]) for line in lines],
                        "truncated": tail is None and size > MAX_WHOLE_BYTES})
        return {"workers": out}
    allowed = access_check(request, access.project, ProjectRole.viewer)
    limits = request.app.state.follow_limits
    user = access.principal.name or ""
    limits.acquire(user)  # 429 when this server or this user follows too many logs already

    def active() -> set[str]:
        try:
            return {w["name"] for w in jobs.worker_logs(name, run, None, None, None, access.project)
                    if w["active"]}
        except Exception:  # noqa: BLE001 - the Job was deleted meanwhile: nothing more comes
            return set()

    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            limits.release(user)

    try:
        events = follow_events(chosen, tail, keep, active, allowed,
                               reauthorize_seconds=REAUTHORIZE_SECONDS)
        return EventStream(events, send_timeout=settings.positive_float_env(
            "RLARK_LOG_FOLLOW_SEND_TIMEOUT", 30.0), on_close=release,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    except BaseException:
        release()
        raise


@router.get("/{name}/record", summary="The run record (json, yaml or md)")
def get_record(
    name: str,
    jobs: Service,
    access: Reader,
    run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    format: Literal["json", "yaml", "md"] = "json",
):
    rec = jobs.record(name, run, access.project)
    if format == "json":
        return rec
    media = "application/yaml" if format == "yaml" else "text/markdown"
    return Response(render(rec, format), media_type=media)
