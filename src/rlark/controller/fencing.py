"""Fencing: a controller whose term is over cannot commit.

Every :class:`~rlark.controller.loop.Controller` claims a *term* in the store when it starts
acting (:func:`claim_term`: ``controller_state.term`` + 1, the number its writes carry), and
every transaction of its passes checks, after its writes and before its commit, that the stored
term is still its own (:func:`check_term`), else it rolls back (:class:`Deposed`). A leader that
lost its Lease while one of its lanes was still at work (a slow runtime call) is fenced this way
once the next leader has claimed its term, whatever its clock or its ``may_act`` says: the Lease
says who may lead; the store's term says whose writes count.

The order holds on both databases: SQLite takes one writer at a time, and the check reads the
term after the transaction's own writes took the write lock; PostgreSQL's check locks the
term's row for share (``SELECT ... FOR SHARE``), so a claim (``FOR UPDATE``) waits for a check
in flight to commit, and a check waits for a claim in flight and then reads its new term.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from rlark.store import ControllerStateRow, Store


class Deposed(RuntimeError):
    """A controller's transaction found a newer term in the store: another controller took over
    (a new leader); nothing of the transaction was written."""

    def __init__(self, mine: int, current: int | None):
        super().__init__(f"controller term {mine} is over (the store's term is {current}): "
                         "another controller took over; nothing of this pass was written")
        self.mine, self.current = mine, current


def claim_term(store: Store) -> int:
    """Start a new term in ``store``: ``controller_state.term`` + 1 (the row is made when there
    is none), committed at once; returns the new term. From then on a controller holding an
    earlier term commits nothing (:func:`check_term`)."""
    for attempt in range(2):
        try:
            with store.session() as s:
                row = s.scalars(select(ControllerStateRow).where(ControllerStateRow.id == 1)
                                .with_for_update()).first()
                if row is None:
                    row = ControllerStateRow(id=1, owner="", term=0)
                    s.add(row)
                row.term = (row.term or 0) + 1
                return row.term
        except IntegrityError:  # another controller made the row meanwhile: claim over it
            if attempt:
                raise
    raise AssertionError("unreachable")


def check_term(s: Session, mine: int) -> None:
    """Raise :class:`Deposed` unless the store's term is ``mine``, read in ``s``'s transaction
    after its writes were flushed (the row locked for share on PostgreSQL, until the commit)."""
    current = s.execute(select(ControllerStateRow.term).where(ControllerStateRow.id == 1)
                        .with_for_update(read=True)).scalar()
    if current != mine:
        raise Deposed(mine, current)
