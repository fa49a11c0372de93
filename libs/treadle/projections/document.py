"""A thread's read model stored as parts, so a write costs what changed, not the thread's length.

The document is the JSON of the folded ``ThreadState``. In Redis it is a hash: one field per small
top-level field (``f:<name>``) and one per element of the long lists (``l:<name>:<i>``, with the length in
``n:<name>``). Reassembling the parts gives exactly the bytes msgspec gives for the whole state, so a
projection can be compared byte for byte with a replay of the log.
"""

from __future__ import annotations

import msgspec

from ..domain import events as ev
from ..domain.thread import ThreadState

FIELDS: tuple[str, ...] = ThreadState.__struct_fields__
LISTS = ("messages", "runs", "checkpoints", "activity", "handoffs")  # the parts that grow with the thread
_encode = msgspec.json.Encoder().encode

# Events whose fold changes only: the small fields, appended list elements, the run named by the event's
# `run_id` and the message named by its `message_id`. Any other event makes the next write a full one.
LOCAL_EVENTS = frozenset({
    ev.ThreadCreated, ev.MessageCreated, ev.MessageDelta, ev.MessageCompleted, ev.RunQueued, ev.RunDispatched, ev.RunHeld,
    ev.RunStarted, ev.RunCompleted, ev.RunFailed, ev.RunInterrupted, ev.RunCancelled, ev.AttemptStarted,
    ev.AttemptEnded, ev.NodeStarted, ev.NodeCompleted, ev.ProviderAttached, ev.ProviderStopped, ev.RequestOpened,
    ev.RequestResolved, ev.PlanUpdated, ev.CheckpointCaptured, ev.RunWarning, ev.RunSteered, ev.SteerDelivered,
    ev.InterruptRequested, ev.InterruptSent, ev.QueueReordered, ev.PlanImplemented,
    ev.ThreadForked, ev.ChildForked, ev.HandoffCreated, ev.ContextResolved, ev.TransferFailed,
})


class Changes:
    """What a batch of events changed in one thread's state, noted while they are folded."""

    __slots__ = ("everything", "lengths", "run_ids", "message_ids")

    def __init__(self, before: ThreadState | None) -> None:
        self.everything = before is None
        self.lengths = {name: len(getattr(before, name)) for name in LISTS} if before is not None else {}
        self.run_ids: set[str] = set()
        self.message_ids: set[str] = set()

    def note(self, payload: ev.Payload) -> None:
        # A steer carried over (to a superseding run or a restart attempt) changes messages it does not name.
        moved = getattr(payload, "supersedes_run_id", None) or getattr(payload, "message_ids", None)
        if type(payload) not in LOCAL_EVENTS or moved:
            self.everything = True
            return
        if run_id := getattr(payload, "run_id", None):
            self.run_ids.add(run_id)
        if message_id := getattr(payload, "message_id", None):
            self.message_ids.add(message_id)

    def indices(self, name: str, items: list) -> range | list[int]:
        if self.everything:
            return range(len(items))
        changed = set(range(self.lengths[name], len(items)))
        ids = self.run_ids if name == "runs" else self.message_ids if name == "messages" else None
        if ids:
            changed.update(i for i, item in enumerate(items) if item.id in ids)
        return sorted(changed)


def fields(state: ThreadState, changes: Changes | None = None) -> list[bytes | str | int]:
    """Flat ``field, value, …`` for HSET: every small field, and the list elements that changed."""
    changes = changes or Changes(None)
    out: list[bytes | str | int] = []
    for name in FIELDS:
        value = getattr(state, name)
        if name in LISTS:
            out += [f"n:{name}", len(value)]
            for i in changes.indices(name, value):
                out += [f"l:{name}:{i}", _encode(value[i])]
        else:
            out += [f"f:{name}", _encode(value)]
    return out


def _join(parts: dict[str, bytes]) -> bytes:
    return b"{" + b",".join(b'"%s":%s' % (name.encode(), parts[name]) for name in FIELDS) + b"}"


def encode(state: ThreadState) -> bytes:
    parts = {}
    for name in FIELDS:
        value = getattr(state, name)
        parts[name] = b"[" + b",".join(_encode(x) for x in value) + b"]" if name in LISTS else _encode(value)
    return _join(parts)


def assemble(stored: dict[bytes, bytes]) -> bytes | None:
    """The document from the hash HGETALL returned; None when the thread is not (wholly) projected."""
    if not stored or b"seq" not in stored:
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
