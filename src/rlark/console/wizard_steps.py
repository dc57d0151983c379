"""Which of the Create Job wizard's steps, form fields and role tabs a Finding belongs to, so
each step shows its own Findings next to the fields they are about (the form itself:
:mod:`.wizard`). Pure.
"""

from __future__ import annotations

import re
from typing import Iterable

from rlark.findings import Finding, Severity

_ROLE_PATH = re.compile(r"^spec\.roles\[(\d+)\](.*)$")


def step_of(f: Finding) -> int:
    """The wizard step whose fields a Finding is about (4: none earlier)."""
    p = f.path
    if p == "$" or p.startswith("metadata") or p == "spec.headRole" or f.code == "NoRoles":
        return 1
    m = _ROLE_PATH.match(p)
    if m:
        return 1 if m.group(2) == ".name" else 2
    if p == "spec.roles":
        return 2
    if p.startswith("spec."):
        return 3
    return 4


def role_of(f: Finding) -> int | None:
    m = _ROLE_PATH.match(f.path)
    return int(m.group(1)) if m else None


def field_of(f: Finding) -> str | None:
    """The form field (or group of fields) a Finding is shown next to."""
    p = f.path
    fixed = {
        "metadata.name": "name", "spec.headRole": "head", "spec.runScript": "runScript",
        "spec.workingDir": "workingDir",
        "spec.failurePolicy.joinTimeoutSeconds": "joinTimeout",
        "spec.failurePolicy.prepareTimeoutSeconds": "prepareTimeout",
        "spec.failurePolicy.unresponsiveTimeoutSeconds": "unresponsiveTimeout",
        "spec.failurePolicy.maxRestarts": "maxRestarts",
        "spec.terminationGracePeriodSeconds": "grace",
    }
    if p in fixed:
        return fixed[p]
    if p.startswith("metadata.labels"):
        return "labels"
    if p.startswith("spec.rlinf"):
        return "rlinf"
    m = _ROLE_PATH.match(p)
    if not m:
        return None
    i, rest = m.group(1), m.group(2)
    simple = {".name": "name", ".workers": "workers", ".image": "image",
              ".resources.cpu": "cpu", ".resources.memory": "memory", ".resources.gpu": "gpu",
              ".prepareScript": "prepare", ".local.python": "python"}
    if rest in simple:
        return f"role-{i}-{simple[rest]}"
    for prefix, group in ((".env", "env"), (".mounts", "mounts"), (".nodeSelector", "selector"),
                          (".resources.devices", "devices")):
        if rest.startswith(prefix):
            return f"role-{i}-{group}"
    return None


def blocking(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.error]
