"""/api/v1/jobs/{name}/logs and /record."""

from __future__ import annotations

import json
import queue
import threading
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from rlark.api.deps import job_service
from rlark.api.routers.jobs import INT32_MAX, Reader
from rlark.record import render
from rlark.services.jobs import JobService
from rlark.services.logs import MAX_WHOLE_BYTES, follow_lines, tail_lines

router = APIRouter(prefix="/api/v1/jobs", tags=["logs and records"])
Service = Annotated[JobService, Depends(job_service)]


@router.get("/{name}/logs", summary="Worker logs: tail, or follow as Server-Sent Events")
def get_logs(
    name: str,
    jobs: Service,
    access: Reader,
    worker: str | None = None,
    role: str | None = None,
    rank: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None,
    run: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    tail: Annotated[int | None, Query(ge=0, le=1_000_000, description="last N lines per Worker")] = None,
    follow: bool = False,
):
    """Without ``follow``: ``{"workers": [{"name", "role", "nodeRank", "lines": [...]}]}``.
    With ``follow``: ``text/event-stream``: first a ``workers`` event (the chosen Worker names),
    then ``line`` events (``{"worker", "line"}``), and an ``end`` event once every chosen Worker
    has stopped and its log is read."""
    chosen = jobs.worker_logs(name, run, worker, role, rank, access.project)
    if not follow:
        out = []
        for w in chosen:
            lines, size = tail_lines(w["log"], tail)
            out.append({"name": w["name"], "role": w["role"], "nodeRank": w["nodeRank"],
                        "run": w["run"], "lines": lines,
                        "truncated": tail is None and size > MAX_WHOLE_BYTES})
        return {"workers": out}
    return StreamingResponse(_follow(jobs, name, access.project, run, chosen, tail), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _follow(jobs: JobService, name: str, project: str, run: int | None, chosen: list[dict],
            tail: int | None):
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
        lines, offset = tail_lines(w["log"], 10 if tail is None else tail)
        for line in lines:
            q.put((w["name"], line))
        for line in follow_lines(w["log"], offset, lambda: active(w["name"])):
            q.put((w["name"], line))
        q.put((w["name"], None))

    yield f"event: workers\ndata: {json.dumps([w['name'] for w in chosen])}\n\n"
    threads = [threading.Thread(target=pump, args=(w,), daemon=True) for w in chosen]
    for t in threads:
        t.start()
    remaining = len(threads)
    try:
        while remaining:
            try:
                worker, line = q.get(timeout=15)
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
