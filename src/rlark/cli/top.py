"""``rlark top JOB[:RUN]``: what each Worker of a Run uses (``GET .../runs/N/usage``), as
``kubectl top`` prints it: the latest sample per Worker and the peak over the Run."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark.cli.base import (ProjectOpt, ServerOpt, _call, _check_name, _emit, _fail, _job_client,
                            _output, _output_option, err, out)


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


def _gpu(latest: dict | None) -> str:
    gpus = (latest or {}).get("gpu")
    if not gpus:
        return "-"
    return " ".join(f"{g['util']:.0f}%/{_bytes((g['memUsed'] or 0) * 1024 * 1024)}"
                    if g.get("util") is not None else "n/a" for g in gpus)


def usage_table(data: dict) -> Table:
    """One row per Worker: its latest CPU (cores), memory and GPUs (util %/memory each; ``-``:
    none seen), and its peak CPU and memory over the Run."""
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("WORKER", "ROLE", "RANK", "CPU(cores)", "MEMORY", "GPU(util/mem)", "PEAK CPU",
                "PEAK MEMORY", "SAMPLES"):
        t.add_column(col, overflow="fold")
    for w in data["workers"]:
        latest, peak = w["latest"], w["peak"]
        t.add_row(Text(w["name"]), Text(w["role"]), str(w["rank"]),
                  "-" if latest is None else f"{latest['cpu']:.2f}",
                  "-" if latest is None else _bytes(latest["mem"]), _gpu(latest),
                  f"{peak['cpu']:.2f}" if "cpu" in peak else "-", _bytes(peak.get("mem")),
                  str(len(w["points"])))
    return t


def top(
    ref: str = typer.Argument(..., metavar="JOB[:RUN]",
                              help="Job name, optionally with a run number (default: the current Run)."),
    output: str = _output_option("text (a table) or json (the API's answer: every sample)"),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """What each Worker of a Run uses: CPU cores, memory and GPUs (utilisation and memory, when
    the Worker has nvidia-smi), as its keeper sampled them every few seconds; the latest sample
    and the peak. Warns about Workers whose GPUs sat idle while others worked.

    \b
    Examples:
      rlark top quickstart
      rlark top quickstart:2 -o json
    """
    name, _, number = ref.partition(":")
    _check_name(name)
    if number and not (number.isdigit() and 0 < int(number) < 2**31):
        _fail(f"{ref!r} is not JOB or JOB:RUN; give a Job name and optionally a run number, "
              "e.g. quickstart:2")
    output = _output(output)
    path = f"/api/v1/jobs/{name}/runs/{number}/usage" if number else f"/api/v1/jobs/{name}/usage"
    data = _call(_job_client(server, project).get, path)
    if output in ("json", "yaml"):
        _emit(data, output)
        return
    out.print(usage_table(data))
    for warn in data.get("idleGpus") or []:
        err.print(Text(f"warning: {warn['message']}"))
