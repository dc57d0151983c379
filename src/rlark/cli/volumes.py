"""``rlark volume``: a project's volumes, what ``pvc`` mounts name (``/api/v1/volumes``).

On the local runtime a volume is a directory the server keeps for the project, made when a Run
first mounts it; ``list`` shows each with its size and the Jobs that mount it, ``delete`` removes
it with everything in it. On Kubernetes a ``pvc`` mount names a PersistentVolumeClaim, which
kubectl lists; the server says so.
"""

from __future__ import annotations

from typing import Optional

import typer

from rlark.cli import access, base
from rlark.record.export import human_bytes

volume_app = typer.Typer(help="Volumes of a project, for pvc mounts (the local runtime's).",
                         no_args_is_help=True)

OutputOpt = base.OutputOpt
ProjectOpt = base.project_option("the volumes")
ServerOpt = base.ServerOpt


@volume_app.command("list")
def volume_list(
    output: str = OutputOpt,
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """List the project's volumes: size, entries, last change and the Jobs that mount them.

    \b
    Examples:
      rlark volume list
      rlark volume list -p vision -o json
    """
    output = access._check_output(output)
    items = base._call(base._job_client(server, project).get, "/api/v1/volumes")
    if output != "text":
        access._emit(items, output)
        return
    if not items:
        base.out.print("no volumes; a Job's pvc mount makes one when its Run starts")
        return
    rows = [(v["name"], human_bytes(v["bytes"]), str(v["entries"]),
             access._time(v["modifiedAt"]), ", ".join(v["usedBy"]) or "-") for v in items]
    access._print(access._table(("NAME", "SIZE", "ENTRIES", "CHANGED", "USED BY"), rows))


@volume_app.command("delete")
def volume_delete(
    name: str = typer.Argument(..., metavar="NAME", help="Volume name (a pvc mount's source)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Delete a volume and everything in it (members of the project); refused while an active
    Job mounts it.

    \b
    Example:
      rlark volume delete checkpoints -y
    """
    client = base._job_client(server, project)
    if not yes and not typer.confirm(f"delete volume {name} and everything in it?"):
        raise typer.Exit(1)
    held = base._call(client.delete, f"/api/v1/volumes/{name}")
    base.out.print(f"deleted volume {name} ({human_bytes(held['bytes'])}, "
                   f"{held['entries']} entries)")
