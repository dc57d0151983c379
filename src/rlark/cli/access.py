"""Who may do what, from the ``rlark`` command: ``login``, ``logout``, ``whoami`` and ``audit``
here, the ``user`` and ``token`` groups in :mod:`rlark.cli.users`, ``project`` in
:mod:`rlark.cli.projects`, with the helpers they share below. Like the rest of the CLI they
parse, call the REST API (``/api/v1/me``, ``/login``, ``/users``, ``/tokens``, ``/projects``,
``/audit``) and render; the server decides who may do what.

An API token is printed only right after it is made (``user create --token``, ``token
create``, never again); everything else shows its prefix (``rlark_AbCdEf...``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from enum import Enum
from typing import Any, Callable, NoReturn, Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark import settings
from rlark.cli import base, credentials
from rlark.cli.client import Client, ClientError, resolve_project, resolve_server, token_source

#: as the server stores it (``rlark.services.auth.SHOWN_PREFIX``): enough to tell tokens apart
SHOWN_PREFIX = 12
LOGIN_DAYS = 30
MAX_TOKEN_DAYS = 3650

ServerOpt = typer.Option(None, "--server", "-s", envvar="RLARK_SERVER",
                         help=f"RLark server URL (default: the one `rlark login` stored, else "
                              f"{settings.DEFAULT_SERVER}).")
#: every read command's -o/--output, as rlark.cli's (text, json or yaml; "table" = text)
OutputOpt = typer.Option("text", "--output", "-o", "--format", metavar="FORMAT",
                         help="text, json or yaml")


class Role(str, Enum):
    """A role in a project (as ``rlark.store.ProjectRole``; the CLI does not load the store)."""

    viewer = "viewer"
    member = "member"
    admin = "admin"



# --- helpers ----------------------------------------------------------------------------------------


def _fail(message: str) -> NoReturn:
    base._fail(message)
    raise AssertionError("unreachable: _fail exits")


def _call(fn: Callable, *args, **kw) -> Any:
    return base._call(fn, *args, **kw)


def _print(*args, **kw) -> None:
    base.out.print(*args, **kw)


def _note(message: str) -> None:
    base.err.print(Text(message, style="dim"))


def _client(server: Optional[str], **kw) -> Client:
    """Exits with the message when the credentials file cannot be used."""
    try:
        return Client(server, **kw)
    except ClientError as exc:
        _fail(exc.message)


def _check_output(output: str) -> str:
    """``-o/--output`` as rlark.cli reads it everywhere (exits naming the choices)."""
    return base._output(output)


def _emit(data: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    from rlark.spec import dump_yaml  # the Job model's module: imported only for YAML output

    sys.stdout.write(dump_yaml(data))


def _cell(value: Any) -> Text:
    """A table cell as plain text (never Rich markup: names and details come from users)."""
    if value is None or value == "":
        return Text("-")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    return Text(str(value))


def _time(value: str | None) -> str:
    return (value or "")[:19].replace("T", " ") or "-"


def _table(columns: tuple[str, ...], rows: list[tuple]) -> Table:
    table = Table(box=None, header_style="bold")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    return table


def _roles(projects: dict[str, str]) -> str:
    return ", ".join(f"{p} ({r})" for p, r in projects.items()) or "none"


def _stdin_line(what: str) -> str:
    """The first line of standard input (without its line break).

    Exits when there is none."""
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        _fail(f"no {what} on standard input")
    return line


def _show_token(created: dict, server: str) -> None:
    """The one time a token is printed: right after it was made."""
    owner = created.get("user") or created.get("name")
    _print(Text(f"API token for {owner} (store it now; it is not shown again):", style="bold yellow"))
    sys.stdout.write(f"\n  {created['token']}\n\n")
    sys.stdout.flush()
    _print(Text(f"Use it: echo <token> | rlark login --server {server} --token-stdin "
                "(or set RLARK_TOKEN)"))


def _prefix(token: str) -> str:
    return token[:SHOWN_PREFIX] + "..."


# --- login, logout, whoami ------------------------------------------------------------------------------


def login(
    server: Optional[str] = ServerOpt,
    token_stdin: bool = typer.Option(False, "--token-stdin",
                                     help="Read the API token from standard input."),
    user: Optional[str] = typer.Option(None, "--user", "-u",
                                       help="Log in with this user's password; makes a new token."),
    password_stdin: bool = typer.Option(False, "--password-stdin",
                                        help="With --user: read the password from standard input."),
    expires_in: Optional[int] = typer.Option(
        None, "--expires-in", min=1, max=MAX_TOKEN_DAYS, metavar="DAYS",
        help=f"With --user: the new token expires after DAYS days (default {LOGIN_DAYS})."),
) -> None:
    """Log in to a server: check an API token (or trade a password for a new one) and store
    it in $RLARK_HOME/credentials (mode 0600) as the CLI's token for that server, which
    becomes the current server.

    \b
    Examples:
      rlark login --server https://rlark.example.com            # paste the token (hidden)
      echo "$TOKEN" | rlark login -s https://rlark.example.com --token-stdin
      rlark login -s https://rlark.example.com --user alice      # asks for the password
    On the server's own machine no login is needed: its first start stored the admin's token.
    """
    if token_stdin and user:
        _fail("give --token-stdin or --user, not both")
    if (password_stdin or expires_in is not None) and not user:
        _fail("--password-stdin and --expires-in go with --user NAME")
    base = resolve_server(server)
    if user:
        password = (_stdin_line("password") if password_stdin else
                    typer.prompt(f"Password for {user} at {base}", hide_input=True))
        anonymous = _client(base, anonymous=True)
        body = {"user": user, "password": password,
                "tokenName": f"rlark login on {socket.gethostname()}"[:63],
                "expiresInDays": expires_in or LOGIN_DAYS}
        try:
            token = anonymous.send_json("POST", "/api/v1/login", body)["token"]
        except ClientError as exc:
            _fail(exc.server_message)
    else:
        token = (_stdin_line("API token") if token_stdin else
                 typer.prompt(f"API token for {base}", hide_input=True)).strip()
    try:
        me = Client(base, token=token).get("/api/v1/me")
    except ClientError as exc:
        if exc.status == 401:
            _fail(f"{base} refused the token ({exc.server_message}): it is unknown, revoked or "
                  "expired. Make a new one (`rlark token create`) or log in with --user NAME")
        _fail(exc.message)
    try:
        old = credentials.entry(base) or {}
        where = credentials.put(base, token, user=me["name"], current=True)
        projects = me.get("projects") or {}
        project = old.get("project")
        if project not in projects:
            # the project chosen earlier is not (or no longer) theirs: start in one they can
            # use, `default` when they may
            project = "default" if "default" in projects else next(iter(projects), None)
            credentials.set_project(base, None if project == "default" else project)
    except credentials.CredentialsError as exc:
        _fail(str(exc))
    admin = " (site administrator)" if me.get("admin") else ""
    _print(f"Logged in to {base} as [bold]{me['name']}[/bold]{admin}; token {_prefix(token)} "
           f"stored in {where} (mode 0600).")
    _print(Text(f"Projects: {_roles(me.get('projects') or {})}"))
    _print(Text(f"Current project: {project or 'default'} (`rlark project use NAME` changes it)"))
    if os.environ.get("RLARK_TOKEN"):
        _note("note: RLARK_TOKEN is set in this shell and is used before the stored token")


def logout(
    server: Optional[str] = ServerOpt,
    revoke: bool = typer.Option(False, "--revoke",
                                help="Also revoke the token on the server first, so no copy of it works."),
) -> None:
    """Forget the stored token of a server (and with --revoke, revoke it on the server).

    \b
    Examples:
      rlark logout
      rlark logout --server https://rlark.example.com --revoke
    """
    base = resolve_server(server)
    try:
        item = credentials.entry(base) or {}
    except credentials.CredentialsError as exc:
        _fail(str(exc))
    token = item.get("token")
    if not token:
        _print(f"no token stored for {base} in {credentials.path()}; nothing to do")
        return
    if revoke:
        client = Client(base, token=token)
        try:
            me = client.get("/api/v1/me")  # the server names the token this request used
        except ClientError as exc:
            if exc.status != 401:
                _fail(exc.message)
            me = None
            _print(f"the server no longer accepts the token {_prefix(token)} ({exc.server_message}); "
                   "nothing to revoke")
        if me is not None:
            if not me.get("tokenId"):
                _fail(f"{base} did not say which token this is; nothing was revoked and the token "
                      "is still stored (`rlark token list` shows yours)")
            found = _call(client.delete, f"/api/v1/tokens/{me['tokenId']}")
            _print(f"revoked token {found['id']} ({found['name']}, {found['prefix']}) on {base}")
    try:
        credentials.remove(base)
    except credentials.CredentialsError as exc:
        _fail(str(exc))
    _print(f"Logged out of {base}: its token is no longer in {credentials.path()}")


def whoami(
    output: str = OutputOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Who the server takes you for: user, site administrator or not, your role in each
    project, the current project, and which token (its prefix only) and from where.

    \b
    Examples:
      rlark whoami
      rlark whoami -o json
    """
    output = _check_output(output)
    client = _client(server)
    me = _call(client.get, "/api/v1/me")
    try:
        project = resolve_project(client.base)
    except ClientError as exc:
        _fail(exc.message)
    info = {**me, "server": client.base, "currentProject": project,
            "tokenPrefix": _prefix(client.token) if client.token else None,
            "tokenFrom": token_source() if client.token else None}
    if output != "text":
        _emit(info, output)
        return
    admin = "site administrator" if me.get("admin") else "no"
    _print(Text(f"User:      {me['name']}", style="bold"))
    _print(Text(f"Server:    {client.base}"))
    _print(Text(f"Admin:     {admin}"))
    if me.get("via") == "open":
        _print(Text("Auth:      OFF on this server (--no-auth): every request acts as a site "
                    "administrator", style="bold red"))
    elif client.token:
        _print(Text(f"Token:     {info['tokenPrefix']} (from {info['tokenFrom']})"))
    _print(Text(f"Project:   {project} (current; `rlark project use NAME` changes it)"))
    _print(Text(f"Projects:  {_roles(me.get('projects') or {})}"))



# --- audit ----------------------------------------------------------------------------------------------


def audit(
    project: Optional[str] = typer.Option(None, "--project", "-p", help="Only this project's entries."),
    user: Optional[str] = typer.Option(None, "--user", "-u", help="Only what this user did."),
    action: Optional[str] = typer.Option(None, "--action", "-a", metavar="PREFIX",
                                         help="Only actions starting with PREFIX (job., token.revoke, login.)."),
    limit: int = typer.Option(100, "--limit", "-n", min=1, max=1000, help="At most this many entries."),
    output: str = OutputOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """The audit log, newest first: who changed what, when, from where, and refused attempts
    (site administrators: everything; project admins: their projects').

    \b
    Examples:
      rlark audit --action job.delete
      rlark audit -p vision --user alice -o json
    """
    output = _check_output(output)
    data = _call(_client(server).get, "/api/v1/audit", project=project, user=user, action=action,
                 limit=limit)
    if output != "text":
        _emit(data, output)
        return
    items = data["items"]
    if not items:
        _print("no audit entries" + (" match" if project or user or action else ""))
        return
    _print(_table(("TIME", "USER", "ACTION", "PROJECT", "TARGET", "OUTCOME", "DETAIL", "CLIENT"),
                  [(_time(a["time"]), a["actor"] or "rlark", a["action"], a["project"], a["target"],
                    a["outcome"], a["detail"], a["client"]) for a in items]))
