"""``rlark outputs``: what a Run wrote to its outputs, read back after it through the mount that
holds each (``/api/v1/jobs/{name}/outputs``), and ``rlark outputs get``, one file of one output
downloaded through the server's API (``/api/v1/jobs/{name}/outputs/{output}/file``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from rlark.cli import access
from rlark.cli.base import ProjectOpt, ServerOpt, _call, _fail, _job_client, _output, \
    _output_option, err, out
from rlark.cli.client import ClientError
from rlark.record.export import human_bytes

#: files listed per output on the terminal (all of them with -o json / yaml)
SHOWN_FILES = 20


def _ref(text: str) -> tuple[str, int | None]:
    """``JOB`` or ``JOB:RUN`` (exits naming the form otherwise)."""
    from rlark.names import DNS1123_LABEL

    name, sep, number = text.partition(":")
    if not DNS1123_LABEL.match(name) or (sep and not (number.isdigit() and 0 < int(number) < 2**31)):
        _fail(f"{text!r} is not JOB or JOB:RUN; give a Job name and optionally a run number, "
              "e.g. ppo:3")
    return name, int(number) if sep else None


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def outputs(
    words: list[str] = typer.Argument(..., metavar="JOB[:RUN] | get JOB[:RUN] OUTPUT/PATH",
                                      help="A Job (its current Run) or JOB:RUN; or `get`, a "
                                           "run and the file as OUTPUT/PATH."),
    save: Optional[Path] = typer.Option(None, "--save", "-O", metavar="FILE",
                                        help="get: write the file here ('-': standard output; "
                                             "default: its own name in this directory)."),
    force: bool = typer.Option(False, "--force", help="get: replace FILE if it exists."),
    output: str = _output_option(),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """What a Run wrote to its outputs (spec.outputs, and the output and checkpoint locations of
    its RLinf config), read back after the Run through the mount that holds each: files,
    sizes, times and sha256, RLinf's checkpoint directories, and the checkpoint `rlark restart
    --resume` would take. `rlark outputs get JOB[:RUN] OUTPUT/PATH` downloads one file through
    the server (never a path outside the output).

    \b
    Examples:
      rlark outputs ppo
      rlark outputs ppo:3 -o json
      rlark outputs get ppo:3 checkpoints/exp/checkpoints/global_step_2/actor/model.pt
    """
    if words[0] == "get":
        if len(words) != 3:
            _fail("outputs get takes a run and a file: `rlark outputs get JOB[:RUN] "
                  "OUTPUT/PATH`, e.g. rlark outputs get ppo:3 checkpoints/global_step_2/actor/model.pt")
        _get(words[1], words[2], save, force, project, server)
        return
    if len(words) != 1:
        _fail(f"unexpected argument {words[1]!r}; `rlark outputs JOB[:RUN]` lists one Run's "
              "outputs, `rlark outputs get JOB[:RUN] OUTPUT/PATH` downloads a file")
    name, run = _ref(words[0])
    output = _output(output)
    data = _call(_job_client(server, project).get, f"/api/v1/jobs/{name}/outputs", run=run)
    if output != "text":
        access._emit(data, output)
        return
    _show(data)


def _show(data: dict) -> None:
    head = f"job/{data['job']} run {data['run']} ({data['phase']})"
    if not data.get("final"):
        out.print(f"{head}: its Workers have not all ended; its outputs are read back once "
                  "they have")
        return
    if not data.get("listed"):
        out.print(f"{head}: its record holds no outputs read back (made by an older RLark)")
        return
    if not data["outputs"]:
        out.print(f"{head}: no outputs (name them in spec.outputs; `rlark check` proposes the "
                  "RLinf config's output and checkpoint locations)")
        return
    out.print(Text(head, style="bold"))
    for o in data["outputs"]:
        back = o.get("readBack") or {}
        mount = o.get("mount") or {}
        out.print(Text(f"\n{o['name']}  {o['path']}", style="bold"))
        where = f"{mount.get('type')} mount {mount.get('name')} ({mount.get('source')})" \
            if mount else "no mount"
        out.print(Text(f"  origin {o['origin']}, role {o.get('role')}, {where}"))
        if not back.get("ok"):
            out.print(Text(f"  not read back: {back.get('why')}", style="red" if not back.get(
                "unseen") else "yellow"))
            continue
        out.print(Text(f"  {o.get('fileCount')} file(s), {human_bytes(o.get('bytes') or 0)}, "
                       f"read back from {back.get('at')}"
                       + (f"; {o['skipped']} link(s) or other entries skipped"
                          if o.get("skipped") else "")))
        files = o.get("files") or []
        rows = [(f["path"], human_bytes(f["bytes"]), _when(f.get("mtime")),
                 (f.get("sha256") or "")[:16] or f.get("why") or "-") for f in files[:SHOWN_FILES]]
        if rows:
            access._print(access._table(("FILE", "SIZE", "MODIFIED", "SHA256"), rows))
        if len(files) > SHOWN_FILES or o.get("filesCut"):
            out.print(Text(f"  ... {o.get('fileCount', 0) - min(len(files), SHOWN_FILES)} more "
                           "(-o json lists what the record keeps)", style="dim"))
        for c in o.get("checkpoints") or []:
            out.print(Text(f"  checkpoint step {c['step']}: {c['dir']} ({c['files']} file(s), "
                           f"{human_bytes(c['bytes'])}{'' if c.get('actor') else ', no actor/'})"))
    resume = data.get("resume")
    if resume:
        out.print(Text(f"\n`rlark restart {data['job']} --resume` resumes from "
                       f"{resume['checkpoint']} (step {resume['step']})"))
    for note in data.get("resumeNotes") or []:
        out.print(Text(f"  {note}", style="dim"))


def _get(ref: str, file: str, save: Optional[Path], force: bool, project: Optional[str],
         server: Optional[str]) -> None:
    name, run = _ref(ref)
    output, sep, path = file.partition("/")
    if not sep or not output or not path:
        _fail(f"{file!r} is not OUTPUT/PATH: name the output, then the file below it as "
              "`rlark outputs` lists it, e.g. checkpoints/global_step_2/actor/model.pt")
    client = _job_client(server, project)
    params = {"path": path, **({"run": run} if run is not None else {})}
    url = f"/api/v1/jobs/{name}/outputs/{output}/file"
    if save is not None and str(save) == "-":
        try:
            client.download(url, sys.stdout.buffer, **params)
        except ClientError as exc:
            _fail(exc.message)
        return
    dest = save or Path(path.rsplit("/", 1)[-1])
    if dest.is_dir():
        dest = dest / path.rsplit("/", 1)[-1]
    if dest.exists() and not force:
        _fail(f"{dest} exists; give --force to replace it, or --save another FILE")
    fd, tmp = tempfile.mkstemp(prefix=".rlark-", dir=str(dest.parent.resolve()))
    try:
        with os.fdopen(fd, "wb") as f:
            size = client.download(url, f, **params)
        os.replace(tmp, dest)
    except ClientError as exc:
        os.unlink(tmp)
        _fail(exc.message)
    except BaseException:
        os.unlink(tmp)
        raise
    err.print(f"wrote {dest} ({human_bytes(size)})")
