"""Findings: the one shape every check in RLark reports in.

A Finding names a ``code`` (stable, CamelCase, meant for scripts and tests), a ``severity``
(``error`` blocks a submission, ``warning`` is kept on the Job, ``info`` is advice), the field
``path`` in the Job spec (``spec.roles[1].workers``), a ``message`` that states the bad value, and
a ``hint`` that states the fix.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable

from pydantic import BaseModel


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


class Finding(BaseModel):
    code: str
    severity: Severity = Severity.error
    path: str
    message: str
    hint: str = ""

    def one_line(self) -> str:
        """Render as ``severity code path: message (hint)`` for terminals and logs."""
        hint = f" Fix: {self.hint}" if self.hint else ""
        return f"{self.severity.value} {self.code} {self.path}: {self.message}{hint}"


def error(code: str, path: str, message: str, hint: str) -> Finding:
    """An ``error`` Finding."""
    return Finding(code=code, severity=Severity.error, path=path, message=message, hint=hint)


def warning(code: str, path: str, message: str, hint: str) -> Finding:
    """A ``warning`` Finding."""
    return Finding(code=code, severity=Severity.warning, path=path, message=message, hint=hint)


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any Finding is an error (the Job must not be submitted)."""
    return any(f.severity == Severity.error for f in findings)


def format_path(loc: Iterable[str | int]) -> str:
    """Turn a pydantic-style location ``("spec", "roles", 1, "workers")`` into
    ``spec.roles[1].workers``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "$"
