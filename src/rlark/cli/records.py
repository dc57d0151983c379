"""``rlark record``: a Run's record (Markdown, JSON or YAML), and ``rlark record diff``, the
comparison of two Runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark.cli.base import (OUTPUT_FORMATS, ProjectOpt, ServerOpt, _TEXT_ALIASES, _call,
                            _check_name, _emit, _fail, _job_client, _output, _output_option, err,
                            out)


def record(
    name: str = typer.Argument(..., metavar="NAME", help="Job name, or `diff` (see below)."),
    runs: Optional[list[str]] = typer.Argument(None, metavar="[A B]", show_default=False,
                                               help="With `diff`: the two runs, JOB or JOB:RUN."),
    run: Optional[int] = typer.Option(None, "--run", help="Run number (default: the current Run)."),
    output: str = _output_option("text (Markdown), json or yaml"),
    save: Optional[Path] = typer.Option(None, "--save", metavar="PATH",
                                        help="Write to this file instead of the terminal."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """The run record: code (commits, dirty diffs), versions, images, configs (original Hydra
    files, overrides, resolved), data/model/checkpoint/output locations and their mounts, node
    ranks, hosts, Ray node ids, resources asked and seen, times, result, where each log is, and
    the checks (docs/record.md). `rlark record diff A B` compares two runs (A, B: JOB for its
    current Run, or JOB:RUN): what changed in code, versions, images, config keys, Workers,
    resources and result; a table, or -o json / yaml.

    \b
    Example:
      rlark record quickstart --run 2 -o json --save run2.json
      rlark record diff quickstart:1 quickstart:2
    """
    if name == "diff" and runs:
        _record_diff(runs, output, project, server)
        return
    if runs:
        _fail(f"unexpected argument {runs[0]!r}; `rlark record NAME` shows one record, "
              "`rlark record diff A B` compares two")
    _check_name(name)
    if output not in OUTPUT_FORMATS and output not in _TEXT_ALIASES and (
            "/" in output or "." in output):
        _fail(f"-o/--output {output!r} is a format (text, json or yaml); write to a file with "
              f"--save {output}")
    output = _output(output)
    fmt = "md" if output == "text" else output
    text = _call(_job_client(server, project).get_text, f"/api/v1/jobs/{name}/record", run=run,
                 format=fmt)
    if fmt == "json":
        text = json.dumps(json.loads(text), indent=2) + "\n"
    if save:
        save.write_text(text)
        out.print(f"wrote {save}")
    else:
        sys.stdout.write(text)


def _record_diff(runs: list[str], output: str, project: Optional[str],
                 server: Optional[str]) -> None:
    """``rlark record diff A B``: the API's comparison as tables, what the spec changed first,
    then what RLark observed (or JSON / YAML); a line for each side whose record is still
    provisional."""
    from rlark.record.diff import SPEC_SECTIONS, display

    if len(runs) != 2:
        _fail(f"record diff takes two runs (JOB or JOB:RUN), got {len(runs)}: "
              "e.g. `rlark record diff quickstart:1 quickstart:2`")
    output = _output(output)
    data = _call(_job_client(server, project).get, "/api/v1/record/diff", a=runs[0], b=runs[1])
    if output != "text":
        _emit(data, output)
        return
    a, b = data["a"], data["b"]
    for side in (a, b):
        if side.get("provisional"):
            err.print(f"[yellow]note:[/yellow] {side['job']} run {side['run']}'s record is "
                      "provisional: its Workers have not all ended, so what it observed may still "
                      "change; compare again once the Run's record is final")
    if data["same"]:
        out.print(f"{a['job']} run {a['run']} and {b['job']} run {b['run']}: no differences")
        return
    ta, tb = f"A ({a['job']}:{a['run']})", f"B ({b['job']}:{b['run']})"
    spec = [c for c in data["changes"] if c["section"] in SPEC_SECTIONS]
    seen = [c for c in data["changes"] if c["section"] not in SPEC_SECTIONS]

    def shown(c: dict, side: str) -> str:
        return (c.get("display") or {}).get(side) or display(c["key"], c[side],
                                                             c["b" if side == "a" else "a"])

    def table(title: str, rows: list[dict], with_section: bool) -> Table:
        t = Table(title=title, box=None, header_style="bold", title_justify="left")
        for col in (("SECTION",) if with_section else ()) + ("KEY", ta, tb):
            t.add_column(col, overflow="fold")
        for c in rows:  # Text: keys like spec.roles[head] are not Rich markup
            t.add_row(*((c["section"],) if with_section else ()), Text(c["key"]),
                      Text(shown(c, "a")), Text(shown(c, "b")))
        return t

    out.print(f"[bold]{a['job']} run {a['run']} -> {b['job']} run {b['run']}[/bold]")
    out.print(table("What the spec changed", spec, False) if spec
              else "What the spec changed: nothing")
    out.print(table("What RLark observed", seen, True) if seen
              else "What RLark observed: no differences")
