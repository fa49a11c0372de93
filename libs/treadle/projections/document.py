"""A thread's read model stored as parts, so a write costs what changed, not the thread's length.

The document is the JSON of the thread's view (``treadle.views.thread.ThreadView``, built from the folded
state by ``views.of_state``). In Redis it is a hash: one field per small top-level field (``f:<name>``) and
one per element of the long lists (``l:<name>:<i>``, with the length in ``n:<name>``), with the view version
in ``v``. Reassembling the parts gives exactly the bytes msgspec gives for the whole view, so a projection
can be compared byte for byte with a replay of the log; parts of another view version reassemble to nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core import events as ev
from treadle.core.state import ThreadState

from ..views import VIEW_VERSION, of_state

FIELDS: tuple[str, ...] = of_state.FIELDS
VERSION = str(VIEW_VERSION).encode()
LISTS = ("messages", "runs", "checkpoints", "activity", "handoffs")  # the parts that grow with the thread
_encode = msgspec.json.Encoder().encode


class Changes:
    """What a batch of events changed in one thread's state, noted while they are folded."""

    __slots__ = ("everything", "lengths", "run_ids", "message_ids", "moves", "base", "provider_threads")

    def __init__(self, before: ThreadState | None) -> None:
        self.everything = before is None
        self.provider_threads = False  # an event of the batch may have changed them
        self.base = before.seq if before is not None else 0  # the sequence the changes are on top of
        self.moves = before.moves if before is not None else 0
        self.lengths = {name: len(getattr(before, name)) for name in LISTS} if before is not None else {}
        self.run_ids: set[str] = set()
        self.message_ids: set[str] = set()

    def note(self, payload: ev.Payload) -> None:
        traits = payload.TRAITS  # what the event's fold may change (``core.envelope.Traits``)
        if traits.provider_threads:
            self.provider_threads = True
        # A steer carried over (to a superseding run or a restart attempt) changes messages it does not name.
        moved = getattr(payload, "supersedes_run_id", None) or getattr(payload, "message_ids", None)
        if not traits.local or moved:
            self.everything = True
            return
        if run_id := getattr(payload, "run_id", None):
            self.run_ids.add(run_id)
        if message_id := getattr(payload, "message_id", None):
            self.message_ids.add(message_id)

    def whole(self, state: ThreadState) -> bool:
        """Whether the write must be whole: an event changed what it does not name, or messages changed runs
        (``ThreadState.moves``: a steer carried over, whatever event did it)."""
        if state.moves != self.moves:
            self.everything = True
        return self.everything

    def appended(self, state: ThreadState, name: str) -> range:
        """Positions of the items of list ``name`` the batch added (all of them when everything changed)."""
        return range(0 if self.everything else self.lengths[name], len(getattr(state, name)))

    def indices(self, state: ThreadState, name: str, items: list[Any]) -> range | list[int]:
        if self.everything:
            return range(len(items))
        changed = set(range(self.lengths[name], len(items)))
        ids = self.run_ids if name == "runs" else self.message_ids if name == "messages" else None
        for item_id in ids or ():
            if (i := state.position(name, item_id)) is not None:
                changed.add(i)
        return sorted(changed)


_WRITTEN = "written_parts"  # in the state's __dict__: (seq, the small fields' JSON as written at that seq)


def fields(state: ThreadState, changes: Changes | None = None) -> list[bytes | str | int]:
    """Flat ``field, value, …`` for HSET: the view version, the small fields that changed, and the list elements
    that changed (each converted to its view here, so a write converts only what changed).

    A small field is compared with its JSON as this state's last write had it, when that write was at the
    changes' base: a field that grows with the thread (a provider thread's covered ordinals) was written again
    on every event. The store writes changes only on top of a document at their base (``store._WRITE``), and a
    document at one sequence is the same whoever wrote it, so what is left out is what Redis holds."""
    changes = changes or Changes(None)
    last: tuple[int, dict[str, bytes]] | None = state.__dict__.get(_WRITTEN)
    before = last[1] if last is not None and last[0] == changes.base and not changes.everything else {}
    now: dict[str, bytes] = {}
    out: list[bytes | str | int] = ["v", VIEW_VERSION]
    for name in FIELDS:
        if name in LISTS:
            value = getattr(state, name)
            out += [f"n:{name}", len(value)]
            for i in changes.indices(state, name, value):
                out += [f"l:{name}:{i}", of_state.encoded_item(name, value[i])]
        elif name == "provider_threads" and name in before and not changes.provider_threads:
            now[name] = before[name]  # as written at the base, and no event since could change it
        else:
            now[name] = part = of_state.encoded_part(state, name)
            if before.get(name) != part:
                out += [f"f:{name}", part]
    state.__dict__[_WRITTEN] = (state.seq, now)
    return out


def _join(parts: dict[str, bytes]) -> bytes:
    return b"{" + b",".join(b'"%s":%s' % (name.encode(), parts[name]) for name in FIELDS) + b"}"


def encode(state: ThreadState) -> bytes:
    """The whole document of ``state``: the JSON of its view."""
    return _encode(of_state.thread_view(state))


def assemble(stored: dict[bytes, bytes]) -> bytes | None:
    """The document from the hash HGETALL returned; None when the thread is not (wholly) projected or its
    parts are of another view version (then it is folded again from the log)."""
    if not stored or b"seq" not in stored or stored.get(b"v") != VERSION:
        return None
    parts = {}
    try:
        for name in FIELDS:
            if name in LISTS:
                n = int(stored[b"n:" + name.encode()])
                parts[name] = b"[" + b",".join(stored[b"l:%s:%d" % (name.encode(), i)] for i in range(n)) + b"]"
            else:
                parts[name] = stored[b"f:" + name.encode()]
    except KeyError:
        return None
    return _join(parts)
