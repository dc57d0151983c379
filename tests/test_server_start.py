"""``rlark server`` on a port that is taken, and ``rlark --version``: what a newcomer hits first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from rlark import __version__

RLARK = [sys.executable, "-m", "rlark.cli"]


def test_a_taken_port_is_refused_before_anything_is_written(tmp_path):
    home = tmp_path / "home"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([*RLARK, "server", "--port", str(port)], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "RLARK_HOME": str(home)})
    assert r.returncode == 1, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr
    assert f"rlark server --port {port + 1}" in r.stderr and "Traceback" not in r.stderr
    assert not home.exists()  # no store, no admin, no credentials for a server that never ran


def test_version():
    r = subprocess.run([*RLARK, "--version"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"rlark {__version__}\n")
