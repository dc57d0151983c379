"""The ``rlark`` command (Typer + Rich): it parses, calls the REST API, and renders; the logic
lives in the services.

One module per command group: :mod:`~rlark.cli.files` (validate, schema, plan, check, render),
:mod:`~rlark.cli.server` (server), :mod:`~rlark.cli.nodes`, :mod:`~rlark.cli.jobs` (submit,
apply, stop, start, restart, delete), :mod:`~rlark.cli.describe` (get, describe, events),
:mod:`~rlark.cli.logs`, :mod:`~rlark.cli.records` (record, record diff),
:mod:`~rlark.cli.access` (login, logout, whoami, audit), :mod:`~rlark.cli.users` (user, token),
:mod:`~rlark.cli.projects`, :mod:`~rlark.cli.secrets`, :mod:`~rlark.cli.volumes` and
:mod:`~rlark.cli.webhooks`; :mod:`~rlark.cli.base` holds what they
share and :mod:`~rlark.cli.commands` the table that adds them to the application, in the order
``rlark --help`` lists them. :mod:`~rlark.cli.client` is the HTTP client, and
:mod:`~rlark.cli.credentials` the credentials file (which ``rlark server`` also writes).

Nothing is imported here: the server reads the credentials file without loading the commands.
"""


def main() -> None:
    """Console-script entry point (``rlark = "rlark.cli:main"``)."""
    from rlark.cli.commands import app

    app()
