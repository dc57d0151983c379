"""A Job's files under ``$RLARK_HOME``, which go with it when it is deleted: its Workers' logs
and, on the local runtime, its Runs' Worker directories. Shared by the services (a delete that
ends at once) and the controller (a delete finished once the Job's Workers are gone).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlark import settings
from rlark.store.models import JobRow


def job_log_dirs(job: JobRow) -> list[Path]:
    """A Job's Worker files, removed with it: its log directory under ``$RLARK_HOME/logs`` (and,
    for Runs made before logs were kept per project, the directories its Workers' log paths
    name), and each Run's Worker directories under ``$RLARK_HOME/workers/<run uid>`` (a Worker's
    home and what it wrote into its working directory, on the local runtime); never anything
    outside those two directories of RLark's own."""
    dirs = {settings.job_logs_dir(job.project.name, job.name)}
    dirs |= {Path(w.log_path).parent for r in job.runs for w in r.workers if w.log_path}
    logs = settings.logs_dir().resolve()
    workers = (settings.rlark_home() / "workers").resolve()
    dirs |= {workers / r.uid for r in job.runs if r.uid and "/" not in r.uid and r.uid not in (".", "..")}
    return sorted(d for d in dirs if d.resolve().is_relative_to(logs)
                  or (d.resolve().is_relative_to(workers) and d.resolve() != workers))


def remove_dirs(dirs: list[Path]) -> None:
    """Remove directories (those :func:`job_log_dirs` names), ignoring ones already gone."""
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
