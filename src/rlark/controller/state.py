"""What the passes of the controller share: the state one :class:`~rlark.controller.loop.Controller`
holds, and the calls one pass makes into another.

The controller is one class assembled from its passes (:mod:`.launch`, :mod:`.observe`,
:mod:`.adopt`, :mod:`.transitions`, :mod:`.teardown`, and :mod:`.loop` that runs them); each pass
is a mixin of :class:`ControllerState`, which declares what they share so that each module reads
(and type-checks) on its own.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from sqlalchemy import event
from sqlalchemy.orm import Session

from rlark.controller.phases import Transition
from rlark.controller.fencing import check_term
from rlark.controller.rows import apply_pending_facts
from rlark.runtimes.base import Runtime
from rlark.runtimes.capacity import Amounts
from rlark.store import RunRow, Store

if TYPE_CHECKING:
    from rlark.secretbox import SecretBox


#: ``Session.info`` key: the session's transaction wrote something (a flush) not committed yet
_FLUSHED = "rlark.flushed"


def _note_flush(s: Session, _context) -> None:
    s.info[_FLUSHED] = True


class ControllerState:
    """The state of one controller (set by :meth:`rlark.controller.loop.Controller.__init__`)
    and the calls between its passes (each implemented by the pass named)."""

    store: Store
    runtime: Runtime
    #: opens the RLark-managed secrets a Run's env refers to (None: such a Run fails)
    secret_box: SecretBox | None
    #: why this controller adopts the active Runs (said in their ``Adopted`` Event)
    adopt_cause: str
    #: shutdown() stops every active Run (else the next server adopts them)
    stop_runs_on_exit: bool
    _on_shutdown: Callable[[], None] | None
    #: Worker id -> (last heartbeat of the previous server, adoption time)
    _adopted: dict[int, tuple[float | None, float]]
    #: run id -> (one Worker's demand per role, the whole Run's demand, its Worker count,
    #: its spec.priority)
    _demands: dict[int, tuple[dict[str, Amounts], Amounts, int, int]]
    #: run id -> time.monotonic() before which its launch is not tried again
    _launch_after: dict[int, float]
    _lanes_lock: threading.Lock
    #: Runs whose launch is under way (their Workers are not in the store yet)
    _launching: set[int]

    #: Worker id -> the runtime's facts (:attr:`rlark.runtimes.base.Observed.facts`) last
    #: merged into its row and committed: the same facts seen again add nothing (a Pod's image
    #: digest comes with every observation; comparing would need the Worker's deferred facts)
    _runtime_facts: dict[int, dict[str, Any]]

    #: ``Session.info`` key: Worker id -> runtime facts this session merged (known once it commits)
    RUNTIME_FACTS = "rlark.runtime_facts"

    @contextmanager
    def _session(self) -> Iterator[Session]:
        # autoflush off: nothing is written before the commit at the end of a block, so no write
        # transaction is open while the controller calls a process or an API; the facts a pass
        # added are merged at that commit (rows.add_facts)
        with self.store.session(autoflush=False) as s:
            event.listen(s, "before_commit", self._before_commit)
            event.listen(s, "after_flush", _note_flush)
            yield s
        self._runtime_facts.update(s.info.get(self.RUNTIME_FACTS) or {})

    #: this controller's term (:func:`rlark.controller.fencing.claim_term`; None: not claimed
    #: yet, nothing is fenced)
    _term: int | None

    def _before_commit(self, s: Session) -> None:
        """What a pass's session does before it commits: merge the facts the pass added
        (:func:`~rlark.controller.rows.apply_pending_facts`), then, when the transaction writes
        anything, write it and check in the same transaction that this controller's term is
        still the store's (:func:`~rlark.controller.fencing.check_term`).

        Raises:
            Deposed: another controller took over; the commit fails and the block rolls back.
        """
        apply_pending_facts(s)
        if self._term is not None and (s.new or s.dirty or s.deleted or s.info.get(_FLUSHED)):
            s.flush()
            check_term(s, self._term)
        s.info.pop(_FLUSHED, None)

    def _transition(self, s: Session, run: RunRow, t: Transition) -> None:
        """:meth:`rlark.controller.transitions.Transitions._transition`."""
        raise NotImplementedError

    def _sync_tasks(self, run: RunRow) -> None:
        """:meth:`rlark.controller.transitions.Transitions._sync_tasks`."""
        raise NotImplementedError

    def _finish(self, s: Session, run: RunRow) -> None:
        """:meth:`rlark.controller.teardown.TearingDown._finish`."""
        raise NotImplementedError

    def _beat(self, force: bool = False) -> None:
        """:meth:`rlark.controller.loop.Controller._beat`."""
        raise NotImplementedError

    def stop_loop(self, wait: bool = True) -> None:
        """:meth:`rlark.controller.loop.Controller.stop_loop`."""
        raise NotImplementedError
