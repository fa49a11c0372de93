"""What a batch of events changed in one thread's state, noted while they are folded, so a write of the thread's
read model (``document``, ``places``, ``questions``) costs what changed, not the thread's length.

An event whose trait says it is local names what it changes (its run, its message). Any other event, and one
that may move messages between runs or places (a steer carried over or joining), is folded between two
encodings of the thread's long lists: the items whose JSON differs afterwards are the ones it changed, and the
runs and ordinals they belonged to before are placed anew. That costs CPU in the thread's length for those rare
events, never a write of the whole thread. A batch whose events were noted without ``before`` (and a state
just loaded) is written whole.
"""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core import events as ev
from treadle.core.state import ThreadState, evolve

LISTS = ("messages", "runs", "checkpoints", "activity", "handoffs")  # the parts that grow with the thread
# The domain's own JSON, not the view's: it changes whenever the view's does (the view is a part of it), and
# encoding a domain value costs a fraction of converting it to its view first.
_encode = msgspec.json.Encoder().encode


def _owner(name: str, item: Any) -> Any:
    """What places an item of list ``name`` (``places``): a message's or activity's run, a checkpoint's ordinal."""
    if name in ("messages", "activity"):
        return item.run_id
    return item.ordinal if name == "checkpoints" else None


class _Before:
    """The long lists as encoded before the first event of the batch that does not name all it changes."""

    __slots__ = ("items", "owners", "runs")

    def __init__(self, state: ThreadState) -> None:
        self.items = {name: [_encode(v) for v in getattr(state, name)] for name in LISTS}
        self.owners = {name: [_owner(name, v) for v in getattr(state, name)] for name in LISTS}
        self.runs = [r.run_id for r in state.checkpoints]  # a checkpoint's run (its answer names it)


class Changes:
    """What a batch of events changed in one thread's state."""

    __slots__ = (
        "everything",
        "lengths",
        "run_ids",
        "message_ids",
        "moves",
        "base",
        "provider_threads",
        "_before",
        "_diffed",
    )

    def __init__(self, before: ThreadState | None) -> None:
        self.everything = before is None
        self.provider_threads = False  # an event of the batch may have changed them
        self.base = before.seq if before is not None else 0  # the sequence the changes are on top of
        self.moves = before.moves if before is not None else 0
        self.lengths = {name: len(getattr(before, name)) for name in LISTS} if before is not None else {}
        self.run_ids: set[str] = set()
        self.message_ids: set[str] = set()
        self._before: _Before | None = None
        self._diffed: dict[str, list[int]] | None = None

    def fold(self, state: ThreadState, e: ev.Envelope) -> None:
        """Fold ``e`` into ``state`` and note what it changed."""
        self.before(state, e.data)
        evolve(state, e)
        self.note(e.data)

    def before(self, state: ThreadState, payload: ev.Payload) -> None:
        """Called before ``payload`` is folded: keep the lists' encodings when it may change what it does not name."""
        if self.everything or self._before is not None or not _unnamed(state, payload):
            return
        self._before = _Before(state)

    def note(self, payload: ev.Payload) -> None:
        traits = payload.TRAITS  # what the event's fold may change (``core.envelope.Traits``)
        if traits.provider_threads:
            self.provider_threads = True
        if _may_move(payload) or not traits.local:
            if self._before is None:  # folded without ``before``: nothing to compare with
                self.everything = True
            return
        if run_id := getattr(payload, "run_id", None):
            self.run_ids.add(run_id)
        if message_id := getattr(payload, "message_id", None):
            self.message_ids.add(message_id)
        if (carried := _carried(payload)) is not None:  # a run's end with its last message: that message too
            self.message_ids.add(carried.message_id)

    def whole(self, state: ThreadState) -> bool:
        """Whether the write must be whole: an event changed what it does not name and its lists were not kept
        before it, or messages changed runs (``ThreadState.moves``) with nothing to compare with."""
        if state.moves != self.moves and self._before is None:
            self.everything = True
        return self.everything

    @property
    def compared(self) -> bool:
        """An event of the batch changed what it does not name: its changes are found by comparing (``diffed``)."""
        return self._before is not None and not self.everything

    def appended(self, state: ThreadState, name: str) -> range:
        """Positions of the items of list ``name`` the batch added (all of them when everything changed)."""
        return range(0 if self.everything else self.lengths[name], len(getattr(state, name)))

    def diffed(self, state: ThreadState, name: str) -> list[int]:
        """Positions, among those the thread had before the batch, whose items an unnamed change rewrote."""
        if self._before is None or self.everything:
            return []
        if self._diffed is None:
            before = self._before.items
            self._diffed = {
                n: [i for i, (old, now) in enumerate(zip(before[n], getattr(state, n))) if _encode(now) != old]
                for n in LISTS
            }
        return self._diffed[name]

    def former_owners(self, state: ThreadState, name: str) -> set[Any]:
        """The runs (messages, activity) or ordinals (checkpoints) the rewritten items belonged to before."""
        if self._before is None:
            return set()
        owners = self._before.owners[name]
        return {owners[i] for i in self.diffed(state, name)} - {None}

    def former_checkpoint_runs(self, state: ThreadState) -> set[str]:
        if self._before is None:
            return set()
        return {r for i in self.diffed(state, "checkpoints") if (r := self._before.runs[i]) is not None}

    def indices(self, state: ThreadState, name: str, items: list[Any]) -> range | list[int]:
        if self.everything:
            return range(len(items))
        changed = set(range(self.lengths[name], len(items)))
        changed.update(self.diffed(state, name))
        ids = self.run_ids if name == "runs" else self.message_ids if name == "messages" else None
        for item_id in ids or ():
            if (i := state.position(name, item_id)) is not None:
                changed.add(i)
        return sorted(changed)


def _may_move(payload: ev.Payload) -> bool:
    """A steer carried over (to a superseding run or a restart attempt) changes messages it does not name."""
    return bool(getattr(payload, "supersedes_run_id", None) or getattr(payload, "message_ids", None))


def _carried(payload: ev.Payload) -> ev.MessageCompleted | None:
    """The message completion a run's end carries (``RunEnded.message``), if any."""
    return payload.message if isinstance(payload, ev.RunEnded) else None


def _unnamed(state: ThreadState, payload: ev.Payload) -> bool:
    """The event may change items it does not name: not local, a carry-over, or a message it names that exists
    under another run (a steer that came too late moves to the run that supersedes its own)."""
    if not payload.TRAITS.local or _may_move(payload):
        return True
    if (carried := _carried(payload)) is not None and _unnamed(state, carried):
        return True
    message_id, run_id = getattr(payload, "message_id", None), getattr(payload, "run_id", None)
    if not message_id or not run_id:
        return False
    message = state.message(message_id)
    return message is not None and message.run_id != run_id
