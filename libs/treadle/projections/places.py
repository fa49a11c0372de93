"""Where the items of the thread's last runs are in its stored lists, so the read of its last runs
(``parts.recent``) fetches those items and nothing else: a hash beside the document, written in the same Lua
call and carrying the same ``seq`` and ``v``. The answers a read of one run, its diff or the queue follows
(``questions``) share the hash.

    rm:<run id>        the positions of the run's messages in ``messages``, in order ("3,4,7")
    ra:<run id>        the positions of the run's activity in ``activity``, in order
    co:<ordinal>       the positions of the checkpoints of that run ordinal in ``checkpoints``, in order

A write of changed parts writes the places of what it appended or rewrote (``changes``: a message that moved,
to another run or to another place when a steer joins, is rewritten, and so are its old run's places); a whole
write replaces the hash (the store deletes it first).
"""

from __future__ import annotations

from treadle.core.state import ThreadState

from ..views import VIEW_VERSION
from .changes import Changes


def _joined(positions: list[int]) -> str:
    return ",".join(map(str, positions))


def _written(state: ThreadState, changes: Changes, name: str) -> list[int]:
    """The items of list ``name`` the batch appended or its folds rewrote (moved, for messages)."""
    return [*changes.appended(state, name), *changes.touched(name)]


def fields(state: ThreadState, changes: Changes | None = None) -> list[str | int]:
    """Flat ``field, value, …`` for HSET: the places of the messages, activity and checkpoints a batch appended
    or rewrote, of the runs messages left (an item changes its run or place only when messages move:
    ``ThreadState.messages_moved``) and of the runs it added. A place left empty is written as "" (the store
    deletes it); a whole write leaves it out."""
    changes = changes or Changes(None)
    out: list[str | int] = []
    run_ids = {state.runs[i].id for i in changes.appended(state, "runs")} | changes.left
    for i in _written(state, changes, "messages"):
        if (run_id := state.messages[i].run_id) is not None:
            run_ids.add(run_id)
    for run_id in sorted(run_ids):
        if (positions := state.run_message_positions(run_id)) or not changes.everything:
            out += [f"rm:{run_id}", _joined(positions)]
    for run_id in sorted({state.activity[i].run_id for i in _written(state, changes, "activity")}):
        out += [f"ra:{run_id}", _joined(state.run_activity_positions(run_id))]
    ordinals = {state.checkpoints[i].ordinal for i in _written(state, changes, "checkpoints")}
    for ordinal in sorted(ordinals):
        out += [f"co:{ordinal}", _joined(state.checkpoint_positions("ordinal", ordinal))]
    return out


def stored(state: ThreadState) -> dict[bytes, bytes]:
    """The whole hash a thread's places should be, as Redis returns it (``treadle check`` compares the two)."""
    flat = ["seq", state.seq, "v", VIEW_VERSION, *fields(state)]
    return {str(k).encode(): str(v).encode() for k, v in zip(flat[::2], flat[1::2])}


def positions(raw: bytes | None) -> list[int]:
    """The positions of a stored ``rm:`` or ``co:`` place (none when the place is missing)."""
    return [int(p) for p in raw.split(b",")] if raw else []
