"""What a batch of events changed in one thread's state, noted while they are folded, so a write of the thread's
read model (``document``, ``places``, ``questions``) costs what changed, not the thread's length.

An event whose trait says it is local names what it changes (its run, its message). The folds of the others,
and of a steer carried over or joining (which moves messages between runs or places), record which items of
the long lists they rewrote and which runs messages left, in the state they fold (``core.touched``: the
changes watch the state from their batch's start). With what each list had before the batch (its items after
are appended), that is every item the batch changed: no list is encoded or compared, and an event that rewrites
no item (a rename, an archive) costs nothing list-wise. A batch with no state to start from (a new thread) is written whole.
"""

from __future__ import annotations

from typing import Any

from treadle.core import events as ev
from treadle.core.state import ThreadState, evolve
from treadle.core.touched import LISTS as LISTS
from treadle.core.touched import Touched


class Changes:
    """What a batch of events changed in one thread's state."""

    __slots__ = ("everything", "lengths", "run_ids", "message_ids", "base", "provider_threads", "_touched")

    def __init__(self, before: ThreadState | None) -> None:
        self.everything = before is None  # nothing folded before the batch: written whole
        self.provider_threads = False  # an event of the batch may have changed them
        self.base = before.seq if before is not None else 0  # the sequence the changes are on top of
        self.lengths = {name: len(getattr(before, name)) for name in LISTS} if before is not None else {}
        self.run_ids: set[str] = set()
        self.message_ids: set[str] = set()
        self._touched = before.watch() if before is not None else Touched()

    def fold(self, state: ThreadState, e: ev.Envelope) -> None:
        """Fold ``e`` into ``state`` and note what it changed."""
        evolve(state, e)
        self.note(e.data)

    def note(self, payload: ev.Payload) -> None:
        """Note what a folded event names; what it changed but does not name, its fold recorded (``touched``)."""
        traits = payload.TRAITS  # what the event's fold may change (``core.envelope.Traits``)
        if traits.provider_threads:
            self.provider_threads = True
        if not traits.local:
            return
        if run_id := getattr(payload, "run_id", None):
            self.run_ids.add(run_id)
        if message_id := getattr(payload, "message_id", None):
            self.message_ids.add(message_id)
        if isinstance(payload, ev.RunEnded) and payload.message is not None:  # a run's end with its last message
            self.message_ids.add(payload.message.message_id)

    def appended(self, state: ThreadState, name: str) -> range:
        """Positions of the items of list ``name`` the batch added (all of them when everything changed)."""
        return range(0 if self.everything else self.lengths[name], len(getattr(state, name)))

    def touched(self, name: str) -> set[int]:
        """Positions of items of list ``name`` the folds rewrote without their events naming them."""
        return set() if self.everything else self._touched.positions.get(name, set())

    @property
    def left(self) -> set[str]:
        """The runs messages moved away from: their places are written anew."""
        return set() if self.everything else self._touched.left

    def indices(self, state: ThreadState, name: str, items: list[Any]) -> range | list[int]:
        if self.everything:
            return range(len(items))
        changed = set(range(self.lengths[name], len(items)))
        changed.update(i for i in self._touched.positions.get(name, ()) if i < len(items))
        ids = self.run_ids if name == "runs" else self.message_ids if name == "messages" else None
        for item_id in ids or ():
            if (i := state.position(name, item_id)) is not None:
                changed.add(i)
        return sorted(changed)
