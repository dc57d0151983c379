"""Small helpers for the English texts RLark writes (counts with the right plural)."""

from __future__ import annotations


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` with the right number: ``plural(1, "role")`` -> ``"1 role"``,
    ``plural(3, "Worker")`` -> ``"3 Workers"``, ``plural(2.5, "CPU")`` -> ``"2.5 CPUs"``;
    ``many`` is the plural when adding "s" is wrong."""
    text = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{text} {word if n == 1 else (many or word + 's')}"
