"""The bootstrap archive's entry: its ``__main__.py`` (and ``python -m rlark.bootstrap``).

    python -I -S rlark-bootstrap.pyz keeper   a Worker's first process (keeper.py)
    python rlark-bootstrap.pyz worker         the Worker's bootstrap, started by its keeper
    python -I -S rlark-bootstrap.pyz exec     a server helper in a jail (sandbox.exec_jailed)
    python -I rlark-bootstrap.pyz objcopy     one object-storage copy (objectcopy.py)
    python -I rlark-bootstrap.pyz objcopy-in  a Pod's init container: its mounts copied in
    python -I rlark-bootstrap.pyz objcopy-ready  a Pod's copy out, started before the workload

Only the part asked for is imported, before anything runs: the keeper loads none of the
workload's modules, the workload none of the keeper's.
"""

from __future__ import annotations

import os
import sys

USAGE = """usage: python [-I -S] rlark-bootstrap.pyz {keeper|worker|exec|objcopy|objcopy-in|objcopy-ready|--help}

RLark's Worker bootstrap (stdlib + ray only; inputs from RLARK_* environment variables):
  keeper   a Worker's first process: writes its lifecycle lines, starts the workload
  worker   the Worker's bootstrap (Ray node, join barrier, facts), started by the keeper
  exec     run RLARK_KEEPER_EXEC as RLARK_KEEPER_UID in the view RLARK_KEEPER_SANDBOX describes
  objcopy  copy one object-storage mount in or out (a JSON request on stdin; needs boto3)
  objcopy-in  a Pod's init container: copy its copy-mode mounts in (RLARK_OBJECT_STORAGE)
  objcopy-ready  objcopy, its code loaded before the Worker's code runs (a Pod's copy out)
"""


def archive_path() -> str | None:
    """The archive this program runs from (``<archive>/__main__.py``), None when it runs from
    a source tree (``python -m rlark.bootstrap``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return here if os.path.isfile(here) else None


def main(argv: list[str]) -> int:
    """Run the part ``argv[0]`` names; returns the exit status (2 and the usage on standard
    error for anything else)."""
    command = argv[0] if argv else ""
    if command == "keeper":
        from rlark.bootstrap import keeper

        return keeper.main(archive_path())
    if command == "worker":
        from rlark.bootstrap import worker

        return worker.main()
    if command == "exec":
        from rlark.bootstrap import sandbox

        return sandbox.exec_jailed()
    if command == "objcopy":
        from rlark.bootstrap import objectcopy

        return objectcopy.main()
    if command == "objcopy-ready":
        from rlark.bootstrap import objectcopy

        return objectcopy.main_ready()
    if command == "objcopy-in":
        from rlark.bootstrap import objectcopy

        return objectcopy.main_init()
    if command in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
