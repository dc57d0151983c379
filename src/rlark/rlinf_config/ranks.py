"""RLinf's rank syntax: ``"0-3,5,7-9"``, ``"all"``, a bare integer.

A re-implementation of RLinf 0.3.0's ``parse_rank_config``
(``rlinf/scheduler/cluster/utils.py``), written from its documented and observed behaviour so that
RLark can read configs without RLinf installed. The behaviour is kept exactly, quirks included:

* the value is first turned into text with ``str()`` (OmegaConf gives ``0`` as an int), so a YAML
  list ``[0, 1]`` becomes ``"[0, 1]"`` and is *rejected* (write ``"0,1"`` instead);
* ``"all"`` (any case) means every available rank;
* parts are split on ``,`` and then on ``-``: ``"a"`` or ``"a-b"`` with ``a <= b``; empty parts are
  skipped (so ``""`` is an empty list); negative numbers are not expressible;
* when available ranks are given, each bound must lie between the smallest and the largest
  available rank (a range check, not a membership check).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence


#: Longest range RLark expands (RLinf has no limit and would exhaust memory first).
MAX_RANKS = 1_000_000


class RankError(ValueError):
    """A rank expression RLinf would refuse. The message says why, in RLinf's terms."""


def format_ranks(ranks: Iterable[int]) -> str:
    """Compact text for ranks: ``[0, 1, 2, 5]`` -> ``"0-2,5"``; ``[]`` -> ``"none"``."""
    ordered = sorted(set(ranks))
    if not ordered:
        return "none"
    parts: list[str] = []
    start = prev = ordered[0]
    then: list[int | None] = [*ordered[1:], None]  # None: the end
    for r in then:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)


def parse_ranks(value: Any, available: Sequence[int] | None = None, what: str = "node") -> list[int]:
    """Parse a rank expression into sorted, unique ranks.

    Args:
        value: ``"0-3,5"``, ``"all"``, ``3`` (anything; it is read through ``str()``).
        available: the ranks the expression may use (e.g. ``range(num_nodes)``); required for
            ``"all"``. ``None`` = no bounds.
        what: what the ranks count, for messages ("node", "Accelerator", ...).

    Returns:
        Sorted unique ranks, e.g. ``[0, 1, 2, 3, 5]``.

    Raises:
        RankError: the expression is malformed, a range is reversed, a bound is outside the
            available ranks, or ``"all"`` is used without available ranks. Same cases as RLinf
            0.3.0 ``rlinf.scheduler.cluster.utils.parse_rank_config`` (ValueError/AssertionError
            there; IndexError there when ``available`` is empty).
    """
    text = str(value)
    avail: Sequence[int] | None
    if isinstance(available, range) and available.step == 1:
        avail = available  # already sorted; not expanded unless "all" asks for every rank
    else:
        avail = sorted(available) if available is not None else None
    if text.lower() == "all":
        if avail is None:
            raise RankError(f'"{text}" needs a set of available {what} ranks')
        return sorted(set(avail))
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if part == "":
            continue
        bounds = part.split("-")
        try:
            if len(bounds) == 1:
                start = end = int(bounds[0])
            elif len(bounds) == 2:
                start, end = int(bounds[0]), int(bounds[1])
            else:
                raise ValueError
        except ValueError:
            raise RankError(
                f'{text!r} is not a rank expression for {what} ranks; RLinf expects "a,b,c-d" or "all"'
            ) from None
        if end < start:
            raise RankError(f"range {part!r} in {text!r} ends before it starts")
        if end - start >= MAX_RANKS:
            # RLinf would try to build the whole list; no real cluster has this many ranks.
            raise RankError(f"range {part!r} in {text!r} has more than {MAX_RANKS} ranks")
        if avail is not None:
            if len(avail) == 0:
                raise RankError(f"{text!r} names {what} ranks, but there are no {what} ranks to use")
            lo, hi = avail[0], avail[-1]
            for bound in (start, end):
                if not lo <= bound <= hi:
                    raise RankError(
                        f"{what} rank {bound} in {text!r} is outside the available {what} ranks "
                        f"{format_ranks(avail) if len(avail) < 1000 else f'{lo}-{hi}'}"
                    )
        ranks.update(range(start, end + 1))
    return sorted(ranks)
