"""What every ``rlark`` command shares: the Typer application and its ``get`` and ``describe``
groups, the consoles (``out``, ``err``), the ``--server``/``--project``/``-o`` options, failing
with one ``error:`` line, printing Findings, the API client for a command, and the language
``describe``, ``get`` and ``events`` write in.

Commands parse, call the REST API (or a local function for validate/schema), and render; the
logic lives in the services. :mod:`rlark.cli.commands` adds every command to :data:`app`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.text import Text

from rlark import settings
from rlark.cli.client import Client, ClientError, resolve_project, resolve_server
from rlark.names import DNS1123_LABEL
from rlark.status import Phase, WorkerPhase

# The Job model (pydantic), its checks and PyYAML are imported where a command needs them, not
# here: most commands only call the API and print, and each `rlark` call would otherwise pay
# for importing them (about a third of its start-up time).
if TYPE_CHECKING:
    from rlark.findings import Finding


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



def _console(stderr: bool = False) -> Console:
    # Off a terminal (CI logs, pipes) Rich would wrap tables at 80 columns and cut names and Ray
    # node ids; give it room instead, unless COLUMNS says otherwise.
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    width = None if tty or os.environ.get("COLUMNS") else 200
    return Console(stderr=stderr, width=width)


out = _console()
err = _console(stderr=True)

ServerOpt = typer.Option(None, "--server", "-s", envvar="RLARK_SERVER",
                         help=f"RLark server URL (default: the one `rlark login` stored, else "
                              f"{settings.DEFAULT_SERVER}).")


def project_option(what: str) -> Any:
    """``--project/-p`` (``$RLARK_PROJECT``) for a command about ``what`` (``the Job``, ``the
    secrets``...), defaulting as every command does."""
    return typer.Option(None, "--project", "-p", envvar="RLARK_PROJECT",
                        help=f"Project of {what} (default: the one `rlark project use` chose "
                             "for this server, else default).")


ProjectOpt = project_option("the Job")
#: ``-o`` of the commands that list or show one kind of thing
OutputOpt = typer.Option("text", "--output", "-o", metavar="FORMAT", help="text, json or yaml")
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


#: every read command's -o/--output: the same three forms ("table" and "md" are older names of
#: text, still accepted)
OUTPUT_FORMATS = ("text", "json", "yaml")
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


def _emit(data: Any, format: str) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if format == "json" else dump_yaml(data))


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


def _check_name(name: str) -> None:
    """Refuse what cannot be a Job name before asking the server (a '/' would be a route)."""
    if not DNS1123_LABEL.match(name):
        _fail(f"{name!r} is not a Job name: Job names are lower-case letters, digits and '-' "
              "(`rlark get jobs` lists them)")
