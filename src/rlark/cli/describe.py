"""Commands that read Jobs: ``get jobs``, ``describe job`` and ``events``, in the language
:func:`rlark.cli.base.output_language` chooses (the console's catalogs).
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark.cli.base import (PHASE_STYLE, ProjectOpt, ServerOpt, _call, _check_name, _client,
                            _emit, _fail, _job_client, _labels, _output, _output_option, out)
from rlark.cli.client import Client
from rlark.exitcodes import exit_text
from rlark.record.export import human_bytes


#: how a record check's status is coloured
CHECK_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


#: the columns of `rlark get jobs`, in order, with what each shows (its --help lists them)
JOB_COLUMNS = (
    ("NAME", "the Job's name"),
    ("PHASE", "the current Run's phase"),
    ("REASON", "why it is in that phase"),
    ("WORKERS", "Workers ready/total (ready: joined the Ray cluster; once the Run ended: "
                "did their part)"),
    ("ROLES", "role:workers for each role"),
    ("RUN", "the current Run's number"),
    ("CREATED", "when the Job was created (UTC)"),
)


def _job_row(j: dict, all_projects: bool, t=None) -> list:
    t = t or _labels()
    return [
        *((j.get("project") or "",) if all_projects else ()),
        j["name"], Text(t.phase(j["phase"]) if t.locale != "en" else j["phase"],
                        style=PHASE_STYLE.get(j["phase"], "")),
        t.reason(j["reason"]) if t.locale != "en" else j["reason"],
        f"{j['workersReady']}/{j['workersTotal']}",
        ",".join(f"{r['name']}:{r['workers']}" for r in j["roles"]),
        str(j["run"] or ""), (j["createdAt"] or "")[:19].replace("T", " "),
    ]


def get_jobs(
    name: Optional[str] = typer.Argument(None, metavar="NAME",
                                         help="Only this Job (as `kubectl get job NAME`)."),
    phase: Optional[str] = typer.Option(None, help="Only Jobs in this phase."),
    search: Optional[str] = typer.Option(None, "--search", "-q", help="Name contains."),
    output: str = _output_option(),
    limit: int = typer.Option(100, help="At most this many Jobs."),
    all_projects: bool = typer.Option(
        False, "--all-projects", "-A",
        help="Jobs of every project you can read (adds PROJECT; --project is ignored)."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List Jobs of the current project, newest first (also `rlark get job`). Columns:

    \b
    {columns}
    (PROJECT first with --all-projects)

    \b
    Examples:
      rlark get jobs                 # the current project (`rlark project use NAME` sets it)
      rlark get job quickstart       # one Job
      rlark get jobs -p vision       # another project
      rlark get jobs -A -o json      # every project you can read
    """
    output = _output(output)
    if name is not None:
        _check_name(name)
        client = _job_client(server, project)
        job = _call(client.get, f"/api/v1/jobs/{name}")
        data: dict[str, Any] = {"items": [job], "total": 1, "limit": 1, "offset": 0}
        all_projects = False
    else:
        client = _client(server) if all_projects else _job_client(server, project)
        data = _call(client.get, "/api/v1/jobs", phase=phase, q=search, limit=limit)
    if output != "text":
        _emit(data["items"][0] if name is not None else data, output)
        return
    t = _labels()
    table = Table(box=None, header_style="bold")
    for col in (("PROJECT",) if all_projects else ()) + tuple(c for c, _ in JOB_COLUMNS):
        table.add_column(t(f"cli.col.{col}"))
    for j in data["items"]:
        table.add_row(*_job_row(j, all_projects, t))
    if not data["items"]:
        key = "cli.noJobsAnywhere" if all_projects else "cli.noJobsIn"
        out.print(t(key + ("Phase" if phase else ""), project=client.project,
                    phase=t.phase(phase) if phase else ""))
    else:
        out.print(table)


# the help lists the table's columns from JOB_COLUMNS, so the two cannot disagree
get_jobs.__doc__ = (get_jobs.__doc__ or "").replace("{columns}", "\n    ".join(
    f"{col:9} {what}" for col, what in JOB_COLUMNS))


def describe_job(
    name: Optional[str] = typer.Argument(None, metavar="NAME",
                                         help="Job name (none: every Job of the project)."),
    output: str = _output_option(),
    timeline: bool = typer.Option(
        False, "--timeline",
        help="Instead, the Run's timeline as a chart: one row per Worker (grouped by role, with "
             "its node rank), a bar per span of its life in a character and colour of its own "
             "(. Pending, - Preparing, = Starting Ray, ~ Joined, # Running, _ Exiting), the "
             "join barrier as |, a failure as !, scaled to the terminal's width, and the "
             "Worker that joined last named under it. Times come from the Workers' own "
             "lifecycle lines. -o json: the API's JSON (GET /api/v1/jobs/NAME/runs/N/timeline; "
             "Unix seconds)."),
    run: Optional[int] = typer.Option(None, "--run", min=1,
                                      help="With --timeline: this Run (default: the current one)."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Phase and reason, the Job's Findings, Tasks (one per role: ready k/N, node ranks), the
    current Run's Conditions (AllJoined, HeadReady, ReconcileError, RecordVerified: status,
    reason, since when), the finished Run's record checks (pass/warn/fail with evidence),
    Workers with node ranks, hosts, IPs, Ray node ids and exit codes (143 (SIGTERM): stopped
    by RLark), Runs, Events (with the USER who asked for each change). Also `rlark describe
    jobs` (without NAME: every Job of the project, newest first).

    \b
    Examples:
      rlark describe quickstart                 # as `rlark describe job quickstart`
      rlark describe job quickstart -p default
      rlark describe quickstart --timeline      # which Worker held the Run up
      rlark describe quickstart --timeline --run 2 -o json
    """
    output = _output(output)
    if run is not None and not timeline:
        _fail("--run goes with --timeline (`rlark describe NAME --timeline --run N`)")
    client = _job_client(server, project)
    if timeline:
        if name is None:
            _fail("--timeline shows one Job's Run: give its NAME (`rlark describe NAME --timeline`)")
        _check_name(name)
        path = f"/api/v1/jobs/{name}/runs/{run}/timeline" if run else f"/api/v1/jobs/{name}/timeline"
        data = _call(client.get, path)
        if output != "text":
            _emit(data, output)
            return
        from rlark.cli.timeline import chart_lines

        for line in chart_lines(data, out.width, _labels()):
            out.print(line, soft_wrap=True)
        return
    if name is None:
        names = [j["name"] for j in _call(client.get, "/api/v1/jobs", limit=100)["items"]]
    else:
        _check_name(name)
        names = [name]
    described = []
    for n in names:
        job = _call(client.get, f"/api/v1/jobs/{n}")
        described.append({**job, "events": _call(client.get, f"/api/v1/jobs/{n}/events")})
    if output != "text":
        _emit(described[0] if name is not None else {"items": described}, output)
        return
    if not described:
        out.print(_labels()("cli.noJobsIn", project=client.project))
    for i, job in enumerate(described):
        if i:
            out.print()
        _describe_text(client, job)


def _describe_text(client: Client, job: dict) -> None:
    """``describe``'s text for one Job (with its ``events``), in :func:`output_language`. In
    English it names phases, reasons, causes and condition types by their codes, as always;
    in Chinese by their labels, and every server text (messages, Findings, conditions, Ray node
    summaries, record check evidence, Events) comes through rlark.console.messages. The JSON
    and YAML outputs keep every value as the API gives it."""
    t = _labels()
    zh = t.locale != "en"
    events = job["events"]
    run = job.get("currentRun") or {}

    def of(group: str, value: str | None) -> str:
        return (t.of(group, value) if zh else value) or ""

    def phase(value: str | None) -> Text:
        return Text(of("phase", value), style=PHASE_STYLE.get(value or "", ""))

    def reason(value: str | None) -> str:
        return (t.reason(value) if zh else value) or ""

    def show(value) -> str:
        return "-" if value is None else str(value)

    def table(title: str, *cols: str, fold: bool = False) -> Table:
        tab = Table(title=title, box=None, header_style="bold", title_justify="left")
        for col in cols:
            tab.add_column(t(f"cli.col.{col}"), overflow="fold" if fold else "ellipsis")
        return tab

    def label(key: str, style: str = "bold") -> Text:
        # English lines up its values after 11 columns, as it always has
        text = t(f"cli.{key}")
        return Text(text.ljust(11) if not zh else text + " ", style=style)

    out.print(label("name") + Text(job["name"]))
    out.print(label("project") + Text(str(job.get("project") or client.project)))
    out.print(label("phase") + phase(job["phase"])
              + Text(f"  {reason(job['reason'])}{'：' if zh else ': '}"
                     f"{t.message(job['reason'], job['message'])}"))
    out.print(label("headRole") + Text(f"{job['headRole']}    ") + Text(t("cli.runtime"), style="bold")
              + Text(f" {of('runtime', job['runtime'])}"))
    out.print(label("created") + Text(job["createdAt"]))
    if run:
        out.print(label("run") + Text(t("cli.runLine", n=run["number"], cause=of("cause", run["cause"]),
                                        started=show(run["startedAt"]),
                                        running=show(run["runningAt"]),
                                        finished=show(run["finishedAt"]),
                                        exit=show(run["exitCode"]))))
    for f in job.get("findings", []):
        said = t.finding(f)[0] if zh else f["message"]
        # messages name their field path already (preflight's rule); say it once
        said = said if f["message"].startswith(f["path"]) else f"{f['path']}: {said}"
        out.print(label("finding", "yellow") + Text(f"{f['code']} {said}"))
    tasks = table(t("cli.tasks"), "ROLE", "PHASE", "READY", "NODE RANKS", "RAY NODE (EACH WORKER)")
    for task in run.get("tasks", []):
        first, last = task["nodeRanks"]
        tasks.add_row(task["role"], phase(task["phase"]), f"{task['ready']}/{task['total']}",
                      str(first) if first == last else f"{first}-{last}",
                      t.ray_node(task.get("rayNode")))
    if run.get("tasks"):
        out.print(tasks)
    conditions = table(t("cli.conditions"), "TYPE", "STATUS", "REASON", "SINCE", "MESSAGE")
    for c in run.get("conditions") or []:
        conditions.add_row(of("cond", c["type"]),
                           Text(of("condStatus", c["status"]),
                                style="green" if c["status"] == "True" else ""),
                           reason(c["reason"]), (c.get("lastTransitionTime") or "")[:19],
                           t.message(c["reason"], c["message"]))
    if run.get("conditions"):
        out.print(conditions)
    workers = table(t("cli.workers"), "RANK", "NAME", "ROLE", "PHASE", "HOST", "IP", "RAY NODE",
                    "EXIT", "REASON")
    for w in run.get("workers", []):
        workers.add_row(str(w["nodeRank"]), w["name"], w["role"], phase(w["phase"]),
                        w["host"] or "", w["ip"] or "", (w["rayNodeId"] or "")[:12],
                        exit_text(w["exitCode"]), reason(w["reason"]))
    out.print(workers)
    rows = mount_rows(job.get("spec") or {}, run.get("workers") or [])
    if rows:
        mounts = table(t("cli.mounts"), "ROLE", "MOUNT", "TYPE", "SOURCE", "PATH", "MODE", "IN",
                       "OUT", fold=True)
        for r in rows:
            mounts.add_row(r["role"], r["name"], r["type"], r["source"], r["path"], r["mode"],
                           *(copied(r, d, t) for d in ("in", "out")))
        out.print(mounts)
    resume = run.get("resume")
    if resume:
        out.print(label("resume") + Text(resume_text(resume, t)))
    if run.get("finishedAt") and run.get("number"):
        rec = _call(client.get, f"/api/v1/jobs/{job['name']}/record", run=run["number"])
        checks = (rec.get("checks") or {}).get("items") or []
        if checks:
            checks_table = table(t("cli.recordChecks", n=run["number"],
                                   status=of("check", rec["checks"]["status"])),
                                 "CHECK", "STATUS", "EVIDENCE", fold=True)
            for c in checks:
                checks_table.add_row(c["id"], Text(of("check", c["status"]),
                                                   style=CHECK_STYLE.get(c["status"], "")),
                                     "; ".join(t.evidence(c, e) for e in c.get("evidence") or [])[:400])
            out.print(checks_table)
    runs = table(t("cli.runs"), "RUN", "CAUSE", "PHASE", "REASON", "EXIT", "STARTED", "FINISHED")
    for r in job["runs"]:
        runs.add_row(str(r["number"]), of("cause", r["cause"]), of("phase", r["phase"]),
                     reason(r["reason"]), exit_text(r["exitCode"]),
                     (r["startedAt"] or "")[:19], (r["finishedAt"] or "")[:19])
    out.print(runs)
    out.print(events_table(events[-30:], t))


def mount_rows(spec: dict, workers: list[dict]) -> list[dict]:
    """One row per mount of each role of a Job document ``spec``: ``{"role", "name", "type",
    "source", "path", "mode", "inBytes"?, "inFiles"?, "outBytes"?, "outFiles"?}``, the bytes
    and files summed over the role's Workers that reported their copies (``workers``: a Run
    view's, whose ``mounts`` carry them). ``mode``: what the Workers reported, else what the
    spec asks (``objectStorage.mode``, the Kubernetes StorageClass or CSI driver), else
    ``bind`` (hostPath, pvc); ``ro`` added where read-only. Pure."""
    out = []
    for role in (spec.get("spec") or {}).get("roles") or []:
        mine = [w for w in workers if w.get("role") == role.get("name")]
        for m in role.get("mounts") or []:
            storage, k8s = m.get("objectStorage") or {}, m.get("kubernetes") or {}
            seen = [c for w in mine for c in w.get("mounts") or [] if c.get("name") == m.get("name")]
            mode = next((c["mode"] for c in seen if c.get("mode")), None) or storage.get("mode")
            if not mode and k8s.get("storageClass"):
                mode = f"csi (StorageClass {k8s['storageClass']})"
            elif not mode and k8s.get("csiDriver"):
                mode = f"csi ({k8s['csiDriver']})"
            mode = mode or ("bind" if m.get("type") != "objectStorage" else "default")
            row = {"role": role.get("name") or "", "name": m.get("name") or "",
                   "type": m.get("type") or "", "source": m.get("source") or "",
                   "path": m.get("mountPath") or "",
                   "mode": mode + (", ro" if m.get("readOnly") else "")}
            for key in ("inBytes", "inFiles", "outBytes", "outFiles"):
                if any(key in c for c in seen):
                    row[key] = sum(int(c.get(key) or 0) for c in seen)
            out.append(row)
    return out


def copied(row: dict, direction: str, t) -> str:
    """``1.2 MiB (3 files)`` of a :func:`mount_rows` row's ``in`` or ``out``; ``-`` when no
    Worker copied that way."""
    if f"{direction}Bytes" not in row:
        return "-"
    return t("cli.copied", size=human_bytes(row[f"{direction}Bytes"]),
             n=row.get(f"{direction}Files", 0))


def resume_text(resume: dict, t) -> str:
    """A Run view's ``resume`` (``fromRun``, ``automatic``, ``checkpoint``, ``step``) as one
    line: where the Run resumes from, or that it found no checkpoint and starts afresh."""
    how = t("cli.resumeAutomatic") if resume.get("automatic") else t("cli.resumeAsked")
    if resume.get("checkpoint"):
        return t("cli.resumeFrom", run=resume.get("fromRun"), checkpoint=resume["checkpoint"],
                 step=resume.get("step", "?"), how=how)
    return t("cli.resumeNone", run=resume.get("fromRun"), how=how)


def events_table(events: list[dict], t=None) -> Table:
    """The ``Events`` table of ``describe`` (and ``rlark events``): one row per Event of the
    API's events view, in the order given, in :func:`output_language` (``t``: a
    :class:`rlark.console.i18n.Translator` to use instead). English shows types and reasons
    by their codes; Chinese by their labels, the messages in Chinese."""
    t = t or _labels()
    zh = t.locale != "en"
    ev = Table(title=t("cli.events"), box=None, header_style="bold", title_justify="left")
    for col in ("TIME", "RUN", "TYPE", "REASON", "USER", "MESSAGE"):
        ev.add_column(t(f"cli.col.{col}"))
    for e in events:
        # no actor: RLark itself (the controller) recorded it
        ev.add_row((e["time"] or "")[11:23], str(e["run"] or ""),
                   t.of("ev", e["type"]) if zh else e["type"],
                   t.reason(e["reason"]) if zh else e["reason"], e.get("actor") or "-", t.event(e))
    return ev


def events(
    name: str = typer.Argument(..., metavar="NAME", help="Job name."),
    run: Optional[int] = typer.Option(None, "--run", min=1,
                                      help="Only this Run's Events (default: every Run's)."),
    output: str = _output_option("text (a table), json or yaml ({\"items\": [{\"time\", "
                                 "\"run\", \"type\", \"reason\", \"actor\", \"message\", "
                                 "...}]})"),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """A Job's Events, oldest first: every phase change, Worker joined or lost, stop, restart,
    adoption, with the Run it belongs to and the USER who asked for it (- : RLark itself). The
    same Events `rlark describe NAME` ends with (there: the last 30).

    \b
    Examples:
      rlark events quickstart
      rlark events quickstart --run 2 -o json
    """
    _check_name(name)
    output = _output(output)
    items = _call(_job_client(server, project).get, f"/api/v1/jobs/{name}/events", run=run)
    if output != "text":
        _emit({"items": items}, output)
        return
    if not items:
        out.print(f"no Events for job/{name}" + (f" run {run}" if run else ""))
        return
    table = Table(box=None, header_style="bold")
    for col in ("TIME", "RUN", "TYPE", "REASON", "USER", "MESSAGE"):
        table.add_column(col, overflow="fold")
    for e in items:
        table.add_row((e["time"] or "")[:23].replace("T", " "), str(e["run"] or ""), e["type"],
                      e["reason"] or "", e.get("actor") or "-", e["message"])
    out.print(table)
