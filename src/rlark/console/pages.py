"""What every console page shares: the templates, rendering with the caller's language and
project, one-shot notices, forms and their CSRF check, refusals, and small parsers of query
values. The pages themselves live by group (:mod:`.jobs_pages`, :mod:`.wizard_pages`,
:mod:`.admin`, :mod:`.auth_pages`, :mod:`.secrets_page`, :mod:`.error_pages`): each parses the
request, calls a service and renders a template with what is here.

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
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from rlark import __version__
from rlark.api.security import PROJECT_COOKIE, Access, ProjectAccess, allow_project, allow_user
from rlark.console import HTMX_VERSION
from rlark.console.curves_chart import dots_svg
from rlark.console.timeline_chart import COMPACT_ROWS, compact_rows
from rlark.console.i18n import COOKIE, ENDONYMS, LOCALES, Translator, negotiate
from rlark.console.messages import size_text
from rlark.console.wizard import MOUNT_TYPES, STEPS
from rlark.status import ACTIVE, Phase
from rlark.exitcodes import exit_text
from rlark.services.auth import DEFAULT_PROJECT, Principal
from rlark.services.jobs import JobService
from rlark.store import ProjectRole

#: who may see a page / act: roles in the console's current project (``?project=``, else the
#: project switcher's cookie, else ``default``)
Reader = Annotated[ProjectAccess, allow_project(ProjectRole.viewer, console=True)]
Writer = Annotated[ProjectAccess, allow_project(ProjectRole.member, console=True)]
User = Annotated[Access, allow_user()]

TEMPLATES = Path(__file__).parent / "templates"
MAX_FORM_BYTES = 1024 * 1024
FLASH = "rlark_flash"
TABS = ("overview", "events", "logs", "curves", "resources", "outputs", "record", "spec")
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


#: more rows than this and a table is styled and laid out only as it nears the viewport
#: (console.css ``.lazy-rows``; the same bound as the timeline's compact drawing)
LAZY_ROWS = COMPACT_ROWS


def worker_rows(workers: list[dict[str, Any]], t: Translator, logs_url: str) -> Markup:
    """The overview's Workers table body: a ``<tr data-worker data-rank>`` per Worker (``workers``:
    :func:`rlark.services.views.worker_view` dicts) with its rank (and head tag), name, role,
    host, IP, Ray node id, phase, exit code, reason and message, start and a link to its logs
    (``logs_url`` with ``&worker=<name>``); every text escaped. Written here rather than in the
    template: a 1,000-Worker Run's rows through Jinja took 0.2 s of its page's server time
    (bench/console_charts.py); the phase badge is the one ``_macros.html`` draws."""
    head, view = escape(t("ov.head")), escape(t("ov.viewLogs"))
    badges: dict[Any, str] = {}
    rows = []
    for w in workers:
        phase = w["phase"]
        if phase not in badges:
            badges[phase] = (f'<span class="phase phase-{escape(str(phase or "none").lower())}" '
                             f'data-phase="{escape(phase)}">{escape(t.phase(phase) or "—")}</span>')
        why = ""
        if w["reason"]:
            why = (f'<span class="reason" data-reason="{escape(w["reason"])}">'
                   f'{escape(t.reason(w["reason"]))}</span>')
        if w["message"]:
            first = w["message"].split("\n", 1)[0]
            why += f' <span class="wmsg">{_code_spans(t.message(w["reason"], first))}</span>'
        node = w["rayNodeId"] or ""
        tag = f' <span class="tag">{head}</span>' if w["isHead"] else ""
        name = escape(w["name"])
        rows.append(
            f'<tr data-worker="{name}" data-rank="{w["nodeRank"]}">'
            f'<td class="num">{w["nodeRank"]}{tag}</td><td translate="no">{name}</td>'
            f'<td translate="no">{escape(w["role"])}</td>'
            f'<td translate="no">{escape(w["host"] or "")}</td>'
            f'<td translate="no">{escape(w["ip"] or "")}</td>'
            f'<td translate="no" class="mono" title="{escape(node)}">{escape(node[:12])}</td>'
            f'<td>{badges[phase]}</td><td class="num">{escape(exit_text(w["exitCode"]))}</td>'
            f'<td translate="no">{why}</td><td class="time">{escape(_dt(w["startedAt"]))}</td>'
            f'<td><a href="{escape(logs_url)}&amp;worker={escape(quote(w["name"]))}">{view}</a>'
            "</td></tr>")
    return Markup("\n".join(rows))


def _epoch_text(ts: float | None) -> str:
    """Seconds since the epoch as ``2026-12-02 07:03:04 UTC`` (``-`` for None)."""
    if not isinstance(ts, (int, float)):
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


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
                   quote=quote, amount=_amount, NODE_COLUMNS=NODE_COLUMNS,
                   compact_rows=compact_rows, curve_dots=dots_svg, worker_rows=worker_rows,
                   LAZY_ROWS=LAZY_ROWS, size=size_text, when=_epoch_text)


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


def _current(request: Request) -> str:
    """The project the browser's switcher is on."""
    return request.cookies.get(PROJECT_COOKIE) or DEFAULT_PROJECT


def _gone(request: Request, name: str) -> Response:
    t = Translator(_locale(request))
    return _render(request, "error.html", 404, title=t("error.notFound"),
                   message=t("error.noJob", name=name))
