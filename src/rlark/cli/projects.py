"""``rlark project``: projects, their members and roles, quotas, and the current project of a
server (helpers shared with the other access commands in :mod:`rlark.cli.access`)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.text import Text

from rlark.cli import credentials
from rlark.cli.access import (OutputOpt, Role, ServerOpt, _call, _check_output, _client, _emit,
                              _fail, _note, _print, _table, _time)
from rlark.cli.client import ClientError, resolve_project

project_app = typer.Typer(help="Projects, their members and roles; the current project.",
                          no_args_is_help=True)


# --- projects --------------------------------------------------------------------------------------------


@project_app.command("create")
def project_create(name: str = typer.Argument(..., metavar="NAME", help="Project name (a DNS label)."),
                   namespace: Optional[str] = typer.Option(
                       None, "--namespace", "-n",
                       help="Kubernetes namespace of its Pods (default: <server namespace>-NAME; never "
                            "the server's own namespace, which holds RLark's Secrets)."),
                   queue: Optional[str] = typer.Option(
                       None, "--queue", metavar="NAME",
                       help="Kubernetes: the Kueue LocalQueue (in the project's namespace) its "
                            "Runs wait in, all of a Run's Pods admitted together; none: no queue. "
                            "Default: the server's (rlark server --k8s-queue)."),
                   server: Optional[str] = ServerOpt) -> None:
    """Create a project (site administrators). Then give people roles in it with
    `rlark project add-member`.

    \b
    Examples:
      rlark project create vision
      rlark project create robots --namespace rl-robots --queue robots
    """
    body: dict[str, Any] = {"name": name}
    if namespace:
        body["namespace"] = namespace
    if queue:
        body["queue"] = queue
    p = _call(_client(server).send_json, "POST", "/api/v1/projects", body)
    where = [f"namespace {p['namespace']}"] if p.get("namespace") else []
    if p.get("queue"):
        where.append(f"queue {p['queue']}")
    _print(Text(f"project {p['name']} created" + (f" ({', '.join(where)})" if where else "")))


@project_app.command("set-queue")
def project_set_queue(
        name: str = typer.Argument(..., metavar="NAME", help="Project name."),
        queue: str = typer.Argument(..., metavar="QUEUE",
                                    help="A Kueue LocalQueue of the project's namespace; none: no "
                                         "queue; default: the server's (--k8s-queue)."),
        server: Optional[str] = ServerOpt) -> None:
    """Set the queue a project's new Runs wait in (site administrators; Kubernetes with Kueue):
    all of a Run's Pods are admitted together, and the Run stays Pending (Queued) until then.
    Runs already queued stay where they are.

    \b
    Examples:
      rlark project set-queue vision team-vision
      rlark project set-queue vision none       # no queue: Pods go to the scheduler at once
      rlark project set-queue vision default    # the server's queue (rlark server --k8s-queue)
    """
    p = _call(_client(server).send_json, "PUT", f"/api/v1/projects/{name}/queue",
              {"queue": None if queue == "default" else queue})
    _print(Text(f"project {p['name']}: new Runs wait in "
                + (f"queue {p['queue']}" if p.get("queue") else "no queue")
                + ("" if p.get("queueSet") else " (the server's setting)")))


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
    _print(_table(("NAME", "ROLE", "NAMESPACE", "QUEUE", "JOBS"),
                  [(p["name"], p["role"], p.get("namespace"), p.get("queue"), p["jobs"])
                   for p in projects]))
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
    _print(Text(f"Queue:      {p.get('queue') or '-'}"
                + ("" if p.get("queueSet") or not p.get("queue") else " (the server's)")))
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
