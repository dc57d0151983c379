"""Run records as routes, CLI and console read and compare them: the one comparison service
(the record of a finished Run is made by :mod:`rlark.record.finish`).
"""

from __future__ import annotations

from typing import Any


def parse_run_ref(text: str, field: str) -> tuple[str, int | None]:
    """``JOB`` or ``JOB:RUN`` -> ``(job, run or None)``.

    Raises:
        Invalid: not that shape (the message names the field, the value and the fix).
    """
    from rlark.services.errors import Invalid
    from rlark.spec import DNS1123_LABEL

    name, sep, number = (text or "").partition(":")
    if not DNS1123_LABEL.match(name) or (sep and not (number.isdigit() and 0 < int(number) < 2**31)):
        raise Invalid(f"{field} = {text!r} is not JOB or JOB:RUN; give a Job name and optionally "
                      "a run number, e.g. quickstart:2")
    return name, int(number) if sep else None


def diff_runs(jobs: Any, a: str, b: str | None, project: str) -> dict[str, Any]:
    """The comparison of two runs of ``project`` (:func:`rlark.record.diff.diff_records`), each
    given as ``JOB`` (its current Run) or ``JOB:RUN``; ``b`` None: ``a`` against the run before
    it of the same Job (itself when it is the first), the earlier one as ``a``. The records are
    read as every reader reads them (:meth:`rlark.services.jobs.JobService.record`: stored or
    live, secrets masked).

    Raises:
        Invalid: a reference is malformed. NotFound: no such Job or Run in ``project``.
    """
    from rlark.record.diff import diff_records

    ja, ra = parse_run_ref(a, "a")
    rec_a = jobs.record(ja, ra, project)
    if b is None:
        number = int(rec_a.get("run") or 1)
        previous = jobs.record(ja, number - 1, project) if number > 1 else rec_a
        return diff_records(previous, rec_a)
    jb, rb = parse_run_ref(b, "b")
    return diff_records(rec_a, jobs.record(jb, rb, project))
