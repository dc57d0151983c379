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
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

import httpx

from rlark import settings
from rlark.client import Client, ClientError, resolve_project, resolve_server
from rlark.exitcodes import exit_text
from rlark.names import DNS1123_LABEL
from rlark.status import TERMINAL, Phase, WorkerPhase
from rlark.words import plural

# The Job model (pydantic), its checks and PyYAML are imported where a command needs them, not
# here: most commands only call the API and print, and each `rlark` call would otherwise pay
# for importing them (about a third of its start-up time).
if TYPE_CHECKING:
    from rlark.findings import Finding
    from rlark.spec import Job



def dump_yaml(data: Any) -> str:
    """:func:`rlark.spec.dump_yaml` (YAML for people), imported when first needed."""
    from rlark.spec import dump_yaml as dump

    return dump(data)

HELP = """RLark runs RLinf training Jobs: it starts every Worker (one Ray node each, with its
RLINF_NODE_RANK), waits for the whole Ray cluster, runs your run script on the head, and keeps
status, events, logs and a run record.

\b
Typical session:
  rlark server &                                    # API + controller (local runtime, SQLite)
  rlark validate examples/quickstart/job.yaml       # Findings; nothing is started
  rlark submit examples/quickstart/job.yaml --wait  # run it and watch Workers join
  rlark describe quickstart                         # phase, reason, Workers, node ranks, Events
  rlark events quickstart                           # every Event of the Job (--run N: one Run's)
  rlark logs quickstart --role head                 # the run script's output
  rlark record quickstart                           # versions, images, ranks, hosts, result

\b
With a team (every request is authenticated; the server's first start stored the admin's token
in $RLARK_HOME/credentials, so on its own machine nothing more is needed):
  rlark user create alice --project default --role member --token    # as an administrator
  rlark login --server https://rlark.example.com    # as alice, elsewhere: paste the token
  rlark project use vision                          # Job commands act in this project (-p NAME)
"""

class _KindOrJobName(TyperGroup):
    """``rlark describe NAME`` and ``rlark get NAME`` as kubectl users type them: a first word
    that is no kind of this group (``job``, ``jobs``, ``nodes``...) is a Job's name, as if
    ``job`` came before it; options may come first (``get -o json NAME``)."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands:
            args = ["job", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(help=HELP, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
get_app = typer.Typer(
    help="""List resources: `rlark get jobs` (the project's Jobs), `rlark get NAME` or `rlark get
    job NAME` (one Job), `rlark get nodes`. A Job named like a kind: `rlark get job NAME`.""",
    no_args_is_help=True, cls=_KindOrJobName, subcommand_metavar="NAME | KIND [NAME] [OPTIONS]",
    context_settings={"ignore_unknown_options": True})
describe_app = typer.Typer(
    help="""Show one resource in detail: `rlark describe NAME` or `rlark describe job NAME` (a
    Job), `rlark describe jobs` (every Job of the project). A Job named like a kind: `rlark
    describe job NAME`.""",
    no_args_is_help=True, cls=_KindOrJobName, subcommand_metavar="NAME | KIND [NAME] [OPTIONS]",
    context_settings={"ignore_unknown_options": True})


def _print_version(value: bool) -> None:
    if value:
        from rlark import __version__

        typer.echo(f"rlark {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print RLark's version and exit (the server's: "
                                      "`GET /api/v1/server`)."),
) -> None:
    # options of `rlark` itself, before the command (the help text is HELP above)
    pass


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

ServerOpt = typer.Option(None, "--server", "-s", envvar="RLARK_SERVER",
                         help=f"RLark server URL (default: the one `rlark login` stored, else "
                              f"{settings.DEFAULT_SERVER}).")
ProjectOpt = typer.Option(None, "--project", "-p", envvar="RLARK_PROJECT",
                          help="Project of the Job (default: the one `rlark project use` chose "
                               "for this server, else default).")
PHASE_STYLE: dict[str, str] = {
    Phase.Succeeded: "green", WorkerPhase.Completed: "green", Phase.Failed: "red",
    WorkerPhase.Terminated: "dim", Phase.Running: "cyan", Phase.Starting: "yellow",
    Phase.Pending: "yellow", Phase.Stopping: "magenta", Phase.Stopped: "magenta"}


def _fail(message: str, code: int = 1) -> NoReturn:
    # one line whatever its length: scripts and tests read the `error: ` line
    err.print(Text("error: ", style="bold red") + Text(message), soft_wrap=True)
    raise typer.Exit(code)


def _print_findings(findings: list[Finding] | list[dict], console: Console = err) -> None:
    if not findings:
        return
    from rlark.findings import Finding

    for f in findings:
        f = f if isinstance(f, Finding) else Finding.model_validate(f)
        style = {"error": "red", "warning": "yellow", "info": "blue"}[f.severity.value]
        line = Text(f"{f.severity.value:7} ", style=f"bold {style}")
        line.append(f"{f.code:20} ", style=style)
        line.append(f"{f.message}")
        console.print(line, soft_wrap=True)
        if f.hint:
            console.print(Text(f"        fix: {f.hint}", style="dim"), soft_wrap=True)


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

#: every read command's -o/--output: the same three forms ("table" and "md" are older names of
#: text, still accepted)
OUTPUT_FORMATS = ("text", "json", "yaml")
#: how a record check's status is coloured
CHECK_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}
_TEXT_ALIASES = {"table": "text", "md": "text", "markdown": "text"}


def _output_option(help_text: str = "text, json or yaml"):
    return typer.Option("text", "--output", "-o", "--format", metavar="FORMAT", help=help_text)


def _output(value: str, extra: tuple[str, ...] = ()) -> str:
    """The -o/--output value as one of :data:`OUTPUT_FORMATS` (or ``extra``); exits naming the
    choices otherwise."""
    value = _TEXT_ALIASES.get(value, value)
    if value in OUTPUT_FORMATS or value in extra:
        return value
    choices = [*OUTPUT_FORMATS, *extra]
    _fail(f"-o/--output {value!r} is not supported; use {', '.join(choices[:-1])} or {choices[-1]}")


def _load_job_file(path: Path) -> tuple[dict | None, list[Finding]]:
    """Read and parse a Job file: ``(document, [])`` with relative workingDir and hostPath
    sources made absolute against the file's directory (whether or not the rest is valid: a
    typo elsewhere must not turn ``workingDir: .`` into an error), or ``(None, [the
    InvalidDocument Finding])`` when it is not YAML/JSON. Exits when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}")
    if len(text) > MAX_JOB_FILE_BYTES:
        _fail(f"{path} is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; a Job file is a few KiB")
    from rlark.spec import SpecSyntaxError, load_document, load_job, resolve_document_paths

    try:
        data = load_document(text)
    except SpecSyntaxError:
        return None, load_job(text)[1]
    return resolve_document_paths(data, str(path.resolve().parent)), []


def _read_job_file(path: Path) -> tuple[Job | None, list[Finding]]:
    """:func:`_load_job_file`, then the spec's own checks here (no server): for commands that
    work without one (render)."""
    from rlark.preflight import check_document

    data, findings = _load_job_file(path)
    if data is None:
        return None, findings
    return check_document(data)


def _document_body(data: dict) -> bytes | None:
    """A parsed Job document as YAML for the API (YAML keeps what JSON cannot say, such as
    dates, so the server reads exactly what the file holds); None when it cannot be encoded
    (text that is not valid Unicode)."""
    import yaml

    try:
        return dump_yaml(data).encode("utf-8")
    except (UnicodeEncodeError, yaml.YAMLError):
        return None


#: what only the server can check (its runtime's preflight), for the Finding that says so
RUNTIME_CHECKS = ("this machine's capacity (CPU, memory, GPUs) and Ray port blocks, "
                  "local.python and workingDir on the server's machine (local runtime); "
                  "node capacity, selectors and quotas (kubernetes)")


class Checked:
    """The Findings for a Job file and who produced them (``server``: its URL, or None when
    no server could be asked; ``why``: why not)."""

    def __init__(self, document: dict | None, findings: list[Finding], server: str | None,
                 why: str | None = None):
        self.document = document
        self.findings = findings
        self.server = server
        self.why = why

    @property
    def valid(self) -> bool:
        """What submitting would decide: a Job without error Findings."""
        from rlark.findings import has_errors

        return self.document is not None and not has_errors(self.findings)


def _check_file(file: Path, server: Optional[str], project: Optional[str], *,
                rlinf_config: tuple[str, str] | None = None,
                overrides: list[str] | None = None) -> Checked:
    """Every Finding ``rlark submit`` would get for ``file``: the server's
    (``POST /api/v1/check``: the spec, its runtime, the RLinf config in ``spec.rlinf``) when a
    server answers, else the checks this machine can run, plus an ``info`` Finding
    ``RuntimeNotChecked`` naming what only the server checks.

    ``rlinf_config``/``overrides`` (``rlark check --rlinf-config/-O``): check the RLinf part
    against that config here, instead of the server's check of ``spec.rlinf``.
    """
    from rlark.findings import Finding, Severity
    from rlark.preflight import check_document
    from rlark.rlinf_config import preflight_job

    data, findings = _load_job_file(file)
    if data is None:
        return Checked(None, findings, None)
    own_rlinf = rlinf_config is not None or bool(overrides)
    body = _document_body(data)
    why = None
    url = None
    if body is None:
        why = "the document holds text that is not valid Unicode"
    else:
        try:
            client = Client(server, timeout=httpx.Timeout(120.0, connect=5.0),
                            project=resolve_project(resolve_server(server), project))
            url = client.base
            answer = client.post("/api/v1/check" + ("?rlinf=false" if own_rlinf else ""), body)
            findings = [Finding.model_validate(f) for f in answer["findings"]]
        except ClientError as exc:
            if exc.status is not None and exc.status not in (401, 403):
                _fail(exc.message)
            why = exc.message
        else:
            job = None
            if own_rlinf:
                job, _ = check_document(data)
    if why is not None:
        job, findings = check_document(data)
        if not own_rlinf and job is not None:
            findings = findings + preflight_job(job)
        url = None
    if own_rlinf and job is not None:
        ref = job.spec.rlinf
        all_overrides = [*(ref.overrides if ref else []), *(overrides or [])]
        findings = findings + preflight_job(job, config=rlinf_config, overrides=all_overrides,
                                            missing_is_error=rlinf_config is not None)
    if why is not None:  # never silently fewer checks than submit runs
        findings = findings + [Finding(
            code="RuntimeNotChecked", severity=Severity.info, path="$",
            message=f"checked here without a server ({why.rstrip('.')}): the spec and its RLinf "
                    f"config only; not checked: {RUNTIME_CHECKS}",
            hint="run the check with the server running (or --server URL); submit runs every "
                 "check")]
    return Checked(data, findings, url, why)


def _report(file: Path, checked: Checked, output: str) -> None:
    """Print a check's Findings (text: one line each and a summary; json/yaml: ``{"valid",
    "findings", "server"}``) and exit 0 when valid, else 1."""
    from rlark.findings import Severity

    valid = checked.valid
    if output != "text":
        _emit({"valid": valid, "findings": [f.model_dump(mode="json") for f in checked.findings],
               "server": checked.server}, output)
        raise typer.Exit(0 if valid else 1)
    _print_findings(checked.findings, out)
    if not valid:
        n = sum(1 for f in checked.findings if f.severity == Severity.error)
        out.print(f"[red]invalid[/red]: {file} ({plural(n, 'error')})", soft_wrap=True)
        raise typer.Exit(1)
    doc = checked.document or {}
    roles = ((doc.get("spec") or {}).get("roles")) or []
    workers = sum(r.get("workers", 1) for r in roles if isinstance(r, dict))
    n = sum(1 for f in checked.findings if f.severity == Severity.warning)
    parts = [plural(workers, "Worker"), plural(len(roles), "role")] + ([plural(n, "warning")] if n else [])
    where = f"checked by {checked.server}" if checked.server else "checked here, without a server"
    out.print(f"[green]valid[/green]: {file} ({', '.join(parts)}; {where})", soft_wrap=True)
    raise typer.Exit(0)


# --- checking Job files -------------------------------------------------------------------------


@app.command()
def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    output: str = _output_option(),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Check a Job file and print its Findings; nothing is started. Exit status 1 on errors.

    The same Findings `rlark check`, `rlark submit`, the API's /api/v1/check and the console's
    review step give: the file is sent to the server's check (its runtime's checks and the RLinf
    config in spec.rlinf included). Without a server the checks this machine can run are run,
    and an info Finding (RuntimeNotChecked) names the ones that were not. Relative workingDir
    and hostPath sources are resolved against the file's directory, as submit does.

    JSON/YAML output: {"valid": bool, "findings": [{"code", "severity", "path", "message",
    "hint"}], "server": URL or null}.
    """
    output = _output(output)
    _report(file, _check_file(file, server, project), output)


@app.command()
def schema(
    what: str = typer.Argument("job", metavar="[job|record]",
                               help="job: the Job document (default); record: the run record."),
) -> None:
    """Print the JSON Schema of the Job document, or of the run record (`rlark schema record`:
    version 2, and version 1 which still reads), for editors and CI checks."""
    if what == "record":
        from rlark.record_schema import record_schema

        _emit(record_schema(), "json")
        return
    if what != "job":
        _fail(f"schema {what!r} is not known; use `rlark schema job` or `rlark schema record`")
    from rlark.spec import json_schema

    _emit(json_schema(), "json")  # as written: no wrapping of long descriptions


# --- RLinf configs: plan and check (logic in rlark.rlinf_config) ------------------------------------


def _pairs(items: Optional[list[str]], option: str) -> dict[str, str]:
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"{option} {item!r} is not NAME=VALUE")
        pairs[key] = value
    return pairs


def _emit(data: Any, format: str) -> None:
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
    output: str = _output_option("text, json, yaml, or job (only the suggested Job, as YAML)"),
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
      rlark plan config/ -c quickstart -O cluster.num_nodes=3 -o json
      rlark plan my.yaml -o job > job.yaml  # just the Job, ready for `rlark check job.yaml`

    JSON: {"num_nodes", "node_groups": {label: [ranks]}, "components": {name: {"node_group",
    "node_ranks", ...}}, "roles": [{"name", "workers", "node_ranks", ...}], "job": {...},
    "findings": [...]}. Exit status 1 when any Finding is an error.
    """
    from rlark.rlinf_config import plan_config
    from rlark.rlinf_config.plan import render_text

    output = _output(output, ("job",))
    if config.is_dir() and not config_name:
        _fail(f"{config} is a directory: name the config with --config-name NAME")
    result = plan_config(config, config_name, override or [], gpus_per_node=gpus_per_node,
                         image=image, job_name=name, env=_pairs(env, "--env"))
    if output == "text":
        sys.stdout.write(render_text(result))
    elif output == "job":
        if result.job:
            sys.stdout.write(dump_yaml(result.job))
        _print_findings(result.findings)  # stderr, so the Job file stays clean
    else:
        _emit(result.to_dict(), output)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def check(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    rlinf_config: Optional[Path] = typer.Option(
        None, "--rlinf-config", "-r", metavar="CONFIG",
        help="RLinf config to check against instead of the one spec.rlinf names (a YAML file, or "
             "a directory with --config-name), read on this machine."),
    config_name: Optional[str] = typer.Option(None, "--config-name", "-c",
                                              help="Config name when --rlinf-config is a directory."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", "-O", metavar="KEY=VALUE",
        help="Hydra override added after spec.rlinf.overrides (repeatable); the RLinf part is "
             "then checked on this machine."),
    output: str = _output_option(),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Check a Job against the server's runtime and its RLinf config: everything `rlark
    validate` reports (the two give the same Findings, as do submit, the API's /api/v1/check
    and the console's review step), including whether the roles' Workers add up to
    cluster.num_nodes, line up with node_groups, have the GPUs the placements need, and whether
    the config still holds placeholders (ROBOT_IP, /path/to/model) or paths outside the mounts.

    \b
    Examples:
      rlark check job.yaml                                   # as submit will check it
      rlark check job.yaml --rlinf-config RLinf/examples/embodiment/config/x.yaml -O a.b=1

    JSON output like `rlark validate`: {"valid": bool, "findings": [...], "server": ...}. Exit
    status 1 on any error Finding. A config named only in spec.rlinf that is not on the
    server's machine is a warning (it may exist only in the image); an explicit --rlinf-config
    must exist. Without a server, the checks this machine can run are run and an info Finding
    (RuntimeNotChecked) names the rest.
    """
    from rlark.rlinf_config.compose import locate

    output = _output(output)
    if rlinf_config is not None and rlinf_config.is_dir() and not config_name:
        _fail(f"{rlinf_config} is a directory: name the config with --config-name NAME")
    where = locate(rlinf_config, config_name) if rlinf_config is not None else None
    _report(file, _check_file(file, server, project, rlinf_config=where, overrides=override),
            output)


#: what `rlark server --log-level` takes (Python's logging levels, as uvicorn names them)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@app.command()
def server(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (beyond loopback, "
                             "authentication must stay on)."),
    port: int = typer.Option(settings.DEFAULT_PORT, min=1, max=65535, envvar="RLARK_PORT",
                             help="Port to listen on (the CLI's --server / RLARK_SERVER names it)."),
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
    trusted_proxy: Optional[list[str]] = typer.Option(
        None, "--trusted-proxy", metavar="ADDRESS",
        help="Believe X-Forwarded-For/-Proto from this address (a TLS proxy in front; "
             "repeatable; also $RLARK_TRUSTED_PROXIES). Default: from nobody."),
    stop_runs_on_exit: bool = typer.Option(
        False, "--stop-runs-on-exit", envvar="RLARK_STOP_RUNS_ON_EXIT",
        help="Stop every active Run when the server shuts down. Default: Runs keep running "
             "through a restart or upgrade, and the next server on the same store adopts them."),
    leader_elect: Optional[bool] = typer.Option(
        None, "--leader-elect/--no-leader-elect", envvar="RLARK_LEADER_ELECT",
        help="kubernetes: run as one of several replicas on one store (PostgreSQL): each serves "
             "the API and console, only the holder of the Lease rlark-controller in --namespace "
             "reconciles, and another takes over within 15 s when it dies. Default: on with "
             "--runtime kubernetes, off with local (one server per store)."),
    worker_env: Optional[list[str]] = typer.Option(
        None, "--worker-env", metavar="NAME",
        help="local: also give Workers the server's variable NAME (repeatable; also "
             "$RLARK_WORKER_ENV, comma-separated). By default Workers get only PATH, HOME, "
             "locale, TZ, proxy settings and what their role's env sets (docs/security.md)."),
    secret_key_file: Optional[Path] = typer.Option(
        None, "--secret-key-file", envvar="RLARK_SECRET_KEY_FILE",
        help="The key the project secrets are sealed with (default $RLARK_HOME/secret.key, made "
             "on the first start; or give the key itself in $RLARK_SECRET_KEY)."),
    config_root: Optional[list[str]] = typer.Option(
        None, "--config-root", metavar="DIR",
        help="Also let Jobs name RLinf configs (spec.rlinf.configDir) under DIR (repeatable; "
             "also $RLARK_CONFIG_ROOTS, comma-separated). By default only under the Job's own "
             "spec.workingDir."),
    worker_isolation: Optional[str] = typer.Option(
        None, "--worker-isolation", envvar="RLARK_WORKER_ISOLATION",
        metavar="auto|pid-namespace|cgroup|user-namespace|process-group",
        help="local: how each Worker's processes are kept together, so stopping a Run ends every "
             "process it started. Default auto: the strongest kind this server can make (probed "
             "at start; the server refuses to start when there is none). process-group is weak: "
             "a process that calls setsid() can outlive its Worker. docs/security.md."),
    worker_identity: Optional[str] = typer.Option(
        None, "--worker-identity", envvar="RLARK_WORKER_IDENTITY", metavar="auto|uid|server-user",
        help="local: who Workers run as. Default auto: a uid of each Run's own (from "
             "$RLARK_WORKER_UIDS) in a mount namespace that hides this server's files, when the "
             "server runs as root; else this server's own user, which only a single-user server "
             "on loopback may do (a server with more users refuses local Jobs then). "
             "docs/security.md, \"Worker identity\"."),
    worker_read_path: Optional[list[str]] = typer.Option(
        None, "--worker-read-path", metavar="DIR",
        help="local: let Workers that run under their own uid be given paths under DIR (a "
             "workingDir, a local.python) although other users of this machine cannot read "
             "them (repeatable; also $RLARK_WORKER_READ_PATHS). The server's own Python "
             "installation always is; $RLARK_HOME never is."),
    allow_unauthenticated_ray: bool = typer.Option(
        False, "--allow-unauthenticated-ray", envvar="RLARK_ALLOW_UNAUTHENTICATED_RAY",
        help="Let a Worker whose Ray is older than 2.52 (no token authentication) run without "
             "it; its record says so. Default: refused, as anyone on its network could join "
             "its Ray cluster."),
    k8s_allow_root: bool = typer.Option(
        False, "--k8s-allow-root", envvar="RLARK_K8S_ALLOW_ROOT",
        help="kubernetes: let a role run its Workers as root (kubernetes.runAsRoot; still "
             "without Linux capabilities). Default: refused; Workers run as a non-root user. "
             "docs/security.md."),
    k8s_host_path_prefix: Optional[list[str]] = typer.Option(
        None, "--k8s-host-path-prefix", metavar="DIR",
        help="kubernetes: let hostPath mounts use directories under DIR (repeatable; also "
             "$RLARK_K8S_HOST_PATH_PREFIXES, comma-separated). Default: no hostPath mounts; "
             "/ and system directories are always refused."),
    k8s_service_account: Optional[list[str]] = typer.Option(
        None, "--k8s-service-account", metavar="NAME",
        help="kubernetes: let roles name the ServiceAccount NAME (kubernetes.serviceAccountName; "
             "repeatable; also $RLARK_K8S_SERVICE_ACCOUNTS). Default: none, Workers use the "
             "namespace's default."),
    k8s_csi_driver: Optional[list[str]] = typer.Option(
        None, "--k8s-csi-driver", metavar="NAME",
        help="kubernetes: let objectStorage mounts use the CSI driver NAME inline "
             "(kubernetes.csiDriver; repeatable; also $RLARK_K8S_CSI_DRIVERS). Default: none "
             "(the driver acts on the node with the node's credentials)."),
    k8s_storage_class: Optional[list[str]] = typer.Option(
        None, "--k8s-storage-class", metavar="NAME",
        help="kubernetes: let objectStorage mounts make claims of the StorageClass NAME "
             "(kubernetes.storageClass; repeatable; also $RLARK_K8S_STORAGE_CLASSES). Default: none."),
    k8s_toleration: Optional[list[str]] = typer.Option(
        None, "--k8s-toleration", metavar="KEY[=VALUE][:EFFECT]",
        help="kubernetes: let roles tolerate taints of KEY (only VALUE, only EFFECT when given; "
             "* for any; kubernetes.tolerations; repeatable; also $RLARK_K8S_TOLERATIONS). "
             "Default: none, so tainted nodes stay out of reach."),
    max_jobs_per_project: int = typer.Option(
        500, "--max-jobs-per-project", min=1, max=1_000_000, envvar="RLARK_MAX_JOBS_PER_PROJECT",
        help="Quota: Jobs a project may keep (`rlark project set-quota` sets a project's own)."),
    max_active_workers_per_project: int = typer.Option(
        256, "--max-active-workers-per-project", min=1, max=1_000_000,
        envvar="RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT",
        help="Quota: Workers the active Runs of a project may hold at once."),
    log_level: str = typer.Option(
        "info", "--log-level", envvar="RLARK_LOG_LEVEL", metavar="|".join(LOG_LEVELS),
        help="The least severe log lines the server writes (RLark's own and the web server's)."),
    access_log: bool = typer.Option(
        False, "--access-log/--no-access-log", envvar="RLARK_ACCESS_LOG",
        help="Also log one line per HTTP request (the web server's access log). Default off: "
             "the log keeps what RLark itself has to say (the audit log, `rlark audit`, records "
             "who changed what)."),
) -> None:
    """Run the RLark server: REST API (OpenAPI at /docs), web console and the controller.

    State (database and Worker logs) lives in $RLARK_HOME (default ~/.rlark); one server per
    store. Ctrl-C stops the server; active Runs keep running and the next `rlark server` on the
    same store adopts them (--stop-runs-on-exit stops them instead). With --runtime kubernetes the
    server uses the in-cluster ServiceAccount or your kubeconfig, and replicas elect a leader
    (--leader-elect; GET /api/v1/server says who leads); docs/kubernetes.md.

    \b
    Every request is authenticated (docs/security.md). On its first start the server creates
    the site administrator "admin" and writes its API token to $RLARK_HOME/credentials (mode
    0600), where `rlark` on this machine finds it; set RLARK_ADMIN_TOKEN to choose the token.
    Then: `rlark user create alice --project default --role member --token` for each person.
    """
    from rlark.server import serve

    from sqlalchemy.exc import SQLAlchemyError

    from rlark.services.quotas import Quotas

    from rlark.store.lock import StoreBusy

    from rlark.runtimes import RUNTIMES

    if runtime not in RUNTIMES:
        _fail(f"--runtime {runtime!r} is not supported; use {' or '.join(RUNTIMES)}")
    if log_level.lower() not in LOG_LEVELS:
        _fail(f"--log-level {log_level!r} is not a level; use {', '.join(LOG_LEVELS)}")
    # these settings are read where they are used, from the environment, as their envvars are
    for var, given in (("RLARK_WORKER_ENV", worker_env), ("RLARK_CONFIG_ROOTS", config_root),
                       ("RLARK_K8S_HOST_PATH_PREFIXES", k8s_host_path_prefix),
                       ("RLARK_K8S_SERVICE_ACCOUNTS", k8s_service_account),
                       ("RLARK_WORKER_READ_PATHS", worker_read_path),
                       ("RLARK_K8S_CSI_DRIVERS", k8s_csi_driver),
                       ("RLARK_K8S_STORAGE_CLASSES", k8s_storage_class),
                       ("RLARK_K8S_TOLERATIONS", k8s_toleration)):
        if given:
            os.environ[var] = ",".join(settings.csv_env(var) + list(given))
    if k8s_allow_root:
        os.environ["RLARK_K8S_ALLOW_ROOT"] = "1"
    if allow_unauthenticated_ray:
        os.environ["RLARK_ALLOW_UNAUTHENTICATED_RAY"] = "1"
    if worker_identity:
        os.environ["RLARK_WORKER_IDENTITY"] = worker_identity
    if secret_key_file is not None:
        os.environ["RLARK_SECRET_KEY_FILE"] = str(secret_key_file)
    try:
        serve(host, port, database_url, runtime=runtime, namespace=namespace, auth=not no_auth,
              allowed_hosts=tuple(allowed_host or ()), cors_origins=tuple(cors_origin or ()),
              tls_cert=str(tls_cert) if tls_cert else None, tls_key=str(tls_key) if tls_key else None,
              stop_runs_on_exit=stop_runs_on_exit, leader_elect=leader_elect,
              trusted_proxies=tuple(trusted_proxy or ()), worker_isolation=worker_isolation,
              quota_defaults=Quotas(max_jobs=max_jobs_per_project,
                                    max_active_workers=max_active_workers_per_project),
              log_level=log_level.lower(), access_log=access_log)
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
    bootstrap, a Secret with a new Ray token for the Run (Ray >= 2.52 then takes only its own
    Pods), the head's headless Service, a NetworkPolicy (only the Run's own Pods reach
    them), PVCs for objectStorage mounts with a StorageClass, and one Pod per Worker
    (<job>-<role>-<index>, RLINF_NODE_RANK and the other variables set explicitly; non-root,
    no capabilities). The Kubernetes Pod policy of this machine's settings applies
    (RLARK_K8S_HOST_PATH_PREFIXES, RLARK_K8S_SERVICE_ACCOUNTS, RLARK_K8S_ALLOW_ROOT,
    RLARK_K8S_CSI_DRIVERS, RLARK_K8S_STORAGE_CLASSES, RLARK_K8S_TOLERATIONS). Nothing is started; `kubectl apply -f -` of the output runs the Job without the
    RLark server (which adds status, logs, records and stop).

    \b
    Examples:
      rlark render job.yaml --namespace rl | kubectl apply -f -
      kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -n rl -l rlark.io/run=<id>   # clean up
    """
    import secrets
    import uuid

    from rlark.findings import Severity, has_errors
    from rlark.runtimes.kubernetes import render as k8s

    from rlark.runtimes import RENDERS

    if runtime not in RENDERS:
        _fail(f"--runtime {runtime!r}: only {' and '.join(RENDERS)} has objects to render")
    job, findings = _read_job_file(file)
    if job is not None:
        from rlark.runtimes.kubernetes.preflight import check_spec_for_kubernetes

        try:
            from rlark.runtimes.kubernetes.settings import pod_policy

            policy = pod_policy()
        except ValueError as exc:
            _fail(str(exc))
        findings = findings + check_spec_for_kubernetes(job, policy)
    if job is None or has_errors(findings):
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was rendered")
    _print_findings([f for f in findings if f.severity != Severity.error])
    rid = run_id or uuid.uuid4().hex[:12]
    try:
        k8s.check_run_id(rid)
        # a Ray token of its own, as the server gives each Run: only its Pods join its cluster
        objs = k8s.render_run(job, rid, k8s.RenderOptions(
            namespace=namespace, ray_dashboard=ray_dashboard, run_as_user=policy.run_as_user,
            allow_root=policy.allow_root, policy=policy), ray_token=secrets.token_urlsafe(32))
    except ValueError as exc:
        _fail(str(exc))
    header = (f"RLark Job {job.name}, run {rid}: {job.total_workers} Workers in namespace {namespace}\n"
              f"apply:  kubectl apply -f <this file>\n"
              f"remove: kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -n "
              f"{namespace} -l {k8s.LABEL_RUN}={rid}")
    sys.stdout.write(k8s.dump_stream(objs, header))


# --- API commands -------------------------------------------------------------------------------


@app.command()
def nodes(
    output: str = _output_option(),
    show_labels: bool = typer.Option(False, "--show-labels",
                                     help="Add a LABELS column (key=value, as kubectl shows them)."),
    server: Optional[str] = ServerOpt,
) -> None:
    """List the nodes the server's runtime places Workers on (also `rlark get nodes`):
    NAME, STATUS (Ready/NotReady, Cordoned), CPU, MEMORY and GPU (GPUs) as free/allocatable,
    DEVICES (other devices: example.com/fpga...), TAINTS and, with --show-labels, LABELS. Kubernetes: the cluster's nodes; local: this
    machine, where free is what active Jobs' Workers leave."""
    output = _output(output)
    data = _call(_client(server).get, "/api/v1/nodes")
    if output != "text":
        _emit(data, output)
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
    for n in data["items"]:
        iso = n.get("isolation")
        if iso:
            detail = "; ".join(f"{k}: {v}" for k, v in (iso.get("probes") or {}).items())
            style = "" if iso.get("strong") else "yellow"
            out.print(Text(f"Worker isolation on {n['name']}: {iso.get('mode')}"
                           + (f" under {iso['cgroupParent']}" if iso.get("cgroupParent") else "")
                           + ("" if iso.get("strong") else " (WEAK: a process that calls setsid() "
                              "can outlive its Worker)")
                           + (f" [{detail}]" if detail else ""), style=style))
            who = iso.get("identity") or {}
            if who.get("mode") == "uid":
                out.print(Text(f"Worker identity: a uid of each Run's own ({who.get('uids')}), "
                               "a mount namespace that hides this server's files"))
            elif who:
                out.print(Text(f"Worker identity: this server's own user ({who.get('why')}); a "
                               "run script can read the server's files", style="yellow"))


get_app.command("nodes")(nodes)
get_app.command("node", hidden=True)(nodes)


def _send_job(file: Path, verb: str) -> tuple[bytes, str]:
    """A Job file as the API body (relative paths resolved against the file's directory) and
    its metadata.name; exits, printing its Finding, when it is not YAML/JSON at all (every
    other problem is the server's to report, so the Findings are submit's own)."""
    data, findings = _load_job_file(file)
    body = _document_body(data) if data is not None else None
    if data is None or body is None:
        if data is not None:
            from rlark.preflight import check_document

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


@app.command()
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


@app.command()
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


def _project_flag(client: Client) -> str:
    """`` -p NAME`` for the hints a command prints, when it acts outside ``default``."""
    return f" -p {client.project}" if client.project and client.project != "default" else ""


def output_language(environ: "dict[str, str] | None" = None) -> str:
    """The language ``describe``, ``get`` and ``events`` write in: ``RLARK_LANG``, else the
    POSIX locale (``LC_ALL``, then ``LC_MESSAGES``, then ``LANG``, the first one set, as
    setlocale(3) reads them); ``zh...`` (``zh_CN.UTF-8``, ``zh-CN``) is Simplified Chinese
    (``zh-CN``), anything else English (``en``)."""
    env = os.environ if environ is None else environ
    for name in ("RLARK_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = (env.get(name) or "").strip()
        if value:
            return "zh-CN" if value.lower().startswith("zh") else "en"
    return "en"


def _labels():
    """The console's catalogs in :func:`output_language` (rlark.console.i18n: labels, phases,
    reasons, and every server text through rlark.console.messages)."""
    from rlark.console.i18n import Translator

    return Translator(output_language())


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
get_app.command("jobs")(get_jobs)
get_app.command("job", hidden=True)(get_jobs)


def describe_job(
    name: Optional[str] = typer.Argument(None, metavar="NAME",
                                         help="Job name (none: every Job of the project)."),
    output: str = _output_option(),
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
    """
    output = _output(output)
    client = _job_client(server, project)
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


describe_app.command("job")(describe_job)
describe_app.command("jobs", hidden=True)(describe_job)


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


@app.command()
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


@app.command()
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


@app.command()
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
    from rlark.record_diff import SPEC_SECTIONS, display

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


from rlark import cli_access, cli_secrets  # noqa: E402  (their commands use the helpers above)

cli_access.register(app, sys.modules[__name__])
cli_secrets.register(app, sys.modules[__name__])


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
