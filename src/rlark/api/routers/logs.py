"""/api/v1/jobs/{name}/logs and /record."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Annotated, Callable, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse

from rlark.api.deps import job_service
from rlark.api.routers.jobs import INT32_MAX, Reader
from rlark.api.security import access_check
from rlark.store import ProjectRole
from rlark.record import render
from rlark.services.jobs import JobService
from rlark.services.logs import (
    MAX_WHOLE_BYTES,
    follow_lines,
    is_user_line,
    redact,
    tail_lines,
)

router = APIRouter(prefix="/api/v1/jobs", tags=["logs and records"])
#: a followed log checks this often (seconds) that its caller may still read it
REAUTHORIZE_SECONDS = 5.0
Service = Annotated[JobService, Depends(job_service)]


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
    with ``lifecycle=true``); a lifecycle line never carries the Run's event token."""
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
    return StreamingResponse(_follow(jobs, name, access.project, run, chosen, tail, keep, allowed),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _follow(jobs: JobService, name: str, project: str, run: int | None, chosen: list[dict],
            tail: int | None, keep=None, allowed: Callable[[], bool] = lambda: True):
    q: queue.Queue = queue.Queue(maxsize=10000)
    stop = threading.Event()

    def active(worker: str) -> bool:
        if stop.is_set():
            return False
        try:
            return jobs.worker_logs(name, run, worker, None, None, project)[0]["active"]
        except Exception:
            return False

    def pump(w: dict) -> None:
        lines, offset = tail_lines(w["log"], 10 if tail is None else tail, keep)
        for line in lines:
            q.put((w["name"], redact(line, w["mask"])))
        for line in follow_lines(w["log"], offset, lambda: active(w["name"])):
            if keep is None or keep(line):
                q.put((w["name"], redact(line, w["mask"])))
        q.put((w["name"], None))

    yield f"event: workers\ndata: {json.dumps([w['name'] for w in chosen])}\n\n"
    threads = [threading.Thread(target=pump, args=(w,), daemon=True) for w in chosen]
    for t in threads:
        t.start()
    remaining = len(threads)
    recheck = time.monotonic() + REAUTHORIZE_SECONDS
    try:
        while remaining:
            if time.monotonic() >= recheck:
                if not allowed():
                    yield 'event: end\ndata: {"reason": "AccessEnded"}\n\n'
                    return
                recheck = time.monotonic() + REAUTHORIZE_SECONDS
            try:
                worker, line = q.get(timeout=max(0.05, recheck - time.monotonic()))
            except queue.Empty:
                yield ": keep-alive\n\n"
                continue
            if line is None:
                remaining -= 1
                continue
            yield f"event: line\ndata: {json.dumps({'worker': worker, 'line': line})}\n\n"
        yield "event: end\ndata: {}\n\n"
    finally:
        stop.set()


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
