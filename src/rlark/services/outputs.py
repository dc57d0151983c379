"""A Run's outputs as ``rlark outputs``, ``/api/v1/jobs/{name}/outputs`` and the console's
Outputs tab read them: what the Run's record read back after it (:mod:`rlark.record.outputs`),
and one file of an output read again now through the same source (a download).

Project-scoped like every read of a Job (the caller authorised the project); a file is only
ever one below an output the Run's record lists, read without following a link
(:func:`rlark.record.outputs.iter_file`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from rlark.record.outputs import ReadBackError, iter_file, resume_point
from rlark.services.errors import Conflict, Invalid, NotFound
from rlark.status import Phase, text_of

if TYPE_CHECKING:
    from rlark.services.jobs import JobService


def _view(out: dict[str, Any], files: bool) -> dict[str, Any]:
    keep = ("name", "path", "role", "origin", "named", "mount", "persistent", "readBack",
            "fileCount", "bytes", "skipped", "filesCut", "checkpoints")
    view = {k: out.get(k) for k in keep}
    if files:
        view["files"] = out.get("files") or []
    return view


def list_outputs(jobs: "JobService", name: str, run: int | None, project: str,
                 files: bool = True) -> dict[str, Any]:
    """The outputs of a Run of Job ``name`` (default: its current Run) as its record read
    them back: ``{"job", "run", "phase", "final", "outputs": [{name, path, role, origin, named,
    mount, persistent, readBack, fileCount, bytes, skipped, filesCut, checkpoints, files?}],
    "resume": {checkpoint, step, output, origin} or None, "resumeNotes": [str],
    "resumedFrom": the Run's own resume or None}``; ``final`` False (and ``outputs`` empty)
    while the Run's Workers have not all ended. ``resume``: the checkpoint `rlark restart
    --resume` would take from this Run.

    Raises:
        NotFound: no such Job or Run in ``project``.
    """
    rec = jobs.record(name, run, project)
    final = not rec.get("provisional")
    outputs = rec.get("outputs") if final else None
    phase = (rec.get("result") or {}).get("phase")
    point, notes = resume_point(outputs or [], phase == text_of(Phase.Succeeded)) \
        if outputs is not None else (None, [])
    return {"job": name, "run": rec.get("run"), "phase": phase, "final": final,
            "outputs": [_view(o, files) for o in outputs or []],
            "listed": outputs is not None, "resume": point, "resumeNotes": notes,
            "resumedFrom": rec.get("resume")}


def output_file(jobs: "JobService", name: str, run: int | None, project: str, output: str,
                path: str) -> tuple[str, int, Iterator[bytes]]:
    """``(file name, size, chunks)`` of the file ``path`` (below the output, as ``rlark
    outputs`` lists it) of output ``output`` of a finished Run of Job ``name``, read now
    through the source its record read it back from (the mount's directory here, or its
    bucket with the credentials of the Job's project).

    Raises:
        NotFound: no such Job, Run, output or file. Conflict: the Run has not ended (its
            outputs are read back once its Workers are gone). Invalid: a path that is not
            below the output.
    """
    rec, sandboxed, keys = jobs.record_for_outputs(name, run, project)
    if rec.get("provisional"):
        raise Conflict(f"run {rec.get('run')} of Job {name!r} has not ended: its outputs are "
                       "read back once its Workers are gone")
    found = next((o for o in rec.get("outputs") or [] if o.get("name") == output), None)
    if found is None:
        names = [o.get("name") for o in rec.get("outputs") or []]
        raise NotFound(f"run {rec.get('run')} of Job {name!r} has no output {output!r}"
                       + (f"; it has {', '.join(map(str, names))}" if names else
                          "; it names none (spec.outputs)"))
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "\x00" in path or len(path) > 4096:
        raise Invalid(f"path = {path[:200]!r} is not a file below output {output!r}; give it "
                      "as `rlark outputs` lists it, e.g. checkpoints/global_step_1/actor/model.pt")
    from rlark.record.finish import read_back_context

    ctx = read_back_context(rec, keys, sandboxed)
    try:
        size, chunks = iter_file(rec, found, path, ctx)
    except ReadBackError as exc:
        raise NotFound(f"output {output!r} of run {rec.get('run')}: {exc}") from None
    return parts[-1], size, chunks
