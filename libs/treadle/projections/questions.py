"""Answers stored whole, keyed by the question they answer, beside the thread's document in its hash and
written in the same call under the same sequence guard: a read of one is one HMGET of values that never
reflect two sequences, whatever the thread's length.

    q:run:<run id>      ``/v1/runs/{id}``: the run with its messages and checkpoint (``of_state.run_view``)
    q:change:<run id>   what ``/v1/runs/{id}/diff`` compares: its checkpoint and the one it started from
    q:latest_run        the id of the thread's newest run (a wait for "the latest run" reads it, then its q:run)
    q:queue             ``/v1/threads/{id}/queue``: the queued runs with their messages' text
    q:handoffs          every handoff of the thread (the lineage tree shows them with the thread's head)

A batch writes the answers it changed: those of the runs it named or appended and of the runs of the messages
and checkpoints it changed, the queue when the queue, the active run or a queued run changed, the handoffs
when one was appended. A write of everything (``Changes.whole``) writes every answer.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from treadle.core.state import ThreadState

from ..views import of_state
from .document import Changes

_encode = msgspec.json.Encoder().encode
RUN = "q:run:"
CHANGE = "q:change:"
LATEST_RUN = "q:latest_run"
QUEUE = "q:queue"
HANDOFFS = "q:handoffs"
_WRITTEN = "written_queue"  # in the state's __dict__: (seq, the queue and active run as last written)


def _changed_runs(state: ThreadState, changes: Changes) -> Iterable[str]:
    ids = {state.runs[i].id for i in changes.indices(state, "runs", state.runs)}
    ids |= {m.run_id for i in changes.indices(state, "messages", state.messages) if (m := state.messages[i]).run_id}
    ids |= {c.run_id for i in changes.appended(state, "checkpoints") if (c := state.checkpoints[i]).run_id}
    return sorted(ids)


def fields(state: ThreadState, changes: Changes | None = None) -> list[bytes | str]:
    """Flat ``field, value, …`` for HSET: the answers this batch changed."""
    everything = changes is None or changes.whole(state)
    out: list[bytes | str] = []
    for run_id in [r.id for r in state.runs] if everything or changes is None else _changed_runs(state, changes):
        if (view := of_state.run_view(state, run_id)) is not None:
            out += [RUN + run_id, _encode(view)]
        if (compared := of_state.run_checkpoints(state, run_id)) is not None:
            out += [CHANGE + run_id, _encode(compared)]
    if state.runs and (everything or changes is None or changes.appended(state, "runs")):
        out += [LATEST_RUN, state.runs[-1].id]
    queue = (tuple(state.queue), state.active_run_id)
    last: tuple[int, tuple] | None = state.__dict__.get(_WRITTEN)
    if (
        everything
        or changes is None
        or last is None
        or last[0] != changes.base
        or last[1] != queue
        or not changes.run_ids.isdisjoint(state.queue)
    ):
        out += [QUEUE, _encode(of_state.queue_view(state))]
    state.__dict__[_WRITTEN] = (state.seq, queue)
    if everything or changes is None or changes.appended(state, "handoffs"):
        out += [HANDOFFS, of_state.encoded_part(state, "handoffs")]
    return out


def stored(state: ThreadState) -> dict[bytes, bytes]:
    """Every answer of the thread as Redis should hold it (``treadle check`` compares the two)."""
    flat = fields(state)
    return {str(k).encode(): v if isinstance(v, bytes) else v.encode() for k, v in zip(flat[::2], flat[1::2])}
