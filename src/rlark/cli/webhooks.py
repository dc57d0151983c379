"""``rlark webhook``: a project's webhooks and their delivery logs (``/api/v1/webhooks``; project
admins). The signing secret goes to the server and never comes back: it is read from standard
input (a hidden prompt on a terminal), so it never sits in shell history, and every view says
``set`` or ``unset``."""

from __future__ import annotations

import sys
from typing import NoReturn, Optional

import typer
from rich.text import Text

from rlark.cli import access, base

webhook_app = typer.Typer(
    help="Webhooks of a project: RLark POSTs Run events (running, succeeded, failed, stopped, "
         "queued too long) to a URL, RLark's JSON or a Slack message, signed with a secret.",
    no_args_is_help=True)

OutputOpt = base.OutputOpt
ProjectOpt = base.project_option("the webhooks")
ServerOpt = base.ServerOpt
EVENTS = ("run.running", "run.succeeded", "run.failed", "run.stopped", "run.queued")


def _fail(message: str) -> NoReturn:
    base._fail(message)
    raise AssertionError("unreachable: _fail exits")


def _read_secret() -> str:
    """The secret from standard input: a hidden prompt on a terminal, else all of standard input
    with one trailing line break removed."""
    if sys.stdin.isatty():
        return typer.prompt("webhook secret", hide_input=True)
    text = sys.stdin.read()
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def _show(hooks: list[dict]) -> None:
    rows = [(h["name"], h["url"], ",".join(e.removeprefix("run.") for e in h["events"]),
             h["format"], h["secret"],
             f"{h['deliveries']['succeeded']}/{h['deliveries']['failed']}/"
             f"{h['deliveries']['pending']}") for h in hooks]
    access._print(access._table(("NAME", "URL", "EVENTS", "FORMAT", "SECRET",
                                 "OK/FAILED/PENDING"), rows))


@webhook_app.command("create")
def webhook_create(
    name: str = typer.Argument(..., metavar="NAME", help="Webhook name (a DNS label)."),
    url: str = typer.Option(..., "--url", help="The receiver's http(s) URL."),
    event: Optional[list[str]] = typer.Option(
        None, "--event", "-e", metavar="EVENT",
        help=f"An event to send (repeatable; default all): {', '.join(EVENTS)}."),
    format: str = typer.Option("rlark", "--format", help="rlark (RLark's JSON) or slack "
                                                         "(a Slack incoming webhook)."),
    secret_stdin: bool = typer.Option(
        False, "--secret-stdin", help="Read a signing secret (16-256 characters) from standard "
                                      "input (a hidden prompt on a terminal)."),
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Register a webhook (project admins). With a secret, every request carries
    X-RLark-Timestamp and X-RLark-Signature: sha256=HMAC-SHA256(secret, "<timestamp>.<body>")
    (docs/notifications.md says how to verify it).

    \b
    Examples:
      openssl rand -hex 32 | tee hook.key | rlark webhook create ci --url https://ci.example.com/rlark --secret-stdin
      rlark webhook create alerts --url https://hooks.slack.com/services/T0/B0/XXXX --format slack -e run.failed -e run.queued
    """
    output = access._check_output(output)
    body: dict = {"name": name, "url": url, "format": format}
    if event:
        body["events"] = list(event)
    if secret_stdin:
        body["secret"] = _read_secret()
    view = base._call(base._job_client(server, project).send_json, "POST", "/api/v1/webhooks",
                      body)
    if output != "text":
        access._emit(view, output)
        return
    base.out.print(Text(f"webhook {view['name']} ({view['project']}) created: "
                        f"{', '.join(view['events'])} to {view['url']} as {view['format']}, "
                        f"secret {view['secret']}"))


@webhook_app.command("list")
def webhook_list(
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List the project's webhooks: URL, events, format, whether signed, deliveries so far.

    \b
    Examples:
      rlark webhook list
      rlark webhook list -p vision -o json
    """
    output = access._check_output(output)
    items = base._call(base._job_client(server, project).get, "/api/v1/webhooks")
    if output != "text":
        access._emit(items, output)
        return
    if not items:
        base.out.print("no webhooks; make one with `rlark webhook create NAME --url URL`")
        return
    _show(items)


@webhook_app.command("delete")
def webhook_delete(
    name: str = typer.Argument(..., metavar="NAME", help="Webhook name."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Delete a webhook and its delivery log (project admins).

    \b
    Example:
      rlark webhook delete alerts
    """
    base._call(base._job_client(server, project).delete, f"/api/v1/webhooks/{name}")
    base.out.print(f"deleted webhook {name}")


@webhook_app.command("deliveries")
def webhook_deliveries(
    name: str = typer.Argument(..., metavar="NAME", help="Webhook name."),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="At most this many, newest first."),
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """A webhook's delivery log, newest first: event, Job and Run, state, attempts, the last
    status code and error.

    \b
    Examples:
      rlark webhook deliveries alerts
      rlark webhook deliveries alerts --limit 5 -o yaml
    """
    output = access._check_output(output)
    items = base._call(base._job_client(server, project).get,
                       f"/api/v1/webhooks/{name}/deliveries", limit=limit)
    if output != "text":
        access._emit(items, output)
        return
    if not items:
        base.out.print(f"no deliveries for webhook {name} yet")
        return
    rows = [(d["id"], d["event"], f"{d['job']}:{d['run']}", d["state"], d["attempts"],
             d["lastStatus"] if d["lastStatus"] is not None else "-",
             access._time(d["lastAttemptAt"]), d["lastError"] or "-") for d in items]
    access._print(access._table(("ID", "EVENT", "RUN", "STATE", "ATTEMPTS", "STATUS", "LAST TRY",
                                 "ERROR"), rows))
