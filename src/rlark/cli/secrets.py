"""``rlark secret``: a project's RLark-managed secrets (``/api/v1/secrets``).

Values go to the server and never come back: ``list`` and ``get`` show names, keys (set /
unset), the Jobs that use them and who changed them last. ``set`` takes values as
``KEY=VALUE`` arguments, from files (``--from-file KEY=PATH``) or, for a ``KEY`` given alone,
from standard input (a hidden prompt on a terminal), so they need not sit in shell history.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.text import Text

from rlark.cli import access, base

secret_app = typer.Typer(
    help="Secrets of a project, for env[].valueFrom.secretKeyRef (values are never shown).",
    no_args_is_help=True)

OutputOpt = base.OutputOpt
ProjectOpt = base.project_option("the secrets")
ServerOpt = base.ServerOpt

def _fail(message: str) -> NoReturn:
    base._fail(message)
    raise AssertionError("unreachable: _fail exits")


def parse_values(pairs: list[str], files: list[str], stdin_text: Any = None) -> dict[str, str]:
    """``KEY=VALUE`` arguments, ``KEY=PATH`` files (read as UTF-8 text, kept whole) and at most
    one ``KEY`` alone, whose value ``stdin_text()`` gives, as ``{key: value}``.

    Raises:
        ValueError: a key given twice, more than one ``KEY`` alone, a file that cannot be read,
            or nothing at all. Messages name keys and files, never values.
    """
    data: dict[str, str] = {}
    alone = [p for p in pairs if "=" not in p]
    if len(alone) > 1:
        raise ValueError(f"only one KEY may take its value from standard input; got "
                         f"{', '.join(alone)}: give the others as KEY=VALUE or --from-file")

    def put(key: str, value: str) -> None:
        if not key:
            raise ValueError("a key is empty: write KEY=VALUE")
        if key in data:
            raise ValueError(f"key {key!r} is given more than once")
        data[key] = value

    for pair in pairs:
        if "=" in pair:
            key, _, value = pair.partition("=")
            put(key, value)
    for item in files:
        key, eq, path = item.partition("=")
        if not eq:
            raise ValueError(f"--from-file {item!r}: write KEY=PATH")
        try:
            put(key, Path(path).expanduser().read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"--from-file {key}: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"--from-file {key}: {path} is not UTF-8 text") from None
    if alone:
        put(alone[0], stdin_text(alone[0]) if stdin_text is not None else "")
    if not data:
        raise ValueError("give at least one KEY=VALUE, KEY (value from standard input) or "
                         "--from-file KEY=PATH")
    return data


def _read_stdin(key: str) -> str:
    """The value of ``key`` from standard input: a hidden prompt on a terminal, else all of
    standard input with one trailing line break removed."""
    if sys.stdin.isatty():
        return typer.prompt(f"value of {key}", hide_input=True)
    text = sys.stdin.read()
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def _client(server: Optional[str], project: Optional[str]):
    return base._job_client(server, project)


def _rows(secrets: list[dict]) -> list[tuple]:
    rows = []
    for sec in secrets:
        keys = sec["keys"] or [{"key": "-", "state": "unset", "usedBy": []}]
        for i, k in enumerate(keys):
            rows.append((sec["name"] if i == 0 else "", k["key"], k["state"],
                         ", ".join(k["usedBy"]) or "-",
                         access._time(sec["updatedAt"]) if i == 0 and sec["exists"] else "",
                         (sec["updatedBy"] or "-") if i == 0 and sec["exists"] else ""))
    return rows


def _show(secrets: list[dict]) -> None:
    access._print(access._table(("NAME", "KEY", "STATE", "USED BY", "UPDATED", "BY"),
                                _rows(secrets)))


@secret_app.command("set")
def secret_set(
    name: str = typer.Argument(..., metavar="NAME", help="Secret name (a DNS label)."),
    pairs: Optional[list[str]] = typer.Argument(
        None, metavar="KEY=VALUE... | KEY",
        help="Keys and values; a KEY alone reads its value from standard input."),
    from_file: Optional[list[str]] = typer.Option(
        None, "--from-file", metavar="KEY=PATH", help="Take KEY's value from a file (repeatable)."),
    replace: bool = typer.Option(False, "--replace",
                                 help="The secret keeps only the keys given (default: the "
                                      "others are kept)."),
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Create a secret or set some of its keys (members of the project). A Job refers to a
    key with env: [{name: WANDB_API_KEY, valueFrom: {secretKeyRef: {name: NAME, key: KEY}}}];
    Runs started from then on get the value. The server seals values at rest and never shows
    them again.

    \b
    Examples:
      rlark secret set wandb api_key            # the value from a hidden prompt or stdin
      pass show wandb | rlark secret set wandb api_key
      rlark secret set hf token=hf_xxx          # (then the value is in your shell history)
      rlark secret set gcp --from-file key.json=./sa.json -p vision
    """
    output = access._check_output(output)
    try:
        data = parse_values(list(pairs or []), list(from_file or []), _read_stdin)
    except ValueError as exc:
        _fail(str(exc))
    client = _client(server, project)
    view = base._call(client.send_json, "PUT" if replace else "PATCH", f"/api/v1/secrets/{name}",
                       {"data": data})
    if output != "text":
        access._emit(view, output)
        return
    base.out.print(Text(f"secret {view['name']} ({view['project']}): "
                         f"set {', '.join(sorted(data))}"))


@secret_app.command("list")
def secret_list(
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List the project's secrets, and those its Jobs refer to: each key set or unset, the Jobs
    that use it, when and by whom it was last changed. Never a value.

    \b
    Examples:
      rlark secret list
      rlark secret list -p vision -o json
    """
    output = access._check_output(output)
    items = base._call(_client(server, project).get, "/api/v1/secrets")
    if output != "text":
        access._emit(items, output)
        return
    if not items:
        base.out.print("no secrets; make one with `rlark secret set NAME KEY`")
        return
    _show(items)


@secret_app.command("get")
def secret_get(
    name: str = typer.Argument(..., metavar="NAME", help="Secret name."),
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Show one secret's keys (set/unset) and who changed it last; never its values."""
    output = access._check_output(output)
    item = base._call(_client(server, project).get, f"/api/v1/secrets/{name}")
    if output != "text":
        access._emit(item, output)
        return
    _show([item])


@secret_app.command("delete")
def secret_delete(
    name: str = typer.Argument(..., metavar="NAME", help="Secret name."),
    key: Optional[str] = typer.Option(None, "--key", "-k", help="Delete only this key."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Delete a secret, or one of its keys (members of the project). Jobs that refer to it keep
    their spec; their next Run fails with SecretMissing until it is set again.

    \b
    Examples:
      rlark secret delete wandb
      rlark secret delete gcp --key old.json
    """
    client = _client(server, project)
    base._call(client.delete, f"/api/v1/secrets/{name}", key=key)
    base.out.print(f"deleted {'key ' + key + ' of ' if key else ''}secret {name}")


@secret_app.command("key")
def secret_key() -> None:
    """Print a new key for RLARK_SECRET_KEY (or a key file): what the server seals secrets
    with. Keep it apart from the database and its backups; several comma-separated keys are
    all tried when opening, the first seals (rotation).

    \b
    Example:
      kubectl create secret generic rlark-secret-key --from-literal=key="$(rlark secret key)"
    """
    from rlark.secretbox import new_key

    sys.stdout.write(new_key() + "\n")
