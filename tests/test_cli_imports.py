"""What ``rlark`` loads before it runs a command: the client's own modules, never the server's
layers. Every command pays its imports on each call (a user's shell loop, a CI script, the suite's
thousand CLI calls), so a command module that pulls in the run record's pydantic schema, the store
or Ray costs everyone about 0.2-1 s per call. Speed itself is measured in bench/, not here: this
checks the import graph, which is what makes the cost."""

from __future__ import annotations

import json
import subprocess
import sys

#: packages the CLI must not load at start (each is a server-side layer or a heavy library)
SERVER_SIDE = ("rlark.record.schema", "rlark.record.build", "rlark.store", "rlark.services",
               "rlark.controller", "rlark.runtimes", "rlark.api", "pydantic", "sqlalchemy",
               "fastapi", "ray", "kubernetes")


def test_the_cli_loads_none_of_the_servers_layers_to_start():
    code = ("import json, sys; import rlark.cli.commands; "
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    pulled = sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in SERVER_SIDE))
    assert pulled == [], f"`rlark` imports server-side modules at start: {pulled}"
