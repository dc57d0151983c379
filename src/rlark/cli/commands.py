"""Every ``rlark`` command, added to the application in the order ``rlark --help`` lists them
(Typer lists commands in the order they are added, then the groups)."""

from __future__ import annotations

from rlark.cli import access, describe, files, jobs, logs, metrics, nodes, outputs, projects, queue
from rlark.cli import records, secrets, server, top, users, volumes, webhooks
from rlark.cli.base import app, describe_app, get_app

__all__ = ["app"]

for command in (files.validate, files.schema, files.plan, files.check, server.server,
                files.render, nodes.nodes, queue.queue, jobs.submit, jobs.apply, describe.events, logs.logs,
                metrics.metrics, top.top, jobs.stop, jobs.start, jobs.restart, jobs.delete, records.record,
                outputs.outputs,
                access.login, access.logout, access.whoami, access.audit):
    app.command(command.__name__)(command)

get_app.command("nodes")(nodes.nodes)
get_app.command("node", hidden=True)(nodes.nodes)
get_app.command("queue")(queue.queue)
get_app.command("jobs")(describe.get_jobs)
get_app.command("job", hidden=True)(describe.get_jobs)
describe_app.command("job")(describe.describe_job)
describe_app.command("jobs", hidden=True)(describe.describe_job)

app.add_typer(get_app, name="get")
app.add_typer(describe_app, name="describe")
app.add_typer(users.user_app, name="user")
app.add_typer(users.token_app, name="token")
app.add_typer(projects.project_app, name="project")
app.add_typer(secrets.secret_app, name="secret")
app.add_typer(volumes.volume_app, name="volume")
app.add_typer(webhooks.webhook_app, name="webhook")
