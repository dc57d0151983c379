"""Who may do what, from the ``rlark`` command: ``login``, ``logout``, ``whoami``, ``audit``
and the ``user``, ``token`` and ``project`` groups. Like the rest of the CLI they parse, call
the REST API (``/api/v1/me``, ``/login``, ``/users``, ``/tokens``, ``/projects``, ``/audit``)
and render; the server decides who may do what.

An API token is printed only right after it is made (``user create --token``, ``token
create``, never again); everything else shows its prefix (``rlark_AbCdEf...``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from enum import Enum
from types import ModuleType
from typing import Any, Callable, NoReturn, Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark import credentials, settings
from rlark.client import Client, ClientError, resolve_project, resolve_server, token_source

#: the ``rlark.cli`` module (its consoles and error helpers), set by :func:`register`
_base: ModuleType

#: as the server stores it (``rlark.services.auth.SHOWN_PREFIX``): enough to tell tokens apart
SHOWN_PREFIX = 12
LOGIN_DAYS = 30
MAX_TOKEN_DAYS = 3650

user_app = typer.Typer(help="Users and their site-administrator status (site administrators).",
                       no_args_is_help=True)
token_app = typer.Typer(help="API tokens: yours (site administrators: anyone's).",
                        no_args_is_help=True)
project_app = typer.Typer(help="Projects, their members and roles; the current project.",
                          no_args_is_help=True)

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


def register(app: typer.Typer, base: ModuleType) -> None:
    """Add this module's commands to ``app``; ``base`` is the ``rlark.cli`` module."""
    global _base
    _base = base
    app.command("login")(login)
    app.command("logout")(logout)
    app.command("whoami")(whoami)
    app.command("audit")(audit)
    app.add_typer(user_app, name="user")
    app.add_typer(token_app, name="token")
    app.add_typer(project_app, name="project")


# --- helpers ----------------------------------------------------------------------------------------


def _fail(message: str) -> NoReturn:
    _base._fail(message)
    raise AssertionError("unreachable: _fail exits")


def _call(fn: Callable, *args, **kw) -> Any:
    return _base._call(fn, *args, **kw)


def _print(*args, **kw) -> None:
    _base.out.print(*args, **kw)


def _note(message: str) -> None:
    _base.err.print(Text(message, style="dim"))


def _client(server: Optional[str], **kw) -> Client:
    """Exits with the message when the credentials file cannot be used."""
    try:
        return Client(server, **kw)
    except ClientError as exc:
        _fail(exc.message)


def _check_output(output: str) -> str:
    """``-o/--output`` as rlark.cli reads it everywhere (exits naming the choices)."""
    return _base._output(output)


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


# --- users ---------------------------------------------------------------------------------------------


def _user_rows(users: list[dict]) -> list[tuple]:
    return [(u["name"], "yes" if u["admin"] else "no", "yes" if u["disabled"] else "no",
             "yes" if u["hasPassword"] else "no", _roles(u["projects"]), _time(u["createdAt"]),
             u.get("createdBy")) for u in users]


USER_COLUMNS = ("NAME", "ADMIN", "DISABLED", "PASSWORD", "PROJECTS", "CREATED", "CREATED BY")


@user_app.command("create")
def user_create(
    name: str = typer.Argument(..., metavar="NAME", help="User name (lower-case letters, digits, . _ -)."),
    admin: bool = typer.Option(False, "--admin", help="Make them a site administrator."),
    project: Optional[str] = typer.Option(None, "--project", "-p", help="Give them a role in this project."),
    role: Optional[Role] = typer.Option(None, "--role", "-r",
                                        help="Their role in --project (default member)."),
    token: bool = typer.Option(False, "--token", help="Also make their first API token (printed once)."),
    password_stdin: bool = typer.Option(False, "--password-stdin",
                                        help="Set their password, read from standard input."),
    output: str = typer.Option("text", "--output", "-o", help="text or json (json includes the token)"),
    server: Optional[str] = ServerOpt,
) -> None:
    """Create a user (site administrators). They log in with the token printed here (--token),
    or with their password (`rlark login --user NAME`).

    \b
    Examples:
      rlark user create alice --project default --role member --token
      printf '%s\\n' "$PASSWORD" | rlark user create bob -p vision -r viewer --password-stdin
    """
    if output not in ("text", "json"):
        _fail(f"--output {output!r} is not supported; use text or json")
    if role is not None and project is None:
        _fail("--role needs --project: the role is in a project")
    body: dict[str, Any] = {"name": name, "admin": admin}
    if project is not None:
        body.update(project=project, role=(role or Role.member).value)
    if password_stdin:
        body["password"] = _stdin_line("password")
    if token:
        body["tokenName"] = "first"
    client = _client(server)
    created = _call(client.send_json, "POST", "/api/v1/users", body)
    if output == "json":
        _emit(created, "json")
        return
    what = "site administrator" if created["admin"] else "user"
    _print(Text(f"{what} {name} created; projects: {_roles(created['projects'])}"))
    if "token" in created:
        _show_token({**created, "user": name}, client.base)
    elif not password_stdin:
        _note(f"{name} cannot log in yet: make a token (`rlark token create --user {name}`) or set "
              f"a password (`rlark user passwd {name}`)")


@user_app.command("list")
def user_list(output: str = OutputOpt, server: Optional[str] = ServerOpt) -> None:
    """List users (site administrators): admin, disabled, password set, role per project.

    \b
    Example:
      rlark user list -o json
    """
    output = _check_output(output)
    users = _call(_client(server).get, "/api/v1/users")
    if output != "text":
        _emit(users, output)
        return
    _print(_table(USER_COLUMNS, _user_rows(users)))


@user_app.command("get")
def user_get(name: str = typer.Argument(..., metavar="NAME", help="User name."),
             output: str = OutputOpt, server: Optional[str] = ServerOpt) -> None:
    """One user (yourself, or anyone for site administrators).

    \b
    Example:
      rlark user get alice
    """
    output = _check_output(output)
    user = _call(_client(server).get, f"/api/v1/users/{name}")
    if output != "text":
        _emit(user, output)
        return
    _print(_table(USER_COLUMNS, _user_rows([user])))


def _patch_user(server: Optional[str], name: str, body: dict) -> dict:
    return _call(_client(server).send_json, "PATCH", f"/api/v1/users/{name}", body)


@user_app.command("disable")
def user_disable(name: str = typer.Argument(..., metavar="NAME", help="User name."),
                 server: Optional[str] = ServerOpt) -> None:
    """Disable a user: their tokens stop working and their console sessions end (site
    administrators). `rlark user enable NAME` undoes it.

    \b
    Example:
      rlark user disable alice
    """
    _patch_user(server, name, {"disabled": True})
    _print(Text(f"user {name} disabled"))


@user_app.command("enable")
def user_enable(name: str = typer.Argument(..., metavar="NAME", help="User name."),
                server: Optional[str] = ServerOpt) -> None:
    """Enable a disabled user again (site administrators).

    \b
    Example:
      rlark user enable alice
    """
    _patch_user(server, name, {"disabled": False})
    _print(Text(f"user {name} enabled"))


@user_app.command("set-admin")
def user_set_admin(name: str = typer.Argument(..., metavar="NAME", help="User name."),
                   admin: bool = typer.Option(True, "--admin/--no-admin",
                                              help="Make (or with --no-admin, unmake) a site administrator."),
                   server: Optional[str] = ServerOpt) -> None:
    """Make a user a site administrator, or with --no-admin no longer one (site
    administrators; the last enabled one stays).

    \b
    Examples:
      rlark user set-admin alice
      rlark user set-admin alice --no-admin
    """
    _patch_user(server, name, {"admin": admin})
    _print(Text(f"user {name} is {'now' if admin else 'no longer'} a site administrator"))


@user_app.command("passwd")
def user_passwd(name: Optional[str] = typer.Argument(None, metavar="[NAME]",
                                                     help="User name (default: you)."),
                password_stdin: bool = typer.Option(
                    False, "--password-stdin",
                    help="Read the passwords from standard input: the new one; for your own, "
                         "the current one on the line before it."),
                server: Optional[str] = ServerOpt) -> None:
    """Set a password, for `rlark login --user` and the console: your own (asks for the current
    one first; a wrong one counts as a failed login), or anyone's as a site administrator
    (without theirs; a site administrator also sets a user's first password). Asks hidden,
    the new one twice.

    \b
    Examples:
      rlark user passwd
      rlark user passwd alice
      printf '%s\\n%s\\n' "$OLD" "$NEW" | rlark user passwd --password-stdin
    """
    client = _client(server)
    me = _call(client.get, "/api/v1/me")["name"]
    name = name or me
    body: dict[str, str] = {}
    if name == me and _call(client.get, f"/api/v1/users/{name}").get("hasPassword"):
        body["currentPassword"] = (_stdin_line("current password") if password_stdin else
                                   typer.prompt(f"Current password of {name}", hide_input=True))
    body["password"] = (_stdin_line("password") if password_stdin else
                        typer.prompt(f"New password for {name}", hide_input=True,
                                     confirmation_prompt=True))
    _call(client.send_json, "PATCH", f"/api/v1/users/{name}", body)
    _print(Text(f"password of {name} set"))


@user_app.command("delete")
def user_delete(name: str = typer.Argument(..., metavar="NAME", help="User name."),
                server: Optional[str] = ServerOpt) -> None:
    """Delete a user with their tokens and roles (site administrators; the audit log keeps
    their name).

    \b
    Example:
      rlark user delete alice
    """
    _call(_client(server).delete, f"/api/v1/users/{name}")
    _print(Text(f"user {name} deleted"))


# --- tokens --------------------------------------------------------------------------------------------


@token_app.command("create")
def token_create(
    name: str = typer.Option("cli", "--name", "-n", help="What the token is for (shown in lists)."),
    expires_in: Optional[int] = typer.Option(None, "--expires-in", min=1, max=MAX_TOKEN_DAYS,
                                             metavar="DAYS", help="Expire after DAYS days (default: never)."),
    user: Optional[str] = typer.Option(None, "--user", "-u",
                                       help="Make it for this user (site administrators)."),
    output: str = typer.Option("text", "--output", "-o", help="text or json (json includes the token)"),
    server: Optional[str] = ServerOpt,
) -> None:
    """Make an API token; it is printed once, here, and never shown again.

    \b
    Examples:
      rlark token create --name ci --expires-in 90
      rlark token create --user alice -o json | jq -r .token
    """
    if output not in ("text", "json"):
        _fail(f"--output {output!r} is not supported; use text or json")
    body: dict[str, Any] = {"name": name, "expiresInDays": expires_in}
    if user:
        body["user"] = user
    client = _client(server)
    created = _call(client.send_json, "POST", "/api/v1/tokens", body)
    if output == "json":
        _emit(created, "json")
        return
    _print(Text(f"token {created['id']} ({created['name']}) of {created['user']} created; expires "
                f"{_time(created['expiresAt']) if created.get('expiresAt') else 'never'}"))
    _show_token(created, client.base)


@token_app.command("list")
def token_list(
    user: Optional[str] = typer.Option(None, "--user", "-u", help="This user's (site administrators)."),
    all_users: bool = typer.Option(False, "--all", help="Everyone's (site administrators)."),
    output: str = OutputOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List API tokens (yours; with --user or --all, others'): prefix, state, times; never the
    tokens themselves.

    \b
    Examples:
      rlark token list
      rlark token list --all
    """
    output = _check_output(output)
    if user and all_users:
        _fail("give --user or --all, not both")
    tokens = _call(_client(server).get, "/api/v1/tokens", user=user,
                   all="true" if all_users else None)
    if output != "text":
        _emit(tokens, output)
        return
    if not tokens:
        _print("no tokens; make one with `rlark token create`")
        return
    _print(_table(("ID", "NAME", "USER", "PREFIX", "STATE", "CREATED", "EXPIRES", "LAST USED"),
                  [(t["id"], t["name"], t["user"], t["prefix"], t["state"], _time(t["createdAt"]),
                    _time(t["expiresAt"]) if t["expiresAt"] else "never", _time(t["lastUsedAt"]))
                   for t in tokens]))


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., metavar="ID", min=1,
                                                help="Token id (`rlark token list`)."),
                 server: Optional[str] = ServerOpt) -> None:
    """Revoke an API token (yours; anyone's for site administrators): it stops working at once.

    \b
    Example:
      rlark token revoke 7
    """
    tok = _call(_client(server).delete, f"/api/v1/tokens/{token_id}")
    _print(Text(f"token {tok['id']} ({tok['name']} of {tok['user']}, {tok['prefix']}) revoked"))


# --- projects --------------------------------------------------------------------------------------------


@project_app.command("create")
def project_create(name: str = typer.Argument(..., metavar="NAME", help="Project name (a DNS label)."),
                   namespace: Optional[str] = typer.Option(
                       None, "--namespace", "-n",
                       help="Kubernetes namespace of its Pods (default: <server namespace>-NAME; never "
                            "the server's own namespace, which holds RLark's Secrets)."),
                   server: Optional[str] = ServerOpt) -> None:
    """Create a project (site administrators). Then give people roles in it with
    `rlark project add-member`.

    \b
    Examples:
      rlark project create vision
      rlark project create robots --namespace rl-robots
    """
    body: dict[str, Any] = {"name": name}
    if namespace:
        body["namespace"] = namespace
    p = _call(_client(server).send_json, "POST", "/api/v1/projects", body)
    _print(Text(f"project {p['name']} created" + (f" (namespace {p['namespace']})" if p.get("namespace") else "")))


@project_app.command("list")
def project_list(output: str = OutputOpt, server: Optional[str] = ServerOpt) -> None:
    """List the projects you have a role in (site administrators: all), with your role, the
    Kubernetes namespace and the number of Jobs.

    \b
    Example:
      rlark project list
    """
    output = _check_output(output)
    client = _client(server)
    projects = _call(client.get, "/api/v1/projects")
    if output != "text":
        _emit(projects, output)
        return
    if not projects:
        _print("you have a role in no project; ask a project admin (`rlark project add-member`)")
        return
    _print(_table(("NAME", "ROLE", "NAMESPACE", "JOBS"),
                  [(p["name"], p["role"], p.get("namespace"), p["jobs"]) for p in projects]))
    try:
        _note(f"current project: {resolve_project(client.base)}")
    except ClientError as exc:
        _fail(exc.message)


@project_app.command("get")
def project_get(name: str = typer.Argument(..., metavar="NAME", help="Project name."),
                output: str = OutputOpt, server: Optional[str] = ServerOpt) -> None:
    """A project and its members with their roles.

    \b
    Example:
      rlark project get vision
    """
    output = _check_output(output)
    p = _call(_client(server).get, f"/api/v1/projects/{name}")
    if output != "text":
        _emit(p, output)
        return
    _print(Text(f"Name:       {p['name']}", style="bold"))
    _print(Text(f"Namespace:  {p.get('namespace') or '-'}"))
    _print(Text(f"Your role:  {p['role']}"))
    _print(Text(f"Jobs:       {p['jobs']}"))
    if p.get("quotas"):
        use, own = p.get("usage", {}), p.get("quotasSet", {})
        _print(Text(f"Quotas:     Jobs {use.get('jobs', '-')}/{p['quotas']['maxJobs']}, "
                    f"active Workers {use.get('activeWorkers', '-')}/{p['quotas']['maxActiveWorkers']}"
                    + (" (own: " + ", ".join(f"{k}={v}" for k, v in own.items()) + ")" if own else
                       " (server defaults)")))
    _print(Text(f"Created:    {_time(p['createdAt'])} by {p.get('createdBy') or '-'}"))
    _print(_table(("USER", "ROLE"), [(m["user"], m["role"]) for m in p.get("members", [])]))


@project_app.command("set-quota")
def project_set_quota(
        name: str = typer.Argument(..., metavar="NAME", help="Project name."),
        max_jobs: Optional[int] = typer.Option(
            None, "--max-jobs", min=0, max=1_000_000,
            help="Jobs the project may keep (0: the server's default)."),
        max_active_workers: Optional[int] = typer.Option(
            None, "--max-active-workers", min=0, max=1_000_000,
            help="Workers its active Runs may hold at once (0: the server's default)."),
        server: Optional[str] = ServerOpt) -> None:
    """Set a project's own quotas (site administrators). A submit, apply, start or restart that
    would pass one is refused (HTTP 403 QuotaExceeded); lowering a quota stops nothing. The
    server's defaults: `rlark server --max-jobs-per-project / --max-active-workers-per-project`.

    \b
    Examples:
      rlark project set-quota vision --max-active-workers 32
      rlark project set-quota vision --max-jobs 0      # back to the server's default
    """
    body: dict[str, Any] = {}
    if max_jobs is not None:
        body["maxJobs"] = max_jobs or None
    if max_active_workers is not None:
        body["maxActiveWorkers"] = max_active_workers or None
    if not body:
        _fail("give --max-jobs and/or --max-active-workers")
    p = _call(_client(server).send_json, "PUT", f"/api/v1/projects/{name}/quotas", body)
    q, own = p["quotas"], p.get("quotasSet", {})
    _print(Text(f"project {p['name']}: " + ", ".join(
        f"{k} {q[k]}{'' if k in own else ' (server default)'}" for k in q)))


@project_app.command("delete")
def project_delete(name: str = typer.Argument(..., metavar="NAME", help="Project name."),
                   server: Optional[str] = ServerOpt) -> None:
    """Delete a project that has no Jobs (site administrators; never `default`).

    \b
    Example:
      rlark project delete vision
    """
    _call(_client(server).delete, f"/api/v1/projects/{name}")
    _print(Text(f"project {name} deleted"))


@project_app.command("add-member")
def project_add_member(project: str = typer.Argument(..., metavar="PROJECT", help="Project name."),
                       user: str = typer.Argument(..., metavar="USER", help="User name."),
                       role: Role = typer.Option(..., "--role", "-r",
                                                 help="viewer (read), member (run Jobs) or admin (manage members)."),
                       server: Optional[str] = ServerOpt) -> None:
    """Give a user a role in a project, or change it (project admins, site administrators).

    \b
    Examples:
      rlark project add-member vision alice --role member
      rlark project add-member vision bob --role viewer
    """
    _call(_client(server).send_json, "PUT", f"/api/v1/projects/{project}/members/{user}",
          {"role": role.value})
    _print(Text(f"{user} is {role.value} in project {project}"))


@project_app.command("remove-member")
def project_remove_member(project: str = typer.Argument(..., metavar="PROJECT", help="Project name."),
                          user: str = typer.Argument(..., metavar="USER", help="User name."),
                          server: Optional[str] = ServerOpt) -> None:
    """Take a user's role in a project away (project admins, site administrators).

    \b
    Example:
      rlark project remove-member vision bob
    """
    _call(_client(server).delete, f"/api/v1/projects/{project}/members/{user}")
    _print(Text(f"{user} has no role in project {project} any more"))


@project_app.command("use")
def project_use(name: str = typer.Argument(..., metavar="NAME", help="Project name."),
                server: Optional[str] = ServerOpt) -> None:
    """Make NAME the current project for this server: Job commands (submit, get jobs,
    describe, logs, stop...) act in it unless given --project or RLARK_PROJECT. Kept in
    $RLARK_HOME/credentials.

    \b
    Example:
      rlark project use vision && rlark get jobs
    """
    client = _client(server)
    _call(client.get, f"/api/v1/projects/{name}")  # one you can see, or the server's 404
    try:
        credentials.set_project(client.base, name)
    except credentials.CredentialsError as exc:
        _fail(str(exc))
    _print(Text(f"current project on {client.base}: {name}"))


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
