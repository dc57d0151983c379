"""The console's Job pages: the list, the node inventory, a Job's page with its tabs
(overview, events, logs, record, spec) and live refresh, its actions (stop, start, restart,
delete), downloads of its logs and record, and the comparison of two Runs.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlsplit

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from rlark.api.security import Access, allow_public, allow_user
from rlark.console import curves_chart, logview, timeline_chart, usage_chart
from rlark.console.i18n import COOKIE, LOCALES, Translator
from rlark.console.wizard_review import preview_yaml
from rlark.status import ACTIVE, Phase
from rlark.findings import Finding
from rlark.record.export import render as render_record
from rlark.services.auth import DEFAULT_PROJECT
from rlark.services.errors import NotFound, ServiceError
from rlark.services.jobs import JobService
from rlark.spec import spec_changes
from rlark.console.pages import (
    PHASES,
    TABS,
    Reader,
    Writer,
    _accepted_form,
    _current,
    _flash,
    _gone,
    _htmx,
    _int,
    _locale,
    _redirect,
    _refuse,
    _render,
    _safe_next,
    _service,
    _text,
    project_url,
)

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 20
LOG_TAIL = 1000  # lines per Worker shown on the Logs tab (downloads have all)
ACTIONS = ("stop", "start", "restart", "delete")


@router.get("/", dependencies=[allow_user()])
def home() -> Response:
    return RedirectResponse("/jobs", status_code=307)


@router.get("/lang/{locale}", dependencies=[allow_public()])
def set_language(locale: str, next: str | None = None) -> Response:
    resp = RedirectResponse(_safe_next(next, "/jobs"), status_code=303)
    if locale in LOCALES:
        resp.set_cookie(COOKIE, locale, max_age=365 * 24 * 3600, path="/", samesite="lax")
    return resp


def _list_context(service: JobService, project: str, current: str, phase_text: str | None,
                  q: str | None, page: int | None) -> dict:
    phase = Phase(phase_text) if phase_text in PHASES else None  # anything else: no filter
    q = _text(q, 63) or None
    page = page or 1
    data = service.list(phase=phase, q=q, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE,
                        projects=[project])
    pages = max((data["total"] + PAGE_SIZE - 1) // PAGE_SIZE, 1)
    if page > pages:
        page = pages
        data = service.list(phase=phase, q=q, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE,
                            projects=[project])
    params = {k: v for k, v in (("phase", phase), ("q", q)) if v}
    return {
        "jobs": data["items"], "total": data["total"], "phase": phase or "", "q": q or "",
        "page": page, "pages": pages, "first": (page - 1) * PAGE_SIZE + 1 if data["items"] else 0,
        "last": (page - 1) * PAGE_SIZE + len(data["items"]),
        "query": urlencode({**params, "page": page}),
        "page_url": lambda n: project_url("/jobs?" + urlencode({**params, "page": n}), project, current),
        "list_url": project_url("/jobs?" + urlencode({**params, "page": page}), project, current),
    }


@router.get("/jobs")
def jobs_page(request: Request, access: Reader, phase: str | None = None, q: str | None = None,
              page: str | None = None) -> Response:
    ctx = _list_context(_service(request), access.project, _current(request), phase, q,
                        _int(page, 1))
    if _htmx(request):  # the filter form: the table only, and the address bar follows
        resp = _render(request, "_jobs_table.html", full=False, **ctx)
        resp.headers["HX-Push-Url"] = ctx["list_url"]
        return resp
    return _render(request, "jobs.html", **ctx)


@router.get("/jobs/_table")
def jobs_table(request: Request, access: Reader, phase: str | None = None, q: str | None = None,
               page: str | None = None) -> Response:
    """The table alone, for the list's live refresh."""
    ctx = _list_context(_service(request), access.project, _current(request), phase, q,
                        _int(page, 1))
    return _render(request, "_jobs_table.html", full=False, **ctx)


@router.get("/nodes", dependencies=[allow_user()])
def nodes_page(request: Request) -> Response:
    """The node inventory (what ``rlark nodes`` lists)."""
    return _render(request, "nodes.html", **_service(request).nodes())


@router.get("/queue")
def queue_page(request: Request, access: Annotated[Access, allow_user()]) -> Response:
    """The Runs waiting to be admitted, by queue (what ``rlark queue`` lists): every project's
    for site administrators, the caller's projects' for others."""
    from rlark.services.queue import pending

    service = _service(request)
    return _render(request, "queue.html", **pending(service.store, service.profile,
                                                    access.principal.readable_projects()))


@router.get("/nodes/_table", dependencies=[allow_user()])
def nodes_table(request: Request) -> Response:
    """The table alone, for the page's live refresh."""
    return _render(request, "_nodes_table.html", full=False, **_service(request).nodes())


def _job_context(service: JobService, name: str, project: str, run: int | None) -> dict:
    """The Job, the Run shown (``run``, default the current one; an unknown number: the current
    one) and its Workers. Every Run shown, current or earlier, comes from the same view
    (:meth:`JobService.run`), so each tab reads the same fields whichever Run it shows."""
    job = service.get(name, project)
    current = job["currentRun"]
    shown = current
    if run is not None and (current is None or run != current["number"]) \
            and any(r["number"] == run for r in job["runs"]):
        try:
            shown = service.run(name, run, project)
        except NotFound:  # deleted meanwhile: the current one
            shown = current
    workers = (shown or {}).get("workers", [])
    live = bool(job["phase"] in ACTIVE or job["deleting"]
                or any(w["startedAt"] and not w["finishedAt"] for w in workers))
    is_current = bool(current and shown and shown["number"] == current["number"])
    return {"job": job, "run": shown, "workers": workers, "live": live,
            "is_current": is_current,
            # the Run shown is still under way: its logs may grow, so they can be followed
            "run_live": bool(shown and shown["phase"] in ACTIVE),
            "roles": [r["name"] for r in job["roles"]],
            # the Job's Findings (warnings and advice: a stored Job has no errors)
            "findings": [Finding.model_validate(f) for f in job.get("findings") or []]}


def _timeline(service: JobService, name: str, ctx: dict, project: str) -> dict | None:
    """The chart of the shown Run's timeline (console/timeline_chart.py), for the overview."""
    if not ctx["run"]:
        return None
    try:
        return timeline_chart.chart(service.timeline(name, ctx["run"]["number"], project))
    except NotFound:  # deleted meanwhile
        return None


#: the tags a Curves view was asked for (``?tag=...``, repeatable)
TagsQuery = Annotated[list[str] | None, Query()]
#: tags and characters of a tag one request may ask for
MAX_TAGS_ASKED, MAX_TAG_TEXT = 50, 200


def _tags(tag: list[str] | None) -> list[str]:
    return [_text(t, MAX_TAG_TEXT) for t in (tag or [])[:MAX_TAGS_ASKED] if _text(t, MAX_TAG_TEXT)]


def _curves(request: Request, service: JobService, name: str, ctx: dict, project: str,
            tags: list[str]) -> dict:
    """The Curves tab of the Run shown (console/curves_chart.py, services/curves.py): its
    charts, the tag form, and while the Run is under way the address of its refresh."""
    from rlark.services.curves import run_scalars

    number = ctx["run"]["number"] if ctx["run"] else None
    data: dict[str, Any] = {"scalars": {}, "tags": [], "why": None}
    if number is not None:
        try:
            data = run_scalars(service, name, number, project)
        except NotFound:  # deleted meanwhile
            pass
    keep = [("tab", "curves")] + ([("run", str(number))] if number and not ctx["is_current"] else [])
    if project != DEFAULT_PROJECT or _current(request) != DEFAULT_PROJECT:
        keep.append(("project", project))
    live_q = urlencode([("run", number)] + [("tag", t) for t in tags]) if number else ""
    return {"curves": curves_chart.charts([(f"{name}:{number}", data)], tags),
            "curves_form_action": f"/jobs/{quote(name)}", "curves_hidden": keep,
            "curves_url": project_url(f"/jobs/{quote(name)}/_curves?{live_q}", project,
                                      _current(request)) if ctx["run_live"] else None}


@router.get("/jobs/{name}/_curves")
def job_curves(request: Request, name: str, access: Reader, run: str | None = None,
               tag: TagsQuery = None) -> Response:
    """The Curves section alone, for its refresh while the Run is under way."""
    service = _service(request)
    try:
        ctx = _job_context(service, name, access.project, _int(run))
    except NotFound:
        return _gone(request, name)
    ctx.update(_curves(request, service, name, ctx, access.project, _tags(tag)))
    return _render(request, "_curves.html", full=False, **ctx)


def _usage(request: Request, service: JobService, name: str, ctx: dict, project: str) -> dict:
    """The Resources tab of the Run shown (console/usage_chart.py, services/usage.py), and
    while the Run is under way the address of its refresh."""
    number = ctx["run"]["number"] if ctx["run"] else None
    data: dict[str, Any] = {"workers": [], "idleGpus": []}
    if number is not None:
        try:
            data = service.usage(name, number, project)
        except NotFound:  # deleted meanwhile
            pass
    return {"usage": usage_chart.charts(data),
            "usage_url": project_url(f"/jobs/{quote(name)}/_usage?{urlencode([('run', number)])}",
                                     project, _current(request))
            if ctx["run_live"] and number else None}


@router.get("/jobs/{name}/_usage")
def job_usage(request: Request, name: str, access: Reader, run: str | None = None) -> Response:
    """The Resources section alone, for its refresh while the Run is under way."""
    service = _service(request)
    try:
        ctx = _job_context(service, name, access.project, _int(run))
    except NotFound:
        return _gone(request, name)
    ctx.update(_usage(request, service, name, ctx, access.project))
    return _render(request, "_usage.html", full=False, **ctx)


@router.get("/jobs/{name}")
def job_page(request: Request, name: str, access: Reader, tab: str = "overview",
             run: str | None = None, role: str | None = None, worker: str | None = None,
             q: str | None = None, lifecycle: str | None = None,
             order: str | None = None, tag: TagsQuery = None) -> Response:
    service = _service(request)
    project = access.project
    tab = tab if tab in TABS else "overview"
    try:
        ctx = _job_context(service, name, project, _int(run))
    except NotFound:
        return _gone(request, name)
    ctx.update(tab=tab, role=_text(role, 63), worker=_text(worker, 63), q=_text(q, 200),
               lifecycle=bool(lifecycle), order=order if order in logview.ORDERS else "worker")
    number = ctx["run"]["number"] if ctx["run"] else None
    if tab == "overview":
        ctx["timeline"] = _timeline(service, name, ctx, project)
    elif tab == "events":
        ctx["events"] = list(reversed(service.events(name, _int(run), project)))
        ctx["events_run"] = _int(run)
    elif tab == "logs" and number is not None:
        try:
            chosen = service.worker_logs(name, number, ctx["worker"] or None, ctx["role"] or None,
                                         None, project)
        except NotFound:
            chosen = []
        ctx["chosen"] = chosen
        lines = logview.collect(chosen, LOG_TAIL, ctx["q"] or None, ctx["lifecycle"],
                                ctx["order"])
        ctx["lines_html"] = logview.as_html(lines, prefix=len(chosen) > 1)
        ctx["line_count"] = len(lines)
        ctx["error_count"] = sum(1 for line in lines if logview.is_error(line.text))
        params = {k: v for k, v in (("run", number), ("role", ctx["role"]),
                                    ("worker", ctx["worker"])) if v}
        shown = {**({"lifecycle": "1"} if ctx["lifecycle"] else {}),
                 **({"order": "time"} if ctx["order"] == "time" else {})}
        ctx["log_query"] = urlencode({**params, **({"q": ctx["q"]} if ctx["q"] else {}), **shown})
        ctx["follow_url"] = f"/api/v1/jobs/{quote(name)}/logs?" + urlencode(
            {**params, "follow": "true", "tail": LOG_TAIL,
             **({"lifecycle": "true"} if ctx["lifecycle"] else {}),
             **({"project": project} if project != DEFAULT_PROJECT else {})})
    elif tab == "curves":
        ctx.update(_curves(request, service, name, ctx, project, _tags(tag)))
    elif tab == "resources":
        ctx.update(_usage(request, service, name, ctx, project))
    elif tab == "outputs" and number is not None:
        from rlark.services.outputs import list_outputs

        ctx["outputs"] = list_outputs(service, name, number, project)
    elif tab == "record" and number is not None:
        ctx["record"] = service.record(name, number, project)
    elif tab == "spec":  # what the Job (an earlier Run: that Run) set, defaults left out
        spec = ctx["job"]["spec"] if ctx["is_current"] or not ctx["run"] else ctx["run"]["spec"]
        ctx["spec_yaml"] = preview_yaml(spec_changes(spec))
    return _render(request, "job.html", **ctx)


@router.get("/jobs/{name}/_live")
def job_live(request: Request, name: str, access: Reader, tab: str = "overview",
             run: str | None = None) -> Response:
    """The live part of a Job's page (status, actions, and the overview or events tab), for
    polling while the Job is active."""
    service = _service(request)
    try:
        ctx = _job_context(service, name, access.project, _int(run))
    except NotFound:
        resp = Response(status_code=200, headers={
            "HX-Redirect": project_url("/jobs", access.project, _current(request))})
        return _flash(resp, "ok", "flash.deleted", name=name)
    ctx.update(tab=tab if tab in TABS else "overview", role="", worker="", q="",
               lifecycle=False, order="worker")
    if ctx["tab"] == "overview":
        ctx["timeline"] = _timeline(service, name, ctx, access.project)
    elif ctx["tab"] == "events":
        ctx["events"] = list(reversed(service.events(name, _int(run), access.project)))
        ctx["events_run"] = _int(run)
    return _render(request, "_job_live.html", full=False, **ctx)


@router.post("/jobs/{name}/{action}")
async def job_action(request: Request, name: str, action: str, access: Writer) -> Response:
    if action not in ACTIONS:
        return _refuse(request, 404, "error.noPage")
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    job_path = f"/jobs/{quote(name)}"
    back = project_url(job_path, access.project, _current(request))
    nxt = _safe_next(form.get("next"), back)
    service = _service(request)
    # a restart resumes from the last checkpoint of the Run before when the form asks
    extra = {"resume": True} if action == "restart" and form.get("resume") == "1" else {}
    try:
        result = await run_in_threadpool(lambda: getattr(service, action)(
            name, access.project, access.actor, **extra))
    except ServiceError as exc:
        return _flash(_redirect(request, nxt), "error", text=exc.message)
    if action == "delete":
        gone_to = urlsplit(nxt).path
        if gone_to == job_path or gone_to.startswith(job_path + "/"):
            nxt = project_url("/jobs", access.project, _current(request))
        key = "flash.deleted" if result.get("deleted") else "flash.deleting"
        return _flash(_redirect(request, nxt), "ok", key, name=name)
    return _flash(_redirect(request, nxt), "ok", "flash.resume" if extra else f"flash.{action}",
                  name=name, run=(result.get("currentRun") or {}).get("number", ""))


# --- downloads -------------------------------------------------------------------------------


def _attachment(body: str, filename: str, media: str) -> Response:
    return Response(body, media_type=media, headers={
        "Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"})


@router.get("/jobs/{name}/outputs/{output}/file")
def download_output(request: Request, name: str, output: str, access: Reader,
                    path: str = "", run: str | None = None) -> Response:
    """One file of a Run's output (:func:`rlark.services.outputs.output_file`, as ``rlark
    outputs get``), for the Outputs tab's links."""
    from rlark.services.outputs import output_file

    try:
        filename, size, chunks = output_file(_service(request), name, _int(run), access.project,
                                             _text(output, 63), _text(path, 4096))
    except ServiceError as exc:
        return PlainTextResponse(exc.message + "\n", status_code=exc.status)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in filename)[:200] or "output"
    return StreamingResponse(chunks, media_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="{safe}"', "Content-Length": str(size),
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


@router.get("/jobs/{name}/logs.{fmt}")
def download_logs(request: Request, name: str, fmt: str, access: Reader, run: str | None = None,
                  role: str | None = None, worker: str | None = None,
                  q: str | None = None, lifecycle: str | None = None,
                  order: str | None = None) -> Response:
    if fmt not in ("txt", "csv"):
        return _refuse(request, 404, "error.noPage")
    service = _service(request)
    try:
        chosen = service.worker_logs(name, _int(run), _text(worker, 63) or None,
                                     _text(role, 63) or None, None, access.project)
    except NotFound as exc:
        return PlainTextResponse(exc.message + "\n", status_code=404)
    number = chosen[0]["run"]
    media = "text/csv; charset=utf-8" if fmt == "csv" else "text/plain; charset=utf-8"
    return StreamingResponse(
        logview.stream(chosen, _text(q) or None, fmt, bool(lifecycle),
                       order if order in logview.ORDERS else "worker"), media_type=media,
        headers={"Content-Disposition": f'attachment; filename="{name}-run{number}-logs.{fmt}"',
                 "Cache-Control": "no-store"})


@router.get("/jobs/{name}/compare")
def compare_runs(request: Request, name: str, access: Reader, a: str | None = None,
                 b: str | None = None, tag: TagsQuery = None) -> Response:
    """Two runs compared (:func:`rlark.services.records.diff_runs`, as ``rlark record diff``):
    ``a`` and ``b`` are ``JOB`` or ``JOB:RUN`` of the page's project (``a`` defaults to this
    Job's current Run, ``b`` to the run before ``a``)."""
    from rlark.services.errors import Invalid
    from rlark.services.records import diff_runs

    t = Translator(_locale(request))
    try:
        _service(request).get(name, access.project)  # this page's Job: 404 as any Job page
    except NotFound:
        return _gone(request, name)
    try:
        diff = diff_runs(_service(request), _text(a, 80) or name, _text(b, 80) or None,
                         access.project)
    except NotFound as exc:
        return _render(request, "error.html", 404, title=t("error.notFound"), message=exc.message)
    except Invalid as exc:
        return _render(request, "error.html", 422, title=t("error.title"), message=exc.message)
    diff = earlier_first(diff)
    return _render(request, "compare.html", diff=diff, job_name=name, project=access.project,
                   **_overlay(request, diff, name, access.project, a, b, _tags(tag)))


def _overlay(request: Request, diff: dict, name: str, project: str, a: str | None,
             b: str | None, tags: list[str]) -> dict:
    """The two compared Runs' curves overlaid (console/curves_chart.py), for the comparison."""
    from rlark.services.curves import run_scalars

    runs = []
    for side in (diff["a"], diff["b"]):
        job, number = side.get("job"), side.get("run")
        data: dict[str, Any] = {"scalars": {}, "tags": [], "why": None}
        try:
            data = run_scalars(_service(request), str(job), number, project)
        except NotFound:  # deleted meanwhile
            pass
        runs.append((f"{job}:{number}", data))
    hidden = [(k, v) for k, v in (("a", _text(a, 80)), ("b", _text(b, 80))) if v]
    if project != DEFAULT_PROJECT or _current(request) != DEFAULT_PROJECT:
        hidden.append(("project", project))
    return {"curves": curves_chart.charts(runs, tags), "curves_url": None,
            "curves_form_action": f"/jobs/{quote(name)}/compare", "curves_hidden": hidden}


def earlier_first(diff: dict) -> dict:
    """A comparison (:func:`rlark.record.diff.diff_records`) of two runs of one Job with the
    earlier run as ``a``, as ``rlark record diff JOB`` and a Job's own comparison (no ``b``)
    order them, whichever of the two the form named first. Runs of two Jobs keep their order."""
    a, b = diff["a"], diff["b"]
    if a.get("job") != b.get("job") or (a.get("run") or 0) <= (b.get("run") or 0):
        return diff
    return {**diff, "a": b, "b": a,
            "changes": [{**c, "a": c["b"], "b": c["a"],
                         "display": {"a": c["display"]["b"], "b": c["display"]["a"]}}
                        for c in diff["changes"]]}


@router.get("/jobs/{name}/record.{fmt}")
def download_record(request: Request, name: str, fmt: str, access: Reader,
                    run: str | None = None) -> Response:
    if fmt not in ("json", "md"):
        return _refuse(request, 404, "error.noPage")
    try:
        rec = _service(request).record(name, _int(run), access.project)
    except NotFound as exc:
        return PlainTextResponse(exc.message + "\n", status_code=404)
    media = "application/json" if fmt == "json" else "text/markdown; charset=utf-8"
    return _attachment(render_record(rec, fmt), f"{name}-run{rec['run']}-record.{fmt}", media)
