"""The console's Create Job wizard pages: create, edit and clone a Job step by step (the form's
state and its checks are :mod:`.wizard`), or from a YAML file.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rlark.console.i18n import Translator
from rlark.console.wizard import WizardState
from rlark.console.wizard_review import placement_rows, preview_yaml, yaml_preview
from rlark.console.wizard_steps import blocking, field_of, role_of, step_of
from rlark.findings import Finding, Severity
from rlark.ranks import plan_workers
from rlark.services.errors import Invalid, NotFound, ServiceError, TooManyRequests
from rlark.services.jobs import JobService
from rlark.spec import (
    SpecSyntaxError,
    job_changes,
    job_to_dict,
    load_document,
    resolve_document_paths,
)
from rlark.console.pages import (
    Writer,
    _accepted_form,
    _current,
    _flash,
    _gone,
    _htmx,
    _int,
    _locale,
    _redirect,
    _render,
    _service,
    _text,
    project_url,
)

router = APIRouter(include_in_schema=False)


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
                           "yaml_text": "", "ranks": [], "rank_error": None,
                           # each mount kind's row says what it is on this server's runtime
                           "runtime": service.profile.name}
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
