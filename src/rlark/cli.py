"""The ``rlark`` command (Typer + Rich). Commands parse, call the REST API (or a local
function for validate/schema), and render; the logic lives in the services.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rlark import settings
from rlark.client import Client, ClientError, resolve_project, resolve_server
from rlark.exitcodes import exit_text
from rlark.findings import Finding, Severity, has_errors
from rlark.preflight import check_job, validate_document
from rlark.spec import (
    DNS1123_LABEL,
    dump_job,
    dump_yaml,
    json_schema,
    load_job,
    resolve_relative_paths,
)

HELP = """RLark runs RLinf training Jobs: it starts every Worker (one Ray node each, with its
RLINF_NODE_RANK), waits for the whole Ray cluster, runs your run script on the head, and keeps
status, events, logs and a run record.

\b
Typical session:
  rlark server &                                    # API + controller (local runtime, SQLite)
  rlark validate examples/quickstart/job.yaml       # Findings; nothing is started
  rlark submit examples/quickstart/job.yaml --wait  # run it and watch Workers join
  rlark describe job quickstart                     # phase, reason, Workers, node ranks, Events
  rlark logs quickstart --role head                 # the run script's output
  rlark record quickstart                           # versions, images, ranks, hosts, result

\b
With a team (every request is authenticated; the server's first start stored the admin's token
in $RLARK_HOME/credentials, so on its own machine nothing more is needed):
  rlark user create alice --project default --role member --token    # as an administrator
  rlark login --server https://rlark.example.com    # as alice, elsewhere: paste the token
  rlark project use vision                          # Job commands act in this project (-p NAME)
"""

app = typer.Typer(help=HELP, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
get_app = typer.Typer(help="List resources.", no_args_is_help=True)
describe_app = typer.Typer(help="Show one resource in detail.", no_args_is_help=True)
app.add_typer(get_app, name="get")
app.add_typer(describe_app, name="describe")

def _console(stderr: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) Rich would wrap tables at 80 columns and cut names and Ray
    # node ids; give it room instead, unless COLUMNS says otherwise.
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = None if tty or os.environ.get("COLUMNS") else 200
    return Console(stderr=stderr, width=width)


out = _console()
err = _console(stderr=True)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: `ray start`'s own progress lines ("2026-11-29 17:30:43,029 INFO scripts.py:1266 -- ..."):
#: noise next to a failure (and they suggest `ray stop`, which RLark never uses)
RAY_CLI_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|SUCC|WARNING|VINFO)\s")

ServerOpt = typer.Option(None, "--server", "-s", envvar="RLARK_SERVER",
                         help=f"RLark server URL (default: the one `rlark login` stored, else "
                              f"{settings.DEFAULT_SERVER}).")
ProjectOpt = typer.Option(None, "--project", "-p", envvar="RLARK_PROJECT",
                          help="Project of the Job (default: the one `rlark project use` chose "
                               "for this server, else default).")
TERMINAL = {"Succeeded", "Failed", "Stopped"}
PHASE_STYLE = {"Succeeded": "green", "Completed": "green", "Failed": "red", "Terminated": "dim", "Running": "cyan", "Starting": "yellow",
               "Pending": "yellow", "Stopping": "magenta", "Stopped": "magenta"}


def _fail(message: str, code: int = 1) -> None:
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


def _print_findings(findings: list[Finding] | list[dict], console: Console = err) -> None:
    for f in findings:
        f = f if isinstance(f, Finding) else Finding.model_validate(f)
        style = {"error": "red", "warning": "yellow", "info": "blue"}[f.severity.value]
        line = Text(f"{f.severity.value:7} ", style=f"bold {style}")
        line.append(f"{f.code:20} ", style=style)
        line.append(f"{f.message}")
        console.print(line)
        if f.hint:
            console.print(Text(f"        fix: {f.hint}", style="dim"))


def _client(server: Optional[str]) -> Client:
    """A client for ``server``; exits with the message when the credentials file cannot be
    used (e.g. it is readable by others)."""
    try:
        return Client(server)
    except ClientError as exc:
        _fail(exc.message)


def _job_client(server: Optional[str], project: Optional[str]) -> Client:
    """A client whose every call acts in ``project`` (``--project``/``RLARK_PROJECT``), else in
    the current project of ``server`` (``rlark project use``), else in ``default``."""
    try:
        return Client(server, project=resolve_project(resolve_server(server), project))
    except ClientError as exc:
        _fail(exc.message)


def _call(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ClientError as exc:
        if exc.findings:
            _print_findings(exc.findings)
        _fail(exc.message)


MAX_JOB_FILE_BYTES = 1024 * 1024  # as the API's body limit


def _read_job_file(path: Path):
    """Load a Job file; relative workingDir and hostPath sources are resolved against the
    file's directory. Returns (job or None, findings)."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}")
    if len(text) > MAX_JOB_FILE_BYTES:
        _fail(f"{path} is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; a Job file is a few KiB")
    job, _ = load_job(text)
    if job is None:  # every Finding, the value rules too where they can run
        return None, validate_document(text)[1]
    job = resolve_relative_paths(job, str(path.resolve().parent))
    return job, check_job(job)  # on the resolved paths: what is submitted


# --- local commands -----------------------------------------------------------------------------


@app.command()
def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    format: str = typer.Option("text", "--format", "-o", help="text or json"),
) -> None:
    """Check a Job file and print its Findings (nothing is started). Exit status 1 on errors.

    JSON output: {"valid": bool, "findings": [{"code", "severity", "path", "message", "hint"}]}.
    """
    if format not in ("text", "json"):
        _fail(f"--format {format!r} is not supported; use text or json")
    job, findings = _read_job_file(file)
    valid = job is not None and not has_errors(findings)
    if format == "json":
        out.print_json(json.dumps({"valid": valid,
                                   "findings": [f.model_dump(mode="json") for f in findings]}))
    else:
        _print_findings(findings, out)
        if valid:
            n = sum(1 for f in findings if f.severity == Severity.warning)
            out.print(f"[green]valid[/green]: {file} ({job.total_workers} Workers, "
                      f"{len(job.spec.roles)} roles"
                      f"{f', {n} warning' + ('s' if n > 1 else '') if n else ''})")
        else:
            out.print(f"[red]invalid[/red]: {file}")
    raise typer.Exit(0 if valid else 1)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the Job document (for editors and CI checks)."""
    out.print_json(json.dumps(json_schema()))


# --- RLinf configs: plan and check (logic in rlark.rlinf_config) ------------------------------------

_OUTPUT_FORMATS = ("text", "json", "yaml")


def _pairs(items: Optional[list[str]], option: str) -> dict[str, str]:
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"{option} {item!r} is not NAME=VALUE")
        pairs[key] = value
    return pairs


def _emit(data: dict, format: str) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if format == "json" else dump_yaml(data))


@app.command()
def plan(
    config: Path = typer.Argument(..., metavar="CONFIG",
                                  help="RLinf config: a YAML file, or its directory with --config-name."),
    config_name: Optional[str] = typer.Option(None, "--config-name", "-c",
                                              help="Config name when CONFIG is a directory."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", "-O", metavar="KEY=VALUE",
        help="Hydra override, as on RLinf's command line (repeatable): -O cluster.num_nodes=4"),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", "-g", min=0,
        help="GPUs on each node (0 = CPU-only). Default: the fewest that fit every placement."),
    image: Optional[str] = typer.Option(None, "--image", help="Image for the suggested roles."),
    name: Optional[str] = typer.Option(None, "--name", help="Job name (default: from the config name)."),
    env: Optional[list[str]] = typer.Option(
        None, "--env", metavar="NAME=DIR",
        help="RLinf path variable for composing (REPO_PATH, EMBODIED_PATH, ...). Default: your "
             "environment, else what RLinf's run scripts set for a config inside an RLinf checkout."),
    format: str = typer.Option("text", "--format", "-o",
                               help="text, json, yaml, or job (only the suggested Job, as YAML)"),
) -> None:
    """Plan RLark roles for an RLinf config: node ranks, node groups, where each component runs,
    suggested roles, and a ready-to-edit Job. Reads the config; never changes it.

    \b
    RLinf places its components (actor, rollout, env...) by node rank: cluster.node_groups map
    labels to RLINF_NODE_RANK values, cluster.component_placement puts components on a group's
    resources (GPUs, robots, or whole nodes). RLark gives ranks in role order - the head role's
    Workers first (rank 0 = Ray head, runs the run script), then the other roles in spec order.
    So the suggested roles are one per contiguous rank range RLinf treats the same, in rank order.
    Role names are only labels: a role called "actor" places nothing.

    \b
    Examples:
      rlark plan RLinf/examples/embodiment/config/maniskill_ppo_openvlaoft.yaml --gpus-per-node 8
      rlark plan config/ -c quickstart -O cluster.num_nodes=3 --format json
      rlark plan my.yaml -o job > job.yaml  # just the Job, ready for `rlark check job.yaml`

    JSON: {"num_nodes", "node_groups": {label: [ranks]}, "components": {name: {"node_group",
    "node_ranks", ...}}, "roles": [{"name", "workers", "node_ranks", ...}], "job": {...},
    "findings": [...]}. Exit status 1 when any Finding is an error.
    """
    from rlark.rlinf_config import plan_config
    from rlark.rlinf_config.plan import render_text

    if format not in _OUTPUT_FORMATS + ("job",):
        _fail(f"--format {format!r} is not supported; use text, json, yaml or job")
    if config.is_dir() and not config_name:
        _fail(f"{config} is a directory: name the config with --config-name NAME")
    result = plan_config(config, config_name, override or [], gpus_per_node=gpus_per_node,
                         image=image, job_name=name, env=_pairs(env, "--env"))
    if format == "text":
        sys.stdout.write(render_text(result))
    elif format == "job":
        if result.job:
            sys.stdout.write(dump_yaml(result.job))
        _print_findings(result.findings)  # stderr, so the Job file stays clean
    else:
        _emit(result.to_dict(), format)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def check(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    rlinf_config: Optional[Path] = typer.Option(
        None, "--rlinf-config", "-r", metavar="CONFIG",
        help="RLinf config to check against (a YAML file, or a directory with --config-name). "
             "Default: the one spec.rlinf names (configDir relative to spec.workingDir)."),
    config_name: Optional[str] = typer.Option(None, "--config-name", "-c",
                                              help="Config name when --rlinf-config is a directory."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", "-O", metavar="KEY=VALUE",
        help="Hydra override added after spec.rlinf.overrides (repeatable)."),
    format: str = typer.Option("text", "--format", "-o", help="text, json or yaml"),
) -> None:
    """Check a Job against its RLinf config: everything `rlark validate` reports, plus whether
    the roles' Workers add up to cluster.num_nodes, line up with node_groups, have the GPUs the
    placements need, and whether the config still holds placeholders (ROBOT_IP, /path/to/model)
    or paths outside the mounts. The same checks run when the Job is submitted.

    \b
    Examples:
      rlark check job.yaml                                   # config from spec.rlinf
      rlark check job.yaml --rlinf-config RLinf/examples/embodiment/config/x.yaml -O a.b=1

    JSON output like `rlark validate`: {"valid": bool, "findings": [...]}. Exit status 1 on
    any error Finding. A config named only in spec.rlinf that is not on this machine is a
    warning (it may exist only in the image); an explicit --rlinf-config must exist.
    """
    from rlark.rlinf_config import preflight_job
    from rlark.rlinf_config.compose import locate

    if format not in _OUTPUT_FORMATS:
        _fail(f"--format {format!r} is not supported; use text, json or yaml")
    if rlinf_config is not None and rlinf_config.is_dir() and not config_name:
        _fail(f"{rlinf_config} is a directory: name the config with --config-name NAME")
    job, findings = _read_job_file(file)
    if job is not None:
        overrides = [*(job.spec.rlinf.overrides if job.spec.rlinf else []), *(override or [])]
        where = locate(rlinf_config, config_name) if rlinf_config is not None else None
        findings = findings + preflight_job(job, config=where, overrides=overrides,
                                            missing_is_error=rlinf_config is not None)
    valid = job is not None and not has_errors(findings)
    if format != "text":
        _emit({"valid": valid, "findings": [f.model_dump(mode="json") for f in findings]}, format)
    else:
        _print_findings(findings, out)
        n = sum(1 for f in findings if f.severity == Severity.warning)
        out.print(f"[green]valid[/green]: {file}{f' ({n} warning' + ('s' if n > 1 else '') + ')' if n else ''}" if valid
                  else f"[red]invalid[/red]: {file}")
    raise typer.Exit(0 if valid else 1)


@app.command()
def server(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (beyond loopback, "
                             "authentication must stay on)."),
    port: int = typer.Option(settings.DEFAULT_PORT, min=1, max=65535, help="Port to listen on."),
    database_url: Optional[str] = typer.Option(
        None, envvar="RLARK_DATABASE_URL",
        help="SQLAlchemy URL (default: SQLite in $RLARK_HOME, which defaults to ~/.rlark); "
             "PostgreSQL: postgresql://user:pass@host/db"),
    runtime: str = typer.Option("local", "--runtime", "-r", envvar="RLARK_RUNTIME",
                                help="Where Workers run: local (process groups on this machine) "
                                     "or kubernetes (one Pod per Worker)."),
    namespace: Optional[str] = typer.Option(
        None, "--namespace", "-n", envvar="RLARK_NAMESPACE",
        help="kubernetes: namespace of the project 'default' (default: the ServiceAccount's in a "
             "Pod, else the kubeconfig context's, else default); other projects use "
             "<namespace>-<project> unless created with their own."),
    allowed_host: Optional[list[str]] = typer.Option(
        None, "--allowed-host", metavar="NAME",
        help="Also answer requests whose Host is NAME (repeatable; *.example.com for "
             "subdomains; also $RLARK_ALLOWED_HOSTS, comma-separated). Default: loopback names "
             "(and this machine's names when --host is not loopback)."),
    cors_origin: Optional[list[str]] = typer.Option(
        None, "--cors-origin", metavar="ORIGIN",
        help="Let web pages from ORIGIN (https://app.example.com) call the API with a token "
             "(repeatable; also $RLARK_CORS_ORIGINS). Default: CORS closed."),
    no_auth: bool = typer.Option(
        False, "--no-auth",
        help="Turn authentication off: every request acts as a site administrator. Refused "
             "unless --host is a loopback address."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="Serve HTTPS with this "
                                            "certificate (PEM); cookies are then Secure."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="The certificate's key (PEM)."),
) -> None:
    """Run the RLark server: REST API (OpenAPI at /docs), web console and the controller.

    State (database and Worker logs) lives in $RLARK_HOME (default ~/.rlark); one server per
    store. Ctrl-C stops the server and every Worker it started. With --runtime kubernetes the
    server uses the in-cluster ServiceAccount or your kubeconfig; docs/kubernetes.md.

    \b
    Every request is authenticated (docs/security.md). On its first start the server creates
    the site administrator "admin" and writes its API token to $RLARK_HOME/credentials (mode
    0600), where `rlark` on this machine finds it; set RLARK_ADMIN_TOKEN to choose the token.
    Then: `rlark user create alice --project default --role member --token` for each person.
    """
    from rlark.server import serve

    from sqlalchemy.exc import SQLAlchemyError

    from rlark.store.lock import StoreBusy

    if runtime not in ("local", "kubernetes"):
        _fail(f"--runtime {runtime!r} is not supported; use local or kubernetes")
    try:
        serve(host, port, database_url, runtime=runtime, namespace=namespace, auth=not no_auth,
              allowed_hosts=tuple(allowed_host or ()), cors_origins=tuple(cors_origin or ()),
              tls_cert=str(tls_cert) if tls_cert else None, tls_key=str(tls_key) if tls_key else None)
    except (ValueError, StoreBusy) as exc:
        _fail(str(exc))
    except (SQLAlchemyError, OSError) as exc:
        url = database_url or os.environ.get("RLARK_DATABASE_URL") or "sqlite under $RLARK_HOME"
        _fail(f"cannot open the database {settings.redact_url(url)!r}: "
              f"{settings.redact_url(str(exc).splitlines()[0], url)}. Check RLARK_DATABASE_URL / "
              "--database-url (PostgreSQL: postgresql://user:pass@host:port/db)")


@app.command()
def render(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    runtime: str = typer.Option("kubernetes", "--runtime", "-r", help="Only kubernetes renders objects."),
    namespace: str = typer.Option("default", "--namespace", "-n", help="Namespace of the objects."),
    run_id: Optional[str] = typer.Option(
        None, "--run-id", help="Run id (label rlark.io/run, part of names); default: a new one."),
    ray_dashboard: bool = typer.Option(False, "--ray-dashboard",
                                       help="Start Ray's dashboard on the head (needs ray[default])."),
) -> None:
    """Print the Kubernetes objects of one Run of a Job as a YAML stream: a ConfigMap carrying the
    bootstrap, the head's headless Service, PVCs for objectStorage mounts with a StorageClass, and
    one Pod per Worker (<job>-<role>-<index>, RLINF_NODE_RANK and the other variables set
    explicitly). Nothing is started; `kubectl apply -f -` of the output runs the Job without the
    RLark server (which adds status, logs, records and stop).

    \b
    Examples:
      rlark render job.yaml --namespace rl | kubectl apply -f -
      kubectl delete pods,services,configmaps,pvc -n rl -l rlark.io/run=<id>   # clean up
    """
    import uuid

    from rlark.runtimes.kubernetes import render as k8s

    if runtime != "kubernetes":
        _fail(f"--runtime {runtime!r}: only kubernetes has objects to render")
    job, findings = _read_job_file(file)
    if job is not None:
        from rlark.runtimes.kubernetes.preflight import check_spec_for_kubernetes

        findings = findings + check_spec_for_kubernetes(job)
    if job is None or has_errors(findings):
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was rendered")
    _print_findings([f for f in findings if f.severity != Severity.error])
    rid = run_id or uuid.uuid4().hex[:12]
    try:
        k8s.check_run_id(rid)
        objs = k8s.render_run(job, rid, k8s.RenderOptions(namespace=namespace,
                                                          ray_dashboard=ray_dashboard))
    except ValueError as exc:
        _fail(str(exc))
    header = (f"RLark Job {job.name}, run {rid}: {job.total_workers} Workers in namespace {namespace}\n"
              f"apply:  kubectl apply -f <this file>\n"
              f"remove: kubectl delete pods,services,configmaps,pvc -n {namespace} "
              f"-l {k8s.LABEL_RUN}={rid}")
    sys.stdout.write(k8s.dump_stream(objs, header))


# --- API commands -------------------------------------------------------------------------------


@app.command()
def nodes(
    format: str = typer.Option("table", "--format", "--output", "-o", help="table or json"),
    show_labels: bool = typer.Option(False, "--show-labels",
                                     help="Add a LABELS column (key=value, as kubectl shows them)."),
    server: Optional[str] = ServerOpt,
) -> None:
    """List the nodes the server's runtime places Workers on: readiness, cordon, free/allocatable
    cpu, memory, GPUs and other devices, taints and (--show-labels) labels (Kubernetes), or this
    machine (local), where free is what active Jobs' Workers leave."""
    if format not in ("table", "json"):
        _fail(f"--format {format!r} is not supported; use table or json")
    data = _call(_client(server).get, "/api/v1/nodes")
    if format == "json":
        out.print_json(json.dumps(data))
        return
    if data.get("error"):
        err.print(Text(f"warning: {data['error']}", style="yellow"))
    gib = 1024**3
    columns = ("cpu", "memory", "nvidia.com/gpu")

    def amount(d: dict, key: str) -> str:
        v = d.get(key)
        if v is None:
            return "-"
        return f"{v / gib:.1f}Gi" if key == "memory" else f"{v:g}"

    table = Table(box=None, header_style="bold")
    for col in ("NAME", "STATUS", "CPU FREE/ALLOC", "MEMORY FREE/ALLOC", "GPU FREE/ALLOC", "DEVICES",
                "TAINTS", *(("LABELS",) if show_labels else ())):
        table.add_column(col)
    for n in data["items"]:
        status = ("Ready" if n["ready"] else "NotReady") + ("" if n["schedulable"] else ",Cordoned")
        devices = ",".join(f"{k}={amount(n['free'], k)}/{amount(n['allocatable'], k)}"
                           for k in n["allocatable"] if k not in columns)
        labels = (",".join(f"{k}={v}" for k, v in n["labels"].items()) or "-",) if show_labels else ()
        table.add_row(n["name"], status,
                      *(f"{amount(n['free'], k)}/{amount(n['allocatable'], k)}" for k in columns),
                      devices or "-", ",".join(n["taints"]) or "-", *labels)
    if not data["items"]:
        out.print(f"no nodes ({data['runtime']} runtime)")
    else:
        out.print(table)
        if data.get("freeBasis") == "namespace":
            out.print("[dim]free = allocatable minus the requests of Pods in RLark's namespace only "
                      "(no permission to list Pods cluster-wide)[/dim]")
        elif data.get("freeBasis") == "rlark":
            out.print("[dim]free = this machine minus what the Workers of active RLark Jobs ask "
                      "for (other programs are not counted)[/dim]")


@app.command()
def submit(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    wait: bool = typer.Option(False, "--wait", "-w",
                              help="Show progress until the Job ends; exit 0 only if it succeeds."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Submit a Job. Relative paths in it (workingDir, hostPath mounts) are resolved against the
    file's directory. With --wait: live phase and Workers joined k/N, then the result.

    \b
    Examples:
      rlark submit job.yaml --wait
      rlark submit job.yaml -p vision        # into the project vision
    """
    job, findings = _read_job_file(file)
    if job is None or has_errors(findings):
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was submitted")
    _print_findings([f for f in findings if f.severity != Severity.error])
    client = _job_client(server, project)
    created = _call(client.post, "/api/v1/jobs", dump_job(job, "json").encode(), "application/json")
    shown = {(f.code, f.path) for f in findings}  # the server adds runtime and RLinf Findings
    _print_findings([f for f in created.get("findings", []) if (f["code"], f["path"]) not in shown])
    out.print(f"job/[bold]{created['name']}[/bold] submitted (run {created['currentRun']['number']}, "
              f"{created['workersTotal']} Workers)")
    if wait:
        raise typer.Exit(_wait(client, created["name"]))


@app.command()
def apply(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    wait: bool = typer.Option(False, "--wait", "-w",
                              help="Show progress until the Job ends; exit 0 only if it succeeds."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Create the Job, or give an existing Job this spec and start a new Run with it (its
    current Run is stopped first; earlier Runs keep their records).

    \b
    Example:
      rlark apply job.yaml -p vision --wait
    """
    job, findings = _read_job_file(file)
    if job is None or has_errors(findings):
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was changed")
    _print_findings([f for f in findings if f.severity != Severity.error])
    client = _job_client(server, project)
    body = dump_job(job, "json").encode()
    try:
        client.get(f"/api/v1/jobs/{job.name}")
        exists = True
    except ClientError as exc:
        if exc.status != 404:
            _fail(exc.message)
        exists = False
    if exists:
        res = _call(client.put, f"/api/v1/jobs/{job.name}", body, "application/json")
        out.print(f"job/[bold]{job.name}[/bold] updated; new run {res['currentRun']['number']}")
    else:
        res = _call(client.post, "/api/v1/jobs", body, "application/json")
        out.print(f"job/[bold]{job.name}[/bold] created (run {res['currentRun']['number']})")
    if wait:
        raise typer.Exit(_wait(client, job.name))


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
    return text


def _wait(client: Client, name: str) -> int:
    """Follow a Job until it ends: a live line on a terminal, one line per change elsewhere.
    Returns the exit status (0 only for Succeeded)."""
    started = time.monotonic()
    job = _call(client.get, f"/api/v1/jobs/{name}")
    try:
        if err.is_terminal:
            with Live(_progress_line(job), console=err, transient=False, refresh_per_second=8) as live:
                while job["phase"] not in TERMINAL:
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
                if job["phase"] in TERMINAL:
                    break
                time.sleep(0.25)
                job = _call(client.get, f"/api/v1/jobs/{name}")
    except KeyboardInterrupt:
        err.print(f"\nstopped watching; job/{name} keeps running. Stop it with "
                  f"`rlark stop {name}{_project_flag(client)}`.")
        return 130
    phase = job["phase"]
    if phase == "Succeeded":
        out.print(f"[green]Succeeded[/green]: {job['message']}")
        return 0
    out.print(Text(f"{phase} ", style="red") + Text(f"({job['reason']}): {job['message']}"))
    _print_failure_context(client, job)
    return 1


def _print_failure_context(client: Client, job: dict) -> None:
    """The last lines of the Worker that failed (or the head), and where to look next."""
    run = job.get("currentRun") or {}
    workers = run.get("workers", [])
    culprit = next((w for w in workers if w["phase"] == "Failed"), None) or next(
        (w for w in workers if w["isHead"]), None)
    if culprit is None:
        return
    try:
        data = client.get(f"/api/v1/jobs/{job['name']}/logs", worker=culprit["name"], tail=15)
    except ClientError:
        return
    lines = [l for l in data["workers"][0]["lines"]
             if not l.startswith("RLARK_EVENT ") and not RAY_CLI_LINE.match(ANSI.sub("", l))]
    if lines:
        out.print(f"[dim]last lines of {culprit['name']}:[/dim]")
        for line in lines[-10:]:
            out.print(Text("  " + ANSI.sub("", line)))
    p = _project_flag(client)
    out.print(f"see: rlark describe job {job['name']}{p}; rlark logs {job['name']}{p} --worker {culprit['name']}")


def _project_flag(client: Client) -> str:
    """`` -p NAME`` for the hints a command prints, when it acts outside ``default``."""
    return f" -p {client.project}" if client.project and client.project != "default" else ""


@get_app.command("jobs")
def get_jobs(
    phase: Optional[str] = typer.Option(None, help="Only Jobs in this phase."),
    search: Optional[str] = typer.Option(None, "--search", "-q", help="Name contains."),
    format: str = typer.Option("table", "--format", "--output", "-o", help="table, json or yaml"),
    limit: int = typer.Option(100, help="At most this many Jobs."),
    all_projects: bool = typer.Option(
        False, "--all-projects", "-A",
        help="Jobs of every project you can read (adds PROJECT; --project is ignored)."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List Jobs of the current project, newest first: phase and reason, Workers joined, roles,
    age.

    \b
    Examples:
      rlark get jobs                 # the current project (`rlark project use NAME` sets it)
      rlark get jobs -p vision       # another project
      rlark get jobs -A -o json      # every project you can read
    """
    if format not in ("table", "json", "yaml"):
        _fail(f"--format {format!r} is not supported; use table, json or yaml")
    client = _client(server) if all_projects else _job_client(server, project)
    data = _call(client.get, "/api/v1/jobs", phase=phase, q=search, limit=limit)
    if format != "table":
        _emit(data, format)
        return
    table = Table(box=None, header_style="bold")
    for col in (("PROJECT",) if all_projects else ()) + (
            "NAME", "PHASE", "REASON", "WORKERS", "ROLES", "RUN", "CREATED"):
        table.add_column(col)
    for j in data["items"]:
        table.add_row(
            *((j.get("project") or "",) if all_projects else ()),
            j["name"], Text(j["phase"], style=PHASE_STYLE.get(j["phase"], "")), j["reason"],
            f"{j['workersReady']}/{j['workersTotal']}",
            ",".join(f"{r['name']}:{r['workers']}" for r in j["roles"]),
            str(j["run"] or ""), (j["createdAt"] or "")[:19].replace("T", " "),
        )
    if not data["items"]:
        where = " in any project you can read" if all_projects else f" in project {client.project}"
        out.print("no Jobs" + (f" in phase {phase}" if phase else "") + where
                  + "; submit one with `rlark submit FILE`")
    else:
        out.print(table)


@describe_app.command("job")
def describe_job(
    name: str = typer.Argument(..., metavar="NAME", help="Job name."),
    format: str = typer.Option("text", "--format", "--output", "-o", help="text, json or yaml"),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Phase and reason, Tasks (one per role: ready k/N, node ranks), Workers with node ranks,
    hosts, IPs, Ray node ids and exit codes (143 (SIGTERM): stopped by RLark), Runs, Events
    (with the USER who asked for each change).

    \b
    Example:
      rlark describe job quickstart -p default
    """
    _check_name(name)
    if format not in ("text", "json", "yaml"):
        _fail(f"--format {format!r} is not supported; use text, json or yaml")
    client = _job_client(server, project)
    job = _call(client.get, f"/api/v1/jobs/{name}")
    events = _call(client.get, f"/api/v1/jobs/{name}/events")
    if format != "text":
        _emit({**job, "events": events}, format)
        return
    run = job.get("currentRun") or {}
    out.print(f"[bold]Name:[/bold]      {job['name']}")
    out.print(f"[bold]Project:[/bold]   {job.get('project') or client.project}")
    out.print(Text("Phase:     ", style="bold") + Text(job["phase"], style=PHASE_STYLE.get(job["phase"], ""))
              + Text(f"  {job['reason']}: {job['message']}"))
    out.print(f"[bold]Head role:[/bold] {job['headRole']}    [bold]Runtime:[/bold] {job['runtime']}")
    out.print(f"[bold]Created:[/bold]   {job['createdAt']}")
    if run:
        def show(v):
            return "-" if v is None else v
        out.print(f"[bold]Run:[/bold]       {run['number']} ({run['cause']})  started {show(run['startedAt'])}  "
                  f"running {show(run['runningAt'])}  finished {show(run['finishedAt'])}  "
                  f"exit {show(run['exitCode'])}")
    for f in job.get("findings", []):
        # messages name their field path already (preflight's rule); say it once
        message = f["message"] if f["message"].startswith(f["path"]) else f"{f['path']}: {f['message']}"
        out.print(f"[yellow]Finding:[/yellow]   {f['code']} {message}")
    tasks = Table(title="Tasks (one per role)", box=None, header_style="bold", title_justify="left")
    for col in ("ROLE", "PHASE", "READY", "NODE RANKS"):
        tasks.add_column(col)
    for t in run.get("tasks", []):
        first, last = t["nodeRanks"]
        tasks.add_row(t["role"], Text(t["phase"], style=PHASE_STYLE.get(t["phase"], "")),
                      f"{t['ready']}/{t['total']}", str(first) if first == last else f"{first}-{last}")
    if run.get("tasks"):
        out.print(tasks)
    table = Table(title="Workers", box=None, header_style="bold", title_justify="left")
    for col in ("RANK", "NAME", "ROLE", "PHASE", "HOST", "IP", "RAY NODE", "EXIT", "REASON"):
        table.add_column(col)
    for w in run.get("workers", []):
        table.add_row(str(w["nodeRank"]), w["name"], w["role"],
                      Text(w["phase"], style=PHASE_STYLE.get(w["phase"], "")),
                      w["host"] or "", w["ip"] or "", (w["rayNodeId"] or "")[:12],
                      exit_text(w["exitCode"]), w["reason"] or "")
    out.print(table)
    runs = Table(title="Runs", box=None, header_style="bold", title_justify="left")
    for col in ("RUN", "CAUSE", "PHASE", "REASON", "EXIT", "STARTED", "FINISHED"):
        runs.add_column(col)
    for r in job["runs"]:
        runs.add_row(str(r["number"]), r["cause"], r["phase"], r["reason"], exit_text(r["exitCode"]),
                     (r["startedAt"] or "")[:19], (r["finishedAt"] or "")[:19])
    out.print(runs)
    ev = Table(title="Events", box=None, header_style="bold", title_justify="left")
    for col in ("TIME", "RUN", "TYPE", "REASON", "USER", "MESSAGE"):
        ev.add_column(col)
    for e in events[-30:]:
        # no actor: RLark itself (the controller) recorded it
        ev.add_row((e["time"] or "")[11:23], str(e["run"] or ""), e["type"], e["reason"],
                   e.get("actor") or "-", e["message"])
    out.print(ev)


@app.command()
def logs(
    name: str = typer.Argument(..., metavar="NAME", help="Job name."),
    role: Optional[str] = typer.Option(None, "--role", "-r", help="Only Workers of this role."),
    rank: Optional[int] = typer.Option(None, "--rank", "-k", help="Only the Worker with this node rank."),
    worker: Optional[str] = typer.Option(None, "--worker", help="Only this Worker (by name)."),
    run: Optional[int] = typer.Option(None, "--run", help="Run number (default: the current Run)."),
    tail: Optional[int] = typer.Option(None, "--tail", "-n", help="Last N lines per Worker."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the Workers end."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Print Worker logs (the bootstrap's lines, Ray's output, and on the head the run script's).
    Several Workers: each line is prefixed with the Worker's name.

    \b
    Examples:
      rlark logs quickstart --role head -f
      rlark logs quickstart --rank 1 --tail 50 -p vision
    """
    _check_name(name)
    client = _job_client(server, project)
    params = dict(role=role, rank=rank, worker=worker, run=run, tail=tail)
    if follow:
        many = True
        try:
            for event, data in client.stream_events(f"/api/v1/jobs/{name}/logs", follow="true", **params):
                if event == "workers":
                    many = len(json.loads(data)) > 1
                elif event == "line":
                    item = json.loads(data)
                    _emit_line(item["worker"], item["line"], prefix=many)
        except ClientError as exc:
            _fail(exc.message)
        except KeyboardInterrupt:
            pass
        return
    data = _call(client.get, f"/api/v1/jobs/{name}/logs", **params)
    many = len(data["workers"]) > 1
    for w in data["workers"]:
        if w.get("truncated"):
            err.print(f"[dim]{w['name']}: the log is long; showing its last 16 MiB "
                      "(use --tail N, or read the file named by `rlark describe job`)[/dim]")
        for line in w["lines"]:
            _emit_line(w["name"], line, prefix=many)


def _emit_line(worker: str, line: str, prefix: bool) -> None:
    if not sys.stdout.isatty():
        line = ANSI.sub("", line)  # Ray colours its own output; keep files and pipes clean
    sys.stdout.write(f"[{worker}] {line}\n" if prefix else line + "\n")
    sys.stdout.flush()


def _check_name(name: str) -> None:
    """Refuse what cannot be a Job name before asking the server (a '/' would be a route)."""
    if not DNS1123_LABEL.match(name):
        _fail(f"{name!r} is not a Job name: Job names are lower-case letters, digits and '-' "
              "(`rlark get jobs` lists them)")


def _action(verb: str, name: str, client: Client) -> dict:
    _check_name(name)
    if verb == "delete":
        return _call(client.delete, f"/api/v1/jobs/{name}")
    return _call(client.post, f"/api/v1/jobs/{name}/{verb}")


@app.command()
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


@app.command()
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


@app.command()
def restart(name: str = typer.Argument(..., metavar="NAME", help="Job name."),
            wait: bool = typer.Option(False, "--wait", "-w", help="Wait for the result."),
            project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Stop the current Run if it is active, then start a new Run.

    \b
    Example:
      rlark restart quickstart -p vision
    """
    client = _job_client(server, project)
    job = _action("restart", name, client)
    out.print(f"job/{name} restarting as run {job['currentRun']['number']}")
    if wait:
        raise typer.Exit(_wait(client, name))


@app.command()
def delete(name: str = typer.Argument(..., metavar="NAME", help="Job name."),
           project: Optional[str] = ProjectOpt, server: Optional[str] = ServerOpt) -> None:
    """Delete a Job with its Runs, Events, records and logs (an active Job is stopped first).

    \b
    Example:
      rlark delete quickstart -p vision
    """
    client = _job_client(server, project)
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


@app.command()
def record(
    name: str = typer.Argument(..., metavar="NAME", help="Job name."),
    run: Optional[int] = typer.Option(None, "--run", help="Run number (default: the current Run)."),
    format: str = typer.Option("md", "--format", "-o", help="json, yaml or md"),
    output: Optional[Path] = typer.Option(None, "--output", help="Write to this file."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """The run record: versions, images, RLinf config as given, node ranks, hosts, Ray node ids,
    mounts, times, result, and where each log is.

    \b
    Example:
      rlark record quickstart --run 2 -o json --output run2.json
    """
    _check_name(name)
    if format not in ("json", "yaml", "md"):
        _fail(f"--format {format!r} is not supported; use json, yaml or md")
    text = _call(_job_client(server, project).get_text, f"/api/v1/jobs/{name}/record", run=run,
                 format=format)
    if format == "json":
        text = json.dumps(json.loads(text), indent=2) + "\n"
    if output:
        output.write_text(text)
        out.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


from rlark import cli_access  # noqa: E402  (its commands use the helpers above)

cli_access.register(app, sys.modules[__name__])


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
