"""``rlark metrics JOB[:RUN]``: a Run's training curves (``GET .../runs/N/scalars``, read by
:mod:`rlark.services.curves` from the TensorBoard event files RLinf wrote): a summary per tag,
every point as CSV, or the API's JSON.
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark.cli.base import (ProjectOpt, ServerOpt, _call, _check_name, _emit, _fail, _job_client,
                            _output, _output_option, err, out)


def _number(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def summary_table(data: dict) -> Table:
    """One row per tag: points, first and last step, last value, min and max (non-finite
    values left out of min and max)."""
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("TAG", "POINTS", "STEPS", "LAST", "MIN", "MAX"):
        t.add_column(col, overflow="fold")
    for tag, points in data["scalars"].items():
        finite = [v for _, v in points if v is not None]
        t.add_row(Text(tag), str(len(points)),
                  f"{points[0][0]}..{points[-1][0]}" if points else "-",
                  _number(points[-1][1]) if points else "-",
                  _number(min(finite)) if finite else "-", _number(max(finite)) if finite else "-")
    return t


def metrics(
    ref: str = typer.Argument(..., metavar="JOB[:RUN]",
                              help="Job name, optionally with a run number (default: the current Run)."),
    tag: Optional[list[str]] = typer.Option(None, "--tag", "-t", metavar="TAG",
                                            help="Only this tag (repeatable), e.g. rollout/rewards."),
    output: str = _output_option("text (a summary per tag), csv (tag,step,value per point) or "
                                 "json ({\"scalars\": {\"TAG\": [[step, value], ...]}, \"tags\", "
                                 "\"path\", \"files\", \"why\", ...})"),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """A Run's training curves: the scalars RLinf's MetricLogger wrote as TensorBoard event files
    under runner.logger.log_path/tensorboard of the Run's config (rollout/rewards,
    env/success_once, train/actor/policy_loss, time/...), read by the server where it can see
    the head Worker's files. A Run with none says why, with the path looked at (exit 1).

    \b
    Examples:
      rlark metrics quickstart
      rlark metrics quickstart:2 --tag rollout/rewards -o csv > rewards.csv
    """
    name, _, number = ref.partition(":")
    _check_name(name)
    if number and not (number.isdigit() and 0 < int(number) < 2**31):
        _fail(f"{ref!r} is not JOB or JOB:RUN; give a Job name and optionally a run number, "
              "e.g. quickstart:2")
    output = _output(output, ("csv",))
    path = f"/api/v1/jobs/{name}/runs/{number}/scalars" if number else f"/api/v1/jobs/{name}/scalars"
    data = _call(_job_client(server, project).get, path, tag=tag or None)
    if output in ("json", "yaml"):
        _emit(data, output)
    for note in data.get("notes") or []:
        err.print(Text(f"note: {note}"))
    if data.get("why"):
        err.print(Text(f"{name} run {data.get('run')}: {data['why']}"))
        raise typer.Exit(1)
    missing = [t for t in tag or [] if t not in data["scalars"]]
    if missing:
        err.print(Text(f"no such tag in {name} run {data.get('run')}: {', '.join(missing)} "
                       f"(tags: {', '.join(data.get('tags') or []) or 'none'})"))
    if output == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["tag", "step", "value"])
        for t, points in data["scalars"].items():
            w.writerows([t, step, "" if value is None else json.dumps(value)]
                        for step, value in points)
    elif output == "text":
        out.print(Text(f"{name} run {data.get('run')} ({data.get('phase')}): "
                       f"{len(data['scalars'])} tags from {data.get('path')}"))
        out.print(summary_table(data))
    if missing:
        raise typer.Exit(1)
