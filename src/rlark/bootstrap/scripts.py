"""The Job's scripts: how a prepare or run script runs (:data:`SCRIPT_SHELL`, the keeper starts
the head's run script the same way) and the bounded prepare step of every Worker."""

from __future__ import annotations

import subprocess
import time
from typing import Callable

from rlark.bootstrap.config import (EXIT_PREPARE_FAILED, EXIT_PREPARE_TIMEOUT, BootstrapConfig,
                                    BootstrapError)
from rlark.bootstrap.report import emit

#: how prepare and run scripts run: bash with errexit and pipefail, as CI systems run theirs, so
#: a failing command (also inside a pipeline) ends the script with that command's exit code
#: instead of being hidden by the commands after it
SCRIPT_SHELL = ("bash", "-e", "-o", "pipefail", "-c")


def script_argv(script: str) -> list[str]:
    """The argv that runs a prepare or run script (:data:`SCRIPT_SHELL`)."""
    return [*SCRIPT_SHELL, script]


def run_prepare(cfg: BootstrapConfig, spawn: Callable[[list[str]], subprocess.Popen],
                check_stopped: Callable[[], None]) -> None:
    """Run the Job's prepare script (``cfg.prepare_script``; nothing when it is blank) with
    ``spawn`` and wait for it at most ``cfg.prepare_timeout`` seconds, reporting the phases
    ``Preparing`` and ``Prepared``.

    Raises:
        BootstrapError: ``PrepareTimeout`` (the script is killed), ``PrepareFailed`` (non-zero
            exit; the Worker exits with the script's own code where it is 1..127), or what
            ``check_stopped`` raises when the Worker is being stopped.
    """
    script = cfg.prepare_script
    if not script.strip():
        return
    emit("phase", phase="Preparing")
    started = time.monotonic()
    proc = spawn(script_argv(script))
    try:
        code = proc.wait(timeout=cfg.prepare_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BootstrapError(
            "PrepareTimeout",
            f"prepare script still running after {cfg.prepare_timeout:g} s",
            EXIT_PREPARE_TIMEOUT,
            timeout_seconds=cfg.prepare_timeout,
        ) from None
    check_stopped()
    if code < 0:
        # killed by a signal (bash execs a script's last command, so the kernel's OOM killer's
        # SIGKILL reaches Popen as -9): the shell's 128 + signal, an exit status a report takes
        code = 128 - code
    if code != 0:
        # the Worker exits with the script's own code where it is one (1..127), so `EXIT`
        # columns show what the user's script returned
        raise BootstrapError(
            "PrepareFailed",
            f"prepare script was killed by signal {code - 128}" if code > 128
            else f"prepare script exited with code {code}",
            code if 0 < code < 128 else EXIT_PREPARE_FAILED,
            exit_code=code,
        )
    emit("phase", phase="Prepared", seconds=round(time.monotonic() - started, 3))
