"""The README's "Quickstart by hand", typed in order as a new user types it (issue 19 item 15:
``record diff quickstart:1 quickstart:2`` came before any second Run, and failed).

The code block is read from README.md and each line typed into an interactive bash on a
pseudo-terminal, in the repository's root: the server line starts a real ``rlark server`` in the
background (the user waits for it to say it runs), the quickstart Job runs real Ray nodes, and
``rlark delete`` asks on that terminal, where the test answers ``y``. Every line must succeed.
Only the environment differs from a user's: a fresh ``$RLARK_HOME``, a free port (``RLARK_PORT``
and ``RLARK_SERVER``), a short Ray temp dir, and ``scripts/setup-env`` not run again (the
tests run in the environment it made).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import psutil
import pytest

from tests.k8s_testbed import wait_for
from tests.server import free_port, ray_tmp_dir

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parent.parent
SETUP = "./scripts/setup-env && source .venv/bin/activate"
PROMPT = re.compile(r"__rlark_prompt_(\d+)__ ")
#: seconds a line may take: a Run of the quickstart takes one to four minutes on 2 cores
SLOW = {"--wait": 900.0}


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie its shell has not reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def quickstart_lines() -> list[str]:
    """The README's by-hand quickstart: the lines of its code block a user types (comment-only
    lines, which continue the comment of the line above, are not typed)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Quickstart by hand\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.split("#", 1)[0].strip()]


class Terminal:
    """An interactive bash on a pseudo-terminal 200 columns wide: :meth:`type` a line, get its
    exit status and what it showed; ``shown`` is everything the terminal showed."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile", "-i"], stdin=slave,
                                     stdout=slave, stderr=slave, cwd=cwd, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.shown = ""
        self._read = 0
        self.type("PS1='__rlark_prompt_$?__ '; PS2=''", timeout=30)

    def _send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for(self, pattern: str | re.Pattern, timeout: float) -> re.Match:
        """Read what the terminal shows until ``pattern`` appears (after what was matched
        before); fail naming it and the last lines shown at the deadline."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.shown, self._read)
            if found:
                self._read = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"the terminal did not show {regex.pattern!r} within {timeout:.0f} s; "
                            f"last shown:\n{self.shown[-4000:]}", pytrace=False)
            ready, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the shell is gone
                    chunk = b""
                if not chunk:
                    pytest.fail(f"the shell ended; last shown:\n{self.shown[-4000:]}", pytrace=False)
                self.shown += chunk.decode("utf-8", errors="replace")

    def type(self, line: str, timeout: float = 180,
             answers: tuple[tuple[str, str], ...] = ()) -> tuple[int, str]:
        """Type ``line`` (and each answer once its question shows); its exit status and output."""
        start = len(self.shown)
        self._send(line + "\n")
        for question, answer in answers:
            self.wait_for(question, timeout)
            self._send(answer)
        status = self.wait_for(PROMPT, timeout)
        return int(status.group(1)), self.shown[start:status.start()]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        os.close(self.master)


def test_the_quickstart_by_hand_works_typed_in_order(tmp_path):
    lines = quickstart_lines()
    assert lines[0] == SETUP, lines[0]
    assert any(line.startswith("rlark record diff quickstart:1 quickstart:2") for line in lines)
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RLARK_DATABASE_URL", "RLARK_PROJECT", "RLARK_TOKEN", "NO_COLOR")}
    env.update(RLARK_HOME=str(tmp_path / "home"), RLARK_PORT=str(port),
               RLARK_SERVER=f"http://127.0.0.1:{port}", RLARK_RAY_TMP=ray_tmp_dir(),
               TERM="xterm-256color",
               # a failed test's server (SIGTERM below) ends the Runs it leaves
               RLARK_STOP_RUNS_ON_EXIT="1")
    terminal = Terminal(REPO, env)
    server_pid = None
    said: dict[str, str] = {}
    try:
        # setup-env made the environment these tests run in; its second half is what is left
        status, output = terminal.type("source .venv/bin/activate")
        assert status == 0, output
        for line in lines[1:]:
            answers = (("[y/N]", "y\n"),) if line.startswith("rlark delete") else ()
            answers = tuple((re.escape(q), a) for q, a in answers)
            timeout = max([t for flag, t in SLOW.items() if flag in line] or [180.0])
            status, output = terminal.type(line, timeout=timeout, answers=answers)
            assert status == 0, f"`{line}` exited {status}:\n{output[-4000:]}"
            said[line.split("#", 1)[0].strip()] = output
            if line.startswith("rlark server"):
                server_pid = int(re.search(r"\[1\] (\d+)", output).group(1))
                terminal.wait_for("Uvicorn running on", timeout=120)  # what the user waits for
        assert server_pid is not None
        wait_for("the server to stop after `kill %1`", lambda: exited(server_pid), timeout=60)
        server_pid = None
    finally:
        if server_pid is not None and not exited(server_pid):
            try:
                server = psutil.Process(server_pid)
                server.terminate()  # RLARK_STOP_RUNS_ON_EXIT: its Runs end with it
                server.wait(timeout=90)
            except psutil.NoSuchProcess:
                pass
        terminal.close()

    def shown(prefix: str) -> str:
        """What typing the line that starts with ``prefix`` printed, without the terminal's
        colours (Rich highlights numbers on a terminal: ``run \\x1b[1;36m1``)."""
        out = next(out for line, out in said.items() if line.startswith(prefix))
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)

    assert "Succeeded" in shown("rlark submit") and "Succeeded" in shown("rlark start")
    assert "quickstart run 1" in shown("rlark record diff") and "run 2" in shown("rlark record diff")
    assert "unchanged" in shown("rlark apply")
    assert "Delete job/quickstart" in shown("rlark delete")
    assert "job/quickstart deleted" in shown("rlark delete")
    # the server shared the terminal and printed no line per request into it
    assert "HTTP/1.1" not in terminal.shown
