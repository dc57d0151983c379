"""Quantities and references of a Job spec, parsed as Kubernetes and the image registries read
them: memory and CPU quantities (by the official client's parser), image references. Pure; used by
the Job's own checks (:mod:`rlark.preflight.job`), the runtimes (what a Worker asks for) and the
record's checks.
"""

from __future__ import annotations

import re
from decimal import Decimal

# Docker/OCI image reference (github.com/distribution/reference grammar, simplified):
# [host[:port]/]path-component(/path-component)*[:tag][@algorithm:hex]
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_RE = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)
MAX_MEMORY_BYTES = 2**60
MAX_CPUS = 100_000


def parse_image_reference(image: str) -> dict[str, str | None] | None:
    """Split an image reference into ``host``, ``path``, ``tag`` and ``digest``.

    Returns None when the reference is malformed. Grammar: github.com/distribution/reference.
    """
    m = _IMAGE_RE.match(image or "")
    return m.groupdict() if m else None


def parse_quantity(text: str):
    """Kubernetes quantity -> Decimal, by the official client's parser (imported on first use:
    importing `kubernetes` costs about half a second, which every CLI command would pay)."""
    from kubernetes.utils.quantity import parse_quantity as parse

    return parse(text)


def parse_memory_bytes(value: int | str) -> int:
    """Memory quantity -> bytes. ``'8Gi'`` -> 8589934592, ``'512M'`` -> 512000000, int = bytes.

    Raises:
        ValueError: the value has no unit (a bare number in a string), an unknown unit, or is
        not positive. Units are Kubernetes quantities (Ki Mi Gi Ti, k M G T).
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a memory size")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("must be positive")
        if value > MAX_MEMORY_BYTES:
            raise ValueError("is larger than any machine (more than 1 EiB)")
        return value
    text = str(value).strip()
    if re.fullmatch(r"[0-9.]+", text):
        raise ValueError("has no unit")
    try:
        q = parse_quantity(text)
    except ValueError:
        raise ValueError("is not a memory quantity") from None
    if not q.is_finite() or q <= 0:
        raise ValueError("must be positive and finite")
    if q > MAX_MEMORY_BYTES:
        raise ValueError("is larger than any machine (more than 1 EiB)")
    return int(q.to_integral_value(rounding="ROUND_CEILING"))


def parse_cpu(value: float | int | str) -> Decimal:
    """CPU quantity -> cores as a Decimal: ``2`` -> 2, ``'500m'`` -> 0.5.

    Raises:
        ValueError: not a Kubernetes CPU quantity, or not positive.
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a CPU count")
    try:
        q = parse_quantity(value if isinstance(value, str) else repr(value))
    except ValueError:
        raise ValueError("is not a CPU quantity") from None
    if not q.is_finite() or q <= 0:
        raise ValueError("must be positive and finite")
    if q > MAX_CPUS:
        raise ValueError(f"is more than {MAX_CPUS} cores")
    return q
