"""``rlark logs``: Worker logs, whole, their last lines, or followed."""

from __future__ import annotations

import json
import re
import sys
from typing import Optional

import typer

from rlark.cli.base import (ProjectOpt, ServerOpt, _call, _check_name, _emit, _fail, _job_client,
                            _output, _output_option)
from rlark.cli.client import ClientError


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def logs(
    name: str = typer.Argument(..., metavar="NAME", help="Job name."),
    role: Optional[str] = typer.Option(None, "--role", "-r", help="Only Workers of this role."),
    rank: Optional[int] = typer.Option(None, "--rank", "-k", help="Only the Worker with this node rank."),
    worker: Optional[str] = typer.Option(None, "--worker", help="Only this Worker (by name)."),
    run: Optional[int] = typer.Option(None, "--run", help="Run number (default: the current Run)."),
    tail: Optional[int] = typer.Option(None, "--tail", "-n", help="Last N lines per Worker."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the Workers end."),
    lifecycle: bool = typer.Option(
        False, "--lifecycle",
        help="Also show RLark's own lifecycle lines (RLARK_EVENT {...}: phases and facts the "
             "Worker bootstrap reports), hidden by default."),
    output: str = _output_option("text (lines), json or yaml ({\"workers\": [{\"name\", "
                                 "\"lines\", ...}]}; with --follow, json: one {\"worker\", "
                                 "\"line\"} object per line)"),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Print Worker logs (the bootstrap's lines, Ray's output, and on the head the run script's).
    Several Workers: each line is prefixed with the Worker's name.

    \b
    Examples:
      rlark logs quickstart --role head -f
      rlark logs quickstart --rank 1 --tail 50 -p vision
      rlark logs quickstart --lifecycle     # with RLark's lifecycle lines
    """
    _check_name(name)
    output = _output(output)
    if follow and output == "yaml":
        _fail("-o yaml cannot be followed; use -o json (one JSON object per line) or text")
    client = _job_client(server, project)
    params = dict(role=role, rank=rank, worker=worker, run=run, tail=tail,
                  lifecycle="true" if lifecycle else None)
    if follow:
        many = True
        try:
            for event, data in client.stream_events(f"/api/v1/jobs/{name}/logs", follow="true", **params):
                if event == "workers":
                    many = len(json.loads(data)) > 1
                elif event == "line":
                    item = json.loads(data)
                    if output == "json":
                        sys.stdout.write(json.dumps(item) + "\n")
                        sys.stdout.flush()
                    else:
                        _emit_line(item["worker"], item["line"], prefix=many)
        except ClientError as exc:
            _fail(exc.message)
        except KeyboardInterrupt:
            pass
        return
    data = _call(client.get, f"/api/v1/jobs/{name}/logs", **params)
    if output != "text":
        _emit(data, output)
        return
    many = len(data["workers"]) > 1
    for w in data["workers"]:
        # a log longer than the server answers whole starts with the server's own line saying
        # what it left out (services/logs.py, left_out_mark)
        for line in w["lines"]:
            _emit_line(w["name"], line, prefix=many)


def _emit_line(worker: str, line: str, prefix: bool) -> None:
    if not sys.stdout.isatty():
        line = ANSI.sub("", line)  # Ray colours its own output; keep files and pipes clean
    sys.stdout.write(f"[{worker}] {line}\n" if prefix else line + "\n")
    sys.stdout.flush()
