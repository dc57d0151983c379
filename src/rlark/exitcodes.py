"""Exit codes for people: a code above 128 is how shells and Kubernetes report a process ended by
signal N (128 + N, e.g. 143 = SIGTERM: the Worker was stopped, as every Worker is when its Run
ends), which alone reads like a failure."""

from __future__ import annotations

import signal


def exit_text(code: int | None) -> str:
    """``143`` -> ``"143 (SIGTERM)"``, ``1`` -> ``"1"``, ``None`` -> ``""``."""
    if code is None:
        return ""
    if 128 < code <= 128 + 64:
        try:
            return f"{code} ({signal.Signals(code - 128).name})"
        except ValueError:  # no signal has that number here
            pass
    return str(code)
