"""The Create Job wizard's review step (step 4): the Job as YAML (the file it was started from
when that still describes it) and where RLinf will place its components (the form itself:
:mod:`.wizard`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlark.console.wizard import WizardState

def preview_yaml(data: Any) -> str:
    """YAML of a Job for people to read (:func:`rlark.spec.dump_yaml`'s style), no line ever
    folded: a long run script or image stays on its line (the preview scrolls)."""
    import yaml

    from rlark.spec import _BlockDumper  # the style of dump_yaml, with another line width

    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=2**31 - 1)


def yaml_preview(st: "WizardState", stored: dict[str, Any], shown: dict[str, Any]) -> tuple[str, bool]:
    """What the review step shows and whether it is the Job file itself: the file the wizard
    was started from, comments and all, while ``stored`` (the Job the form describes, as it
    would be stored) is what that file describes; else ``shown`` (what the Job sets) as
    :func:`preview_yaml` writes it."""
    if st.source:
        from rlark.preflight.job import check_document
        from rlark.spec import SpecSyntaxError, job_to_dict, load_document, resolve_document_paths

        try:
            doc = load_document(st.source)
            if st.source_base and isinstance(doc, dict):
                doc = resolve_document_paths(doc, st.source_base)
        except SpecSyntaxError:
            doc = None
        job, _ = check_document(doc) if isinstance(doc, dict) else (None, [])
        if job is not None and job_to_dict(job) == stored:
            return st.source, True
    return preview_yaml(shown), False


def placement_rows(placement: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per RLinf component of :meth:`rlark.services.jobs.JobService.placement`:
    ``{"component", "node_group", "node_ranks" (text: "0-2"), "roles" (the Job's roles that
    hold those ranks), "processes", "resource"}``."""
    from rlark.rlinf_config.ranks import format_ranks

    if not placement:
        return []
    role_of = {n["node_rank"]: n.get("role") for n in placement.get("nodes") or []}
    rows = []
    for name, c in (placement.get("components") or {}).items():
        ranks = list(c.get("node_ranks") or [])
        rows.append({"component": name, "node_group": c.get("node_group") or "",
                     "node_ranks": format_ranks(ranks),
                     "roles": sorted({role_of[r] for r in ranks if role_of.get(r)}),
                     "processes": c.get("processes"), "resource": c.get("resource") or ""})
    return rows
