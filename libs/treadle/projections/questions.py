"""Answers keyed by the question they answer, in the hash of the thread's places (``places``: it carries the
document's seq and v, and the whole document read does not fetch it), written in the same call as the
document under the same sequence guard, so a read of one is one call to Redis (``parts``) that reflects one
sequence, whatever the thread's length:

    q:run:<run id>   where ``/v1/runs/{id}`` and its diff find their items: "<run>;<its messages>;<its
                     checkpoint>;<the checkpoint its diff starts from>", positions in ``runs``, ``messages`` and
                     ``checkpoints`` ("12;24,25;12;11"; a checkpoint not there is empty)
    q:latest_run     the id of the thread's newest run (what a wait for "the latest run" reads)
    q:queue          ``/v1/threads/{id}/queue``: the queued runs with their messages' text, stored whole

A run's answer points at the items instead of holding them: a copy of every run, its messages and
checkpoints would double what Redis holds for a thread. A batch writes the answers it changed: those of the
runs it named or appended and of the runs of the messages and checkpoints it changed, the queue when the
queue, the active run or a queued run changed. A write of everything (``Changes.whole``) writes every answer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.state import ThreadState

from ..views import of_state
from ..views.runs import QueueView
from ..views.thread import ThreadView, queue_view
from .changes import Changes

_encode = msgspec.json.Encoder().encode
RUN = "q:run:"
LATEST_RUN = "q:latest_run"
QUEUE = "q:queue"
_WRITTEN = "written_queue"  # in the state's __dict__: (seq, the queue and active run as last written)


def _changed_runs(state: ThreadState, changes: Changes) -> set[str]:
    """The runs whose answer the batch may have changed: the runs it appended or rewrote, those of the messages and
    checkpoints it appended or rewrote, and those messages left."""
    ids = {state.runs[i].id for i in changes.indices(state, "runs", state.runs)}
    ids |= {m.run_id for i in changes.indices(state, "messages", state.messages) if (m := state.messages[i]).run_id}
    checkpoints = changes.indices(state, "checkpoints", state.checkpoints)
    ids |= {c.run_id for i in checkpoints if (c := state.checkpoints[i]).run_id}
    return ids | changes.left


def run_places(state: ThreadState, run_id: str) -> str | None:
    """A run's answer: where its item, its messages, its checkpoint (``views.thread.run_view``: the first of
    its id) and the root checkpoint of the ordinal before it, captured before its own, with a commit
    (``views.thread.run_change``) are; None: no such run."""
    at = state.position("runs", run_id)
    if at is None:
        return None
    run = state.runs[at]
    messages = ",".join(map(str, state.run_message_positions(run_id)))
    found = state.checkpoint_positions("id", run.checkpoint_id) if run.checkpoint_id else []
    new = found[0] if found else None
    old = None
    if new is not None and state.checkpoints[new].commit:
        earlier = (i for i in reversed(state.checkpoint_positions("ordinal", run.ordinal - 1)) if i < new)
        old = next((i for i in earlier if (c := state.checkpoints[i]).scope == "root" and c.commit), None)
    return f"{at};{messages};{'' if new is None else new};{'' if old is None else old}"


def _queue(state: ThreadState) -> QueueView:
    """``/v1/threads/{id}/queue``, shaped by the views' own function over the queued runs and their messages."""
    runs = [r for run_id in state.queue if (r := state.run(run_id)) is not None]
    messages = [m for r in runs if (m := state.message(r.message_id)) is not None]
    return queue_view(
        ThreadView(
            thread=of_state.part(state, "thread"),
            queue=list(state.queue),
            active_run_id=state.active_run_id,
            runs=[of_state.item("runs", r) for r in runs],
            messages=[of_state.item("messages", m) for m in messages],
        )
    )


def fields(state: ThreadState, changes: Changes | None = None) -> list[bytes | str]:
    """Flat ``field, value, …`` for HSET: the answers this batch changed."""
    everything = changes is None or changes.everything
    out: list[bytes | str] = []
    changed: set[str] = set() if everything or changes is None else _changed_runs(state, changes)
    for run_id in [r.id for r in state.runs] if everything or changes is None else sorted(changed):
        if (where := run_places(state, run_id)) is not None:
            out += [RUN + run_id, where]
    if state.runs and (everything or changes is None or changes.appended(state, "runs")):
        out += [LATEST_RUN, state.runs[-1].id]
    queue = (tuple(state.queue), state.active_run_id)
    last: tuple[int, tuple[Any, ...]] | None = state.__dict__.get(_WRITTEN)
    if (
        everything
        or changes is None
        or last is None
        or last[0] != changes.base
        or last[1] != queue
        or not changed.isdisjoint(state.queue)  # a queued run or its message rewritten (an edit)
    ):
        out += [QUEUE, _encode(_queue(state))]
    state.__dict__[_WRITTEN] = (state.seq, queue)
    return out


def stored(state: ThreadState) -> dict[bytes, bytes]:
    """Every answer of the thread as Redis should hold it (``treadle check`` compares the two)."""
    flat = fields(state)
    return {str(k).encode(): v if isinstance(v, bytes) else v.encode() for k, v in zip(flat[::2], flat[1::2])}
