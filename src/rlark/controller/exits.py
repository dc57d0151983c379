"""How a Worker's scripts ended, in words: exit statuses and the kernel's OOM killer (pure).

The state machine (:mod:`rlark.controller.phases`) words its reasons with these; a script the
OOM killer ended is told from someone's ``kill -9`` by the OOM kills its keeper counted in the
Worker's memory cgroup (``oom_kills``/``memory_limit`` of its lifecycle line, bootstrap/keeper.py).
"""

from __future__ import annotations

from typing import Any


def exit_text(code: int | None) -> str:
    """How a process ended, in words: ``exited``, ``exited with code N``, ``was killed by
    signal N`` (a status above 128, as a shell reports one). Pure."""
    if code is None:
        return "exited"
    if code > 128:
        return f"was killed by signal {code - 128}"
    return f"exited with code {code}"


#: the status a shell gives a process killed by SIGKILL (128 + 9), the OOM killer's signal
SIGKILL_STATUS = 137


def memory_text(size: int) -> str:
    """Bytes as a Kubernetes quantity where one fits exactly (``1Gi``, ``1500Mi``, ``64Ki``),
    else ``<n> bytes``. Pure."""
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if size and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size} bytes"


def _count(line: dict[str, Any] | None, key: str) -> int | None:
    value = (line or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def oom_killed(line: dict[str, Any] | None, code: int | None, what: str) -> str | None:
    """Why ``what`` (``the run script``, ``the prepare script``) ended, when the kernel's OOM
    killer ended it: it died by SIGKILL (``code`` 137) and its keeper counted OOM kills in the
    Worker's memory cgroup while it ran (``oom_kills`` of its ``run_finished`` or ``failed``
    line, with the cgroup's ``memory_limit`` in bytes where it has one; bootstrap/keeper.py).
    None otherwise: a SIGKILL without an OOM kill is someone's ``kill -9``. Pure."""
    if code != SIGKILL_STATUS or _count(line, "oom_kills") is None:
        return None
    limit = _count(line, "memory_limit")
    if limit is None:
        return (f"{what} was killed by the kernel's OOM killer (signal 9); the Worker's memory "
                "cgroup has no limit: the machine ran out of memory")
    return (f"{what} was killed by the kernel's OOM killer (signal 9): the Worker's memory use "
            f"reached its limit of {memory_text(limit)}; raise resources.memory")


def oom_note(line: dict[str, Any] | None) -> str:
    """``; the kernel's OOM killer killed N of this Worker's processes meanwhile (memory limit
    1Gi)`` for a failure whose line counts OOM kills that did not end a script itself (a Ray
    process killed, say); empty when it counts none. Pure."""
    n = _count(line, "oom_kills")
    if n is None:
        return ""
    limit = _count(line, "memory_limit")
    return (f"; the kernel's OOM killer killed {n} of this Worker's processes meanwhile"
            + (f" (memory limit {memory_text(limit)})" if limit else ""))
