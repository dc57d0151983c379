"""Console routes: parse the request, call :class:`JobService`, render a template.

Full pages for plain requests; the fragment an htmx request asks for (``HX-Request``) otherwise.
Actions are plain HTML forms that answer with a redirect (303) and a one-shot notice (a cookie),
so every page also works as a bookmark and after a reload. Nothing here is in the OpenAPI schema.
"""

from __future__ import annotations

import hmac
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import jinja2
from markupsafe import Markup, escape
from fastapi import APIRouter, Request
from fastapi.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.concurrency import run_in_threadpool

from rlark import __version__
from rlark.api.security import (
    PROJECT_COOKIE,
    Access,
    ProjectAccess,
    allow_project,
    allow_public,
    allow_user,
)
from rlark.console import HTMX_VERSION, logview
from rlark.console.i18n import COOKIE, ENDONYMS, LOCALES, Translator, negotiate
from rlark.console.wizard import (
    MOUNT_TYPES,
    STEPS,
    WizardState,
    blocking,
    field_of,
    placement_rows,
    preview_yaml,
    role_of,
    step_of,
    yaml_preview,
)
from rlark.status import ACTIVE, Phase
from rlark.exitcodes import exit_text
from rlark.findings import Finding, Severity
from rlark.ranks import plan_workers
from rlark.record.export import render as render_record
from rlark.services.auth import DEFAULT_PROJECT, Principal
from rlark.services.errors import NotFound, ServiceError, StoreUnavailable, TooManyRequests
from rlark.services.jobs import JobService
from rlark.services.errors import Invalid
from rlark.spec import (
    SpecSyntaxError,
    job_changes,
    job_to_dict,
    load_document,
    resolve_document_paths,
    spec_changes,
)
from rlark.store import ProjectRole

router = APIRouter(include_in_schema=False)
#: who may see a page / act: roles in the console's current project (``?project=``, else the
#: project switcher's cookie, else ``default``)
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer, console=True)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member, console=True)]
User = Annotated[Access, allow_user()]

TEMPLATES = Path(__file__).parent / "templates"
PAGE_SIZE = 20
LOG_TAIL = 1000  # lines per Worker shown on the Logs tab (downloads have all)
MAX_FORM_BYTES = 1024 * 1024
FLASH = "rlark_flash"
TABS = ("overview", "events", "logs", "record", "spec")
ACTIONS = ("stop", "start", "restart", "delete")
PHASES = [p.value for p in Phase]


def _parse_time(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _dt(iso: str | None) -> str:
    t = _parse_time(iso)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else ""


#: resources the Nodes page gives a column of their own; others are "devices"
NODE_COLUMNS = ("cpu", "memory", "nvidia.com/gpu")


def _amount(resource: str, value: float | int | None) -> str:
    """A node amount for people: memory (bytes) in GiB, cpu in cores, anything else a count."""
    if value is None:
        return "–"
    try:
        if resource == "memory":
            return f"{value / 1024**3:.1f} GiB"
        return f"{value:g}"
    except (OverflowError, TypeError, ValueError):  # beyond a float: say it as it came
        return str(value)


def _seconds(start: str | None, end: str | None) -> float | None:
    a = _parse_time(start)
    if a is None:
        return None
    b = _parse_time(end) or datetime.now(timezone.utc)
    return (b - a).total_seconds()


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _code_spans(text: Any) -> Markup:
    """A server text as HTML: escaped, its `backticked` spans (commands, fields, the words of
    Ray or Kubernetes quoted in a translated message) as code."""
    parts = _CODE_SPAN.split(str(text or ""))
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p)
                           for i, p in enumerate(parts))


env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)
env.filters["dt"] = _dt
env.filters["exit"] = exit_text
env.filters["code"] = _code_spans
env.globals.update(PHASES=PHASES, Phase=Phase, ACTIVE=ACTIVE, MOUNT_TYPES=MOUNT_TYPES, STEPS=STEPS,
                   TABS=TABS, seconds=_seconds, version=__version__, htmx_version=HTMX_VERSION,
                   quote=quote, amount=_amount, NODE_COLUMNS=NODE_COLUMNS)


def _service(request: Request) -> JobService:
    return request.app.state.jobs


def _locale(request: Request) -> str:
    return negotiate(request.cookies.get(COOKIE), request.headers.get("accept-language"))


def _htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def principal_of_page(request: Request) -> Principal | None:
    """The caller RequestGuard authenticated (None on a public page without a login)."""
    return request.scope.get("state", {}).get("principal")


def page_project(request: Request) -> str:
    """The project a console page is about: ``?project=``, else the project switcher's choice
    (a cookie), else ``default`` -- the same order as ``allow_project(..., console=True)``."""
    return (request.query_params.get("project") or request.cookies.get(PROJECT_COOKIE)
            or DEFAULT_PROJECT)


def project_url(url: str, project: str, current: str) -> str:
    """``url`` with ``project=`` added unless both the Job's project and the browser's current
    project are ``default``: a link then opens the same Job for anyone who may see it, whatever
    project their own switcher is on."""
    if project == DEFAULT_PROJECT and current == DEFAULT_PROJECT:
        return url
    return url + ("&" if "?" in url else "?") + urlencode({"project": project})


def _viewer(request: Request, full: bool, project: str | None) -> dict[str, Any]:
    """What every page knows about its caller: name, CSRF token, current project and the role
    there (what buttons to show), the projects to switch to, and the admin pages they may use."""
    principal = principal_of_page(request)
    project = project or page_project(request)
    current = request.cookies.get(PROJECT_COOKIE) or DEFAULT_PROJECT
    role = principal.role_in(project) if principal else None
    ctx: dict[str, Any] = {
        "user": principal, "csrf": (principal.csrf or "") if principal else "",
        "project": project,
        "can_write": bool(role and role.allows(ProjectRole.member)),
        "purl": lambda url, p=None: project_url(url, p or project, current),
        "needs_project": lambda p=None: project_url("", p or project, current) != "",
        "projects": {}, "is_site_admin": bool(principal and principal.is_admin),
        "is_project_admin": False,
    }
    if full and principal is not None:
        me = request.app.state.accounts.me(principal)
        ctx["projects"] = me["projects"]
        ctx["is_project_admin"] = any(r == ProjectRole.admin.value for r in me["projects"].values())
    return ctx


def _render(request: Request, template: str, status: int = 200, *, full: bool = True,
            **ctx: Any) -> HTMLResponse:
    """Render a template with the request's language and caller (see :func:`_viewer`); ``full``
    pages show (and clear) the pending notice. ``project`` in ``ctx``: the page's project when
    it is not :func:`page_project`'s."""
    locale = _locale(request)
    t = Translator(locale)
    notice = _read_flash(request, t) if full else None
    viewer = _viewer(request, full, ctx.pop("project", None))
    html = env.get_template(template).render(
        t=t, locale=locale, locales=LOCALES, endonyms=ENDONYMS, notice=notice,
        here=_here(request), **viewer, **ctx)
    resp = HTMLResponse(html, status_code=status)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Vary"] = "Cookie, Accept-Language, HX-Request"
    if notice:
        resp.delete_cookie(FLASH, path="/")
    return resp


def _here(request: Request) -> str:
    q = request.url.query
    return request.url.path + (f"?{q}" if q else "")


# --- notices (one-shot, through a cookie) ------------------------------------------------------


def _flash(resp: Response, kind: str, key: str | None = None, text: str | None = None,
           **args: Any) -> Response:
    """Show a notice on the next page: a catalog ``key`` (with ``args``), or a service's
    ``text``. ``kind``: ok | error."""
    text = text if text is None or len(text) <= 600 else text[:597] + "..."
    value = json.dumps({"kind": kind, "key": key, "text": text, "args": args}, ensure_ascii=True)
    resp.set_cookie(FLASH, quote(value), path="/", samesite="lax", httponly=True)
    return resp


def _read_flash(request: Request, t: Translator) -> dict | None:
    raw = request.cookies.get(FLASH)
    if not raw:
        return None
    try:
        data = json.loads(unquote(raw))
        args = {k: str(v) for k, v in (data.get("args") or {}).items()}
        text = t(data["key"], **args) if data.get("key") else str(data.get("text") or "")
        return {"kind": "error" if data.get("kind") == "error" else "ok", "text": text}
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _redirect(request: Request, url: str) -> Response:
    """303 to ``url``; for htmx, ``HX-Redirect`` (htmx follows it as a full page load)."""
    if _htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


def _safe_next(url: str | None, default: str) -> str:
    """A local path to go back to (never another site)."""
    if (not url or not url.startswith("/") or url.startswith("//") or "\\" in url
            or any(ord(c) < 33 or ord(c) == 127 for c in url)):
        return default
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return default
    return url


# --- requests ----------------------------------------------------------------------------------


class _BadForm(Exception):
    pass


async def _form(request: Request) -> list[tuple[str, str]]:
    """The urlencoded form of a POST (1 MiB at most)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise _BadForm("the form is larger than 1 MiB")
    try:
        return parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True,
                         max_num_fields=20000)
    except ValueError as exc:
        raise _BadForm(str(exc)) from None


async def _accepted_form(request: Request) -> list[tuple[str, str]] | HTMLResponse:
    """The form of a console POST, or the page refusing it: 403 when it lacks the session's
    CSRF token, 413 when it is too large or not a form. (A form from another site never gets
    here: :class:`rlark.api.security.RequestGuard` refuses it first, as it does for the API.)"""
    try:
        pairs = await _form(request)
    except _BadForm:
        return _refuse(request, 413, "error.formTooLarge")
    if not csrf_ok(request, pairs):
        return _refuse(request, 403, "error.csrf")
    return pairs


def csrf_ok(request: Request, pairs: list[tuple[str, str]]) -> bool:
    """Whether a console POST carries its session's CSRF token (the hidden ``csrf_token`` field
    every form has, or htmx's ``X-CSRF-Token`` header).

    Only a session needs one: a browser sends its session cookie with a form another site
    submits, so the token is what proves the form came from a console page. An API token in
    ``Authorization`` is never sent by a browser on its own, and a server without
    authentication (``--no-auth``, loopback only) has no session; both still go through the
    cross-site check (:func:`rlark.api.security.cross_site_reason`).
    """
    principal = principal_of_page(request)
    if principal is None:
        return False
    if principal.via in ("token", "open"):
        return True
    expected = principal.csrf or ""
    sent = request.headers.get("x-csrf-token") or next(
        (v for k, v in pairs if k == "csrf_token"), "")
    return bool(expected) and hmac.compare_digest(sent.encode("utf-8", "replace"),
                                                  expected.encode("utf-8"))


def _refuse(request: Request, status: int, key: str, **args: Any) -> HTMLResponse:
    t = Translator(_locale(request))
    return _render(request, "error.html", status, title=t("error.title"),
                   message=t(key, **args))


def _int(text: str | None, default: int | None = None, lo: int = 1, hi: int = 2**31 - 1) -> int | None:
    try:
        v = int(str(text))
    except (TypeError, ValueError):
        return default
    return v if lo <= v <= hi else default


def _text(text: str | None, limit: int = 200) -> str:
    return (text or "").replace("\x00", "").strip()[:limit]


# --- pages ---------------------------------------------------------------------------------------


@router.get("/", dependencies=[allow_user()])
def home() -> Response:
    return RedirectResponse("/jobs", status_code=307)


@router.get("/lang/{locale}", dependencies=[allow_public()])
def set_language(locale: str, next: str | None = None) -> Response:
    resp = RedirectResponse(_safe_next(next, "/jobs"), status_code=303)
    if locale in LOCALES:
        resp.set_cookie(COOKIE, locale, max_age=365 * 24 * 3600, path="/", samesite="lax")
    return resp


def _current(request: Request) -> str:
    """The project the browser's switcher is on."""
    return request.cookies.get(PROJECT_COOKIE) or DEFAULT_PROJECT


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


def _gone(request: Request, name: str) -> Response:
    t = Translator(_locale(request))
    return _render(request, "error.html", 404, title=t("error.notFound"),
                   message=t("error.noJob", name=name))


@router.get("/jobs/{name}")
def job_page(request: Request, name: str, access: Reader, tab: str = "overview",
             run: str | None = None, role: str | None = None, worker: str | None = None,
             q: str | None = None, lifecycle: str | None = None,
             order: str | None = None) -> Response:
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
    if tab == "events":
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
    if ctx["tab"] == "events":
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
    try:
        result = await run_in_threadpool(getattr(service, action), name, access.project,
                                         access.actor)
    except ServiceError as exc:
        return _flash(_redirect(request, nxt), "error", text=exc.message)
    if action == "delete":
        gone_to = urlsplit(nxt).path
        if gone_to == job_path or gone_to.startswith(job_path + "/"):
            nxt = project_url("/jobs", access.project, _current(request))
        key = "flash.deleted" if result.get("deleted") else "flash.deleting"
        return _flash(_redirect(request, nxt), "ok", key, name=name)
    return _flash(_redirect(request, nxt), "ok", f"flash.{action}", name=name,
                  run=(result.get("currentRun") or {}).get("number", ""))


# --- downloads -------------------------------------------------------------------------------


def _attachment(body: str, filename: str, media: str) -> Response:
    return Response(body, media_type=media, headers={
        "Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"})


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
                 b: str | None = None) -> Response:
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
    return _render(request, "compare.html", diff=earlier_first(diff), job_name=name,
                   project=access.project)


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


# --- the Create Job wizard -------------------------------------------------------------------------


def _step_findings(service: JobService, st: WizardState, step: int,
                   project: str) -> tuple[list[Finding], Any]:
    """Findings about the fields of ``step`` (4: every Finding of the preflight submitting
    would run) and the parsed Job (step 4 only)."""
    doc, bad = st.to_document()
    if step == 4:
        job, found = service.preflight(doc, project=project)
    else:
        job, found = service.validate(doc)
    findings = bad + found
    if st.mode == "create" and step in (1, 4) and st.name:
        try:
            service.get(st.name, project)
        except NotFound:
            pass
        else:
            findings.insert(0, Finding(
                code="NameTaken", path="metadata.name",
                message=f"metadata.name = {st.name!r}: a Job of that name exists",
                hint="choose another name, or edit that Job"))
    if step < 4:
        findings = [f for f in findings if step_of(f) == step]
    return findings, job


def _wizard_context(service: JobService, st: WizardState, findings: list[Finding] | None,
                    project: str, job=None, error: str | None = None) -> dict:
    """What ``_wizard.html`` shows. Step 4 always runs the full preflight."""
    if st.step == 4:
        findings, job = _step_findings(service, st, 4, project)
    findings = findings or []
    by_field: dict[str, list[Finding]] = {}
    tab_errors: dict[int, int] = {}
    unplaced: list[Finding] = []  # errors no field of the step shows: listed above the form
    for f in findings:
        key = field_of(f) if st.step < 4 else None  # step 4 lists every Finding once, itself
        if key:
            by_field.setdefault(key, []).append(f)
        else:
            unplaced.append(f)
        i = role_of(f)
        if i is not None and f.severity == Severity.error:
            tab_errors[i] = tab_errors.get(i, 0) + 1
    ctx: dict[str, Any] = {"st": st, "findings": findings, "by_field": by_field,
                           "unplaced": unplaced,
                           "tab_errors": tab_errors, "errors": blocking(findings), "error": error,
                           "yaml_text": "", "ranks": [], "rank_error": None}
    ctx.update(yaml_is_source=False, placement=[])
    if st.step == 4:
        doc, _ = st.to_document()
        # the Job file as written while the form describes it; else what the Job sets (the
        # schema's defaults left out, whole numbers as integers)
        if job is not None:
            ctx["yaml_text"], ctx["yaml_is_source"] = yaml_preview(st, job_to_dict(job),
                                                                   job_changes(job))
        else:
            ctx["yaml_text"] = preview_yaml(doc)
        if job is not None:
            try:
                ctx["ranks"] = plan_workers(job)
            except ValueError as exc:
                ctx["rank_error"] = str(exc)
            try:  # where RLinf will place its components, as `rlark plan` computes it
                ctx["placement"] = placement_rows(service.placement(job))
            except TooManyRequests:
                ctx["placement"] = []
    return ctx


def _wizard_page(request: Request, ctx: dict, status: int = 200, **extra: Any) -> Response:
    ctx = {**ctx, **extra}  # extra overrides (e.g. ``error``: why a submit was refused)
    if _htmx(request):
        return _render(request, "_wizard.html", status, full=False, **ctx)
    return _render(request, "create.html", status, **ctx)


@router.get("/create")
def create_page(request: Request, access: Writer) -> Response:
    ctx = _wizard_context(_service(request), WizardState.new(), None, access.project)
    return _render(request, "create.html", **ctx, yaml_source="", yaml_base="", yaml_findings=[])


@router.get("/jobs/{name}/edit")
def edit_page(request: Request, name: str, access: Writer) -> Response:
    return _wizard_from_job(request, name, access.project, edit=True)


@router.get("/jobs/{name}/clone")
def clone_page(request: Request, name: str, access: Writer) -> Response:
    return _wizard_from_job(request, name, access.project, edit=False)


def _wizard_from_job(request: Request, name: str, project: str, edit: bool) -> Response:
    service = _service(request)
    try:
        job = service.get(name, project)
    except NotFound:
        return _gone(request, name)
    st = WizardState.from_spec(job["spec"])
    if edit:
        st.mode, st.original = "edit", name
    else:
        st.name = st.clone_name()
    ctx = _wizard_context(service, st, None, project)
    return _render(request, "create.html", **ctx, yaml_source="", yaml_base="", yaml_findings=[])


@router.post("/create")
async def wizard_post(request: Request, access: Writer) -> Response:
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    service = _service(request)
    project = access.project
    st = WizardState.from_form(pairs)
    if st.mode == "edit":
        st.name = st.original
    action = dict(pairs).get("action", "next")
    findings: list[Finding] | None = None
    if st.apply(action):
        pass
    elif action == "back":
        st.step = max(st.step - 1, 1)
    elif action.startswith("goto:"):
        target = min(max(_int(action[5:], 1, 1, 4) or 1, 1), 4)
        while st.step < target:  # forward only through valid steps
            found, _ = await run_in_threadpool(_step_findings, service, st, st.step, project)
            if blocking(found):
                findings = found
                break
            st.step += 1
        if target < st.step:
            st.step = target
    elif action == "submit":
        st.step = 4
        found, job = await run_in_threadpool(_step_findings, service, st, 4, project)
        if not blocking(found):
            doc, _ = st.to_document()
            result: dict = {}
            try:
                if st.mode == "edit":
                    result = await run_in_threadpool(service.replace, st.original, doc, project,
                                                     access.actor)
                else:
                    await run_in_threadpool(lambda: service.create(doc, project=project,
                                                                   actor=access.actor))
            except ServiceError as exc:
                ctx = await run_in_threadpool(_wizard_context, service, st, None, project)
                # refused for its Findings: the review lists them; say the rest once
                said = isinstance(exc, Invalid) or (ctx["errors"] and exc.status == 409)
                return _wizard_page(request, ctx, 200, error=None if said else exc.message,
                                    yaml_source="", yaml_base="", yaml_findings=[])
            key = ("flash.unchanged" if result.get("unchanged") else "flash.updated") \
                if st.mode == "edit" else "flash.created"
            url = project_url(f"/jobs/{quote(doc['metadata']['name'])}", project, _current(request))
            return _flash(_redirect(request, url), "ok", key, name=doc["metadata"]["name"])
    else:  # next (also Enter in a field)
        if st.step < 4:
            found, _ = await run_in_threadpool(_step_findings, service, st, st.step, project)
            if blocking(found):
                findings = found
                if st.step == 2:  # show the first role with an error
                    first = next((role_of(f) for f in blocking(found) if role_of(f) is not None), None)
                    if first is not None:
                        st.tab = first
            else:
                st.step += 1
    ctx = await run_in_threadpool(_wizard_context, service, st, findings, project)
    return _wizard_page(request, ctx, yaml_source="", yaml_base="", yaml_findings=[])


@router.post("/create/yaml")
async def wizard_from_yaml(request: Request, access: Writer) -> Response:
    """Start the wizard from pasted or uploaded YAML: at step 4 (review), or back on the first
    page with the Findings that keep the YAML from being read."""
    pairs = await _accepted_form(request)
    if isinstance(pairs, Response):
        return pairs
    form = dict(pairs)
    service = _service(request)
    text = form.get("yaml", "")
    base = _text(form.get("base", ""), 4096)
    document: Any = text
    if base:
        # the directory of the Job file: relative workingDir and hostPath sources are relative
        # to it, as `rlark submit FILE` takes them relative to FILE (spec.resolve_document_paths)
        if not base.startswith("/"):
            ctx = _wizard_context(service, WizardState.new(), None, access.project)
            t = Translator(_locale(request))
            return _render(request, "create.html", 422, **ctx, yaml_source=text,
                           yaml_base=base, yaml_findings=[], yaml_error=t("wiz.yamlBaseRelative"))
        try:
            document = resolve_document_paths(load_document(text), base)
        except SpecSyntaxError:
            document = text  # validate reports it
    job, findings = await run_in_threadpool(service.validate, document)
    if job is None:
        ctx = _wizard_context(service, WizardState.new(), None, access.project)
        return _render(request, "create.html", 422, **ctx, yaml_source=text, yaml_base=base,
                       yaml_findings=findings)
    st = WizardState.from_spec(job_to_dict(job))
    st.step = 4
    st.source, st.source_base = text, base  # the review shows the file as written
    ctx = await run_in_threadpool(_wizard_context, service, st, None, access.project)
    return _render(request, "create.html", **ctx, yaml_source="", yaml_base="", yaml_findings=[])


# --- errors the access rules raise ----------------------------------------------------------------

#: title and explanation (catalog keys) of a refused console page, by HTTP status
ERROR_TEXTS = {401: ("error.unauthenticated", "error.loginAgain"),
               403: ("error.forbidden", "error.notAllowed"),
               404: ("error.notFound", "error.noPage"),
               429: ("error.tooMany", "error.tryLater"),
               503: ("error.storeDown", "error.storeRetry")}


def error_page(request: Request, exc: ServiceError) -> Response:
    """The console's page for a :class:`ServiceError` that reached the app (the access rules'
    ``NotFound``/``Forbidden``, a service's refusal): HTML in the page's language, with the
    service's own words below.

    A Job page whose project the caller has no role in gets exactly the page of a Job that
    does not exist: nobody learns that another project's Job is there.
    """
    t = Translator(_locale(request))
    name = request.path_params.get("name")
    if isinstance(exc, NotFound) and name is not None and request.url.path.startswith("/jobs/"):
        return _gone(request, str(name))
    title, text = ERROR_TEXTS.get(exc.status, ("error.title", "error.refused"))
    # without the database the page cannot ask who the caller is (their projects, a notice)
    resp = _render(request, "error.html", exc.status, title=t(title), message=t(text),
                   detail=exc.message, login=exc.status == 401,
                   full=not isinstance(exc, StoreUnavailable))
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def http_error_page(request: Request, exc: Exception) -> Response:
    """The console's page for no such page (404), a method a page does not take (405) or a
    query value a page cannot use (422: FastAPI's ``RequestValidationError``)."""
    from fastapi.exceptions import RequestValidationError

    t = Translator(_locale(request))
    if isinstance(exc, RequestValidationError):
        status, text = 422, "error.badRequest"
    else:
        status = getattr(exc, "status_code", 500)
        text = {404: "error.noPage", 405: "error.methodNotAllowed"}.get(status, "error.refused")
    title = "error.notFound" if status == 404 else "error.title"
    resp = _render(request, "error.html", status, title=t(title), message=t(text))
    for k, v in (getattr(exc, "headers", None) or {}).items():  # Allow: on a 405
        resp.headers[k] = v
    return resp


def failure_page(request: Request, exc: Exception) -> Response:
    """The console's page for a failure of the server itself (500): the reader's language, the
    console's layout, nothing of the failure but its kind (the log has the rest).

    Answered outside :class:`rlark.api.security.RequestGuard` (Starlette's outermost
    middleware), so it sets :data:`SECURITY_HEADERS` itself; drawn without a notice or the
    project switcher, which need the store, in case the store is what failed."""
    import logging

    from rlark.api.security import SECURITY_HEADERS

    logging.getLogger("rlark.console").error("unexpected error on %s", request.url.path,
                                             exc_info=exc)
    t = Translator(_locale(request))
    try:
        resp = _render(request, "error.html", 500, full=False, title=t("error.title"),
                       message=t("error.internal"), detail=type(exc).__name__)
    except Exception:  # noqa: BLE001 - the page itself cannot be drawn: a plain one
        resp = HTMLResponse(f"<!doctype html><title>{t('error.title')}</title>"
                            f"<h1>{t('error.title')}</h1><p>{t('error.internal')}</p>",
                            status_code=500)
    resp.headers.update(SECURITY_HEADERS)
    return resp
