"""``rlark user`` and ``rlark token``: users, their site-administrator status, and API tokens
(helpers shared with the other access commands in :mod:`rlark.cli.access`)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.text import Text

from rlark.cli.access import (MAX_TOKEN_DAYS, OutputOpt, Role, ServerOpt, _call, _check_output,
                              _client, _emit, _fail, _note, _print, _roles, _show_token,
                              _stdin_line, _table, _time)

user_app = typer.Typer(help="Users and their site-administrator status (site administrators).",
                       no_args_is_help=True)
token_app = typer.Typer(help="API tokens: yours (site administrators: anyone's).",
                        no_args_is_help=True)


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
