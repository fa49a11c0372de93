"""Which items of a thread's long lists the folds rewrote in place, recorded while a writer watches the state
(the projection writer, from one batch of events to the next: ``ThreadState.watch``), so that it writes those
items, and places anew the runs messages left, without comparing the lists before and after each event (that
cost CPU in the thread's length: 180–260 ms per such event at 10,000 runs, bench/unnamed_writes.py).

An event whose trait says it is ``local`` names what it changes (its run, its message); the folds of the others
(a rollback, an edit, a delegation, a context delivery) and of a steer carried over or joined say which items
they rewrote (``ThreadState.touch``, ``touch_id``, ``messages_moved``). Items appended need no record: the writer
writes what lies past each list's length before the batch. tests/unit/test_touched_items.py keeps the comparison
as the oracle: over recorded and generated logs, the record holds every item whose JSON an event changed.
"""

from __future__ import annotations

from collections.abc import Iterable

LISTS = ("messages", "runs", "checkpoints", "activity", "handoffs")  # the parts that grow with the thread


class Touched:
    """Positions of the items the folds rewrote, per list (one of ``LISTS``), and the runs messages moved away
    from. Small while empty: the projector keeps one in each state it caches."""

    __slots__ = ("positions", "left")

    def __init__(self) -> None:
        self.positions: dict[str, set[int]] = {}
        self.left: set[str] = set()

    def add(self, name: str, positions: Iterable[int]) -> None:
        self.positions.setdefault(name, set()).update(positions)
