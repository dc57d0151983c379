"""Commands that change Jobs: ``submit``, ``apply``, ``stop``, ``start``, ``restart`` and
``delete``, and ``--wait``, which follows a Job until it ends and its record is final.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live
from rich.text import Text

from rlark.cli.base import (PHASE_STYLE, ProjectOpt, ServerOpt, _call, _check_name, _fail,
                            _job_client, _print_findings, _project_flag, err, out)
from rlark.cli.client import Client, ClientError
from rlark.cli.files import _document_body, _load_job_file
from rlark.names import DNS1123_LABEL
from rlark.status import TERMINAL, Phase, WorkerPhase
from rlark.words import plural


def _send_job(file: Path, verb: str) -> tuple[bytes, str]:
    """A Job file as the API body (relative paths resolved against the file's directory) and
    its metadata.name; exits, printing its Finding, when it is not YAML/JSON at all (every
    other problem is the server's to report, so the Findings are submit's own)."""
    data, findings = _load_job_file(file)
    body = _document_body(data) if data is not None else None
    if data is None or body is None:
        if data is not None:
            from rlark.preflight.job import check_document

            findings = check_document(data)[1]
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was {verb}")
    name = (data.get("metadata") or {}).get("name") if isinstance(data.get("metadata"), dict) else None
    return body, name if isinstance(name, str) else ""


def _refused(file: Path, exc: ClientError, verb: str) -> None:
    """Print the Findings the server refused a Job with, and exit."""
    if exc.findings:
        _print_findings(exc.findings)
        n = sum(1 for f in exc.findings if f.get("severity") == "error")
        _fail(f"{file} is not a valid Job ({plural(n, 'error')}); nothing was {verb}")
    _fail(exc.message)


def _warnings(job: dict) -> None:
    """The Job's Findings (warnings and advice: a stored Job has no errors), on stderr."""
    _print_findings(job.get("findings", []))


def submit(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    wait: bool = typer.Option(False, "--wait", "-w",
                              help="Show progress until the Job ends; exit 0 only if it succeeds."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Submit a new Job. Relative paths in it (workingDir, hostPath mounts) are resolved against
    the file's directory. The server checks it (the Findings `rlark check` shows): errors refuse
    it, warnings stay on it. A Job of that name already exists: use `rlark apply`. With --wait:
    live phase and Workers joined k/N, then the result.

    \b
    Examples:
      rlark submit job.yaml --wait
      rlark submit job.yaml -p vision        # into the project vision
    """
    body, _ = _send_job(file, "submitted")
    client = _job_client(server, project)
    try:
        created = client.post("/api/v1/jobs", body)
    except ClientError as exc:
        _refused(file, exc, "submitted")
    _warnings(created)
    out.print(f"job/[bold]{created['name']}[/bold] submitted (run {created['currentRun']['number']}, "
              f"{plural(created['workersTotal'], 'Worker')})")
    if wait:
        raise typer.Exit(_wait(client, created["name"]))


def apply(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    wait: bool = typer.Option(False, "--wait", "-w",
                              help="Show progress until the Job ends; exit 0 only if it succeeds."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Create the Job, or give an existing Job this spec and start a new Run with it (its
    current Run is stopped first; earlier Runs keep their records). A spec equal to the Job's
    is "unchanged": nothing is started. Prints the Job's warnings, as submit does.

    \b
    Example:
      rlark apply job.yaml -p vision --wait
    """
    body, name = _send_job(file, "changed")
    client = _job_client(server, project)
    exists = False
    if name and DNS1123_LABEL.match(name):
        try:
            client.get(f"/api/v1/jobs/{name}")
            exists = True
        except ClientError as exc:
            if exc.status != 404:
                _fail(exc.message)
    try:
        res = client.put(f"/api/v1/jobs/{name}", body) if exists else client.post("/api/v1/jobs", body)
    except ClientError as exc:
        _refused(file, exc, "changed")
    _warnings(res)
    if not exists:
        out.print(f"job/[bold]{res['name']}[/bold] created (run {res['currentRun']['number']})")
    elif res.get("unchanged"):
        out.print(f"job/[bold]{res['name']}[/bold] unchanged; nothing was started "
                  f"(`rlark restart {res['name']}{_project_flag(client)}` starts a new Run)")
    else:
        out.print(f"job/[bold]{res['name']}[/bold] configured; new run {res['currentRun']['number']}")
    if wait:
        raise typer.Exit(_wait(client, res["name"]))


def _progress_line(job: dict) -> Text:
    run = job.get("currentRun") or {}
    phase = job["phase"]
    text = Text(f"{job['name']}: ")
    text.append(phase, style=PHASE_STYLE.get(phase, ""))
    text.append(f"  Workers joined {run.get('workersReady', 0)}/{run.get('workersTotal', 0)}")
    if run.get("number"):
        text.append(f"  run {run['number']}")
    if job.get("reason"):
        text.append(f"  ({job['reason']})", style="dim")
    if phase in TERMINAL and not _record_final(job):
        text.append("  finishing the run record", style="dim")
    return text


def _record_final(job: dict) -> bool:
    """Whether the current Run's record is final (stored once every Worker ended): its
    ``RecordVerified`` condition is set in the same transaction that stores the record
    (controller ``_finish``)."""
    run = job.get("currentRun") or {}
    return any(c.get("type") == "RecordVerified" for c in run.get("conditions") or [])


#: seconds --wait gives a finished Run's record to become final, beyond the Job's
#: terminationGracePeriodSeconds (its Workers' last stop), for the controller's next passes,
#: RLark's composition of the config and the look at outputs and logs
RECORD_FINAL_SLACK_SECONDS = 60.0


def _record_wait_seconds(job: dict) -> float:
    spec = (job.get("spec") or {}).get("spec") or job.get("spec") or {}
    try:
        grace = float(spec.get("terminationGracePeriodSeconds", 10))
    except (TypeError, ValueError):
        grace = 10.0
    return grace + RECORD_FINAL_SLACK_SECONDS


def _wait(client: Client, name: str) -> int:
    """Follow a Job until it ends and its Run's record is final (bounded by
    :func:`_record_wait_seconds` after the end; when that runs out, a line says the record is
    still provisional): a live line on a terminal, one line per change elsewhere. Returns the
    exit status (0 only for Succeeded)."""
    started = time.monotonic()
    ended: float | None = None
    job = _call(client.get, f"/api/v1/jobs/{name}")

    def done() -> bool:
        nonlocal ended
        if job["phase"] not in TERMINAL:
            ended = None  # an automatic retry: a new Run to follow
            return False
        if _record_final(job):
            return True
        ended = ended or time.monotonic()
        return time.monotonic() - ended > _record_wait_seconds(job)

    try:
        if err.is_terminal:
            with Live(_progress_line(job), console=err, transient=False, refresh_per_second=8) as live:
                while not done():
                    time.sleep(0.25)
                    job = _call(client.get, f"/api/v1/jobs/{name}")
                    line = _progress_line(job)
                    line.append(f"  {time.monotonic() - started:5.1f}s", style="dim")
                    live.update(line)
        else:
            last = None
            while True:
                line = _progress_line(job)
                if line.plain != last:
                    last = line.plain
                    err.print(line.plain + f"  {time.monotonic() - started:.1f}s")
                if done():
                    break
                time.sleep(0.25)
                job = _call(client.get, f"/api/v1/jobs/{name}")
    except KeyboardInterrupt:
        if job["phase"] not in TERMINAL:
            err.print(f"\nstopped watching; job/{name} keeps running. Stop it with "
                      f"`rlark stop {name}{_project_flag(client)}`.")
            return 130
    phase = job["phase"]
    if not _record_final(job):
        number = (job.get("currentRun") or {}).get("number")
        bound = _record_wait_seconds(job)
        waited = f"after {bound:.0f} s " if ended and time.monotonic() - ended > bound else ""
        err.print(f"[yellow]note:[/yellow] run {number}'s record is still provisional {waited}"
                  f"(its Workers have not all ended: `rlark describe job {name}"
                  f"{_project_flag(client)}` shows them); `rlark record {name}` says so until "
                  "it is final")
    if phase == Phase.Succeeded:
        out.print(f"[green]{phase}[/green]: {job['message']}")
        return 0
    out.print(Text(f"{phase} ", style="red") + Text(f"({job['reason']}): {job['message']}"))
    _print_failure_context(client, job)
    return 1


def _print_failure_context(client: Client, job: dict) -> None:
    """Where to look next about the Worker that failed (or the head). The Run's message
    already ends with that Worker's last log lines (the controller adds them)."""
    run = job.get("currentRun") or {}
    workers = run.get("workers", [])
    culprit = next((w for w in workers if w["phase"] == WorkerPhase.Failed), None) or next(
        (w for w in workers if w["isHead"]), None)
    if culprit is None:
        return
    p = _project_flag(client)
    out.print(f"see: rlark describe job {job['name']}{p}; rlark logs {job['name']}{p} --worker {culprit['name']}")


def _action(verb: str, name: str, client: Client) -> dict:
    _check_name(name)
    if verb == "delete":
        return _call(client.delete, f"/api/v1/jobs/{name}")
    return _call(client.post, f"/api/v1/jobs/{name}/{verb}")


def stop(name: str = typer.Argument(..., metavar="NAME", help="Job name."),
         project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Stop a Job's current Run (SIGTERM to every Worker, SIGKILL after the grace period).
    Needs the member role in the Job's project.

    \b
    Example:
      rlark stop quickstart -p vision
    """
    job = _action("stop", name, _job_client(server, project))
    if job["phase"] in TERMINAL:
        out.print(f"job/{name} is already {job['phase']}; nothing to stop")
    else:
        out.print(f"job/{name} stopping (phase {job['phase']})")


def start(name: str = typer.Argument(..., metavar="NAME", help="Job name."),
          wait: bool = typer.Option(False, "--wait", "-w", help="Wait for the result."),
          project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Start a new Run of a stopped or finished Job (same spec, same node ranks).

    \b
    Example:
      rlark start quickstart --wait
    """
    client = _job_client(server, project)
    job = _action("start", name, client)
    out.print(f"job/{name} started run {job['currentRun']['number']}")
    if wait:
        raise typer.Exit(_wait(client, name))


def restart(name: str = typer.Argument(..., metavar="NAME", help="Job name."),
            resume: bool = typer.Option(
                False, "--resume", help="Resume from the last checkpoint the current Run wrote "
                "in its outputs (`rlark outputs NAME` shows it): the new Run's run script gets "
                "runner.resume_dir=<it> in $RLARK_RLINF_OVERRIDES."),
            wait: bool = typer.Option(False, "--wait", "-w", help="Wait for the result."),
            project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Stop the current Run if it is active, then start a new Run; with --resume, one that
    resumes from the last checkpoint of the current Run (docs/data.md, "Resume").

    \b
    Examples:
      rlark restart quickstart -p vision
      rlark restart ppo --resume
    """
    client = _job_client(server, project)
    if resume:
        _check_name(name)
        job = _call(client.post, f"/api/v1/jobs/{name}/restart", params={"resume": "true"})
    else:
        job = _action("restart", name, client)
    out.print(f"job/{name} restarting as run {job['currentRun']['number']}"
              + (", resuming from the last checkpoint of the run before" if resume else ""))
    if wait:
        raise typer.Exit(_wait(client, name))


def delete(words: list[str] = typer.Argument(..., metavar="[job] NAME",
                                            help="Job name (or `job NAME`, as kubectl takes it)."),
           yes: bool = typer.Option(False, "--yes", "-y",
                                    help="Delete without asking (needed where stdin is not a "
                                         "terminal: scripts, CI)."),
           project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Delete a Job with every Run, its Events, run records and Worker logs (an active Run is
    stopped first). On a terminal it asks first, naming the Job and what goes with it; --yes
    deletes without asking; without a terminal it refuses unless --yes is given.

    \b
    Examples:
      rlark delete quickstart             # asks: y deletes
      rlark delete quickstart -y -p vision
    """
    if len(words) == 2 and words[0] in ("job", "jobs"):
        words = words[1:]
    if len(words) != 1:
        _fail(f"delete takes one Job name, got {' '.join(words)!r}: `rlark delete NAME`")
    name = words[0]
    _check_name(name)
    client = _job_client(server, project)
    if not yes:
        _confirm_delete(client, name)
    res = _action("delete", name, client)
    if not res.get("deleted"):
        with err.status(f"job/{name}: stopping its Workers, then deleting ..."):
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    client.get(f"/api/v1/jobs/{name}")
                except ClientError as exc:
                    if exc.status == 404:
                        break
                    _fail(exc.message)
                time.sleep(0.25)
            else:
                _fail(f"job/{name} is still being deleted; check `rlark describe job {name}`")
    out.print(f"job/{name} deleted")


def _confirm_delete(client: Client, name: str) -> None:
    """Ask on the terminal whether to delete Job ``name``, naming what goes with it; exit 1 on
    no, and exit 1 without asking where stdin is not a terminal (saying how to delete anyway)."""
    job = _call(client.get, f"/api/v1/jobs/{name}")
    runs = job.get("runs") or []
    goes = (f"its {plural(len(runs), 'Run')} with their run records and Worker logs, and its "
            "Events" if runs else "its Events")
    if job["phase"] not in TERMINAL and runs:
        goes += f"; its active Run {job['run']} ({job['phase']}) is stopped first"
    where = f"job/{name}" + (f" of project {client.project}" if client.project else "")
    if not sys.stdin.isatty():
        _fail(f"not deleting {where} ({goes}) without asking, and stdin is not a terminal to ask "
              f"on: run `rlark delete {name}{_project_flag(client)} --yes` to delete it")
    if not typer.confirm(f"Delete {where}: {goes}?", default=False):
        out.print(f"{where} not deleted")
        raise typer.Exit(1)
