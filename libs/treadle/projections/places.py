"""Where things are in a thread's stored lists, so a read by id fetches the items it returns and nothing else
(``parts``): a hash beside the document, written in the same Lua call and carrying the same ``seq`` and ``v``.

    r:<run id>         the run's position in ``runs``
    m:<message id>     the message's position in ``messages``
    rm:<run id>        the positions of the run's messages, in order ("3,4,7")
    ra:<run id>        the positions of the run's activity, in order
    c:<checkpoint id>  the checkpoint's position in ``checkpoints``
    co:<ordinal>       the positions of the checkpoints of that run ordinal, in order

Each place is what the state's own lookups answer (the newest run or message of an id, as the views'
``run``/``message`` find them; the first checkpoint of an id, as ``checkpoint_by_id``). A write of changed parts
adds the places of what was appended; a whole write replaces the hash (the store deletes it first), so a place
left by a message that moved (runs, or its place when a steer joins) never survives the write that moved it.
"""

from __future__ import annotations

from treadle.core.state import ThreadState

from ..views import VIEW_VERSION
from .document import Changes


def _joined(positions: list[int]) -> str:
    return ",".join(map(str, positions))


def _at(state: ThreadState, name: str, item_id: str) -> int:
    at = state.position(name, item_id)
    assert at is not None  # the id of an item of that list
    return at


def fields(state: ThreadState, changes: Changes | None = None) -> list[str | int]:
    """Flat ``field, value, …`` for HSET: the places of what a batch appended (an item never changes its id or
    ordinal) and the messages and activity of the runs it added them to. A message leaves its run or its place
    only when messages move (``ThreadState.moves``), and then the write is whole (``Changes.whole``)."""
    changes = changes or Changes(None)
    out: list[str | int] = []
    run_ids: set[str] = set()
    for i in changes.appended(state, "runs"):
        run_id = state.runs[i].id
        run_ids.add(run_id)
        out += [f"r:{run_id}", _at(state, "runs", run_id)]
    for i in changes.appended(state, "messages"):
        m = state.messages[i]
        out += [f"m:{m.id}", _at(state, "messages", m.id)]
        if m.run_id is not None:
            run_ids.add(m.run_id)
    for run_id in sorted(run_ids):
        if positions := state.run_message_positions(run_id):
            out += [f"rm:{run_id}", _joined(positions)]
    for run_id in sorted({state.activity[i].run_id for i in changes.appended(state, "activity")}):
        out += [f"ra:{run_id}", _joined(state.run_activity_positions(run_id))]
    ordinals: set[int] = set()
    for i in changes.appended(state, "checkpoints"):
        c = state.checkpoints[i]
        ordinals.add(c.ordinal)
        out += [f"c:{c.id}", state.checkpoint_positions("id", c.id)[0]]
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
