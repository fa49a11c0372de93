"""Answers stored whole, keyed by the question they answer, beside the thread's document in its hash and
written in the same call under the same sequence guard: a read of one is one HMGET of a value that never
reflects two sequences, whatever the thread's length.

    q:run:<run id>   ``/v1/runs/{id}``: the run with its messages and checkpoint (``views.of_state.run_view``)
    q:latest_run     the id of the thread's newest run (what a wait for "the latest run" reads, then its q:run)

A batch writes the answers of the runs it changed: the runs it named or appended, the runs of the messages
and checkpoints it changed; a write of everything (``Changes.whole``) writes every run's.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from treadle.core.state import ThreadState

from ..views import of_state
from .document import Changes

_encode = msgspec.json.Encoder().encode
RUN = "q:run:"
LATEST_RUN = "q:latest_run"


def _changed_runs(state: ThreadState, changes: Changes | None) -> Iterable[str]:
    if changes is None or changes.whole(state):
        return [r.id for r in state.runs]
    ids = {state.runs[i].id for i in changes.indices(state, "runs", state.runs)}
    ids |= {m.run_id for i in changes.indices(state, "messages", state.messages) if (m := state.messages[i]).run_id}
    ids |= {c.run_id for i in changes.appended(state, "checkpoints") if (c := state.checkpoints[i]).run_id}
    return sorted(ids)


def fields(state: ThreadState, changes: Changes | None = None) -> list[bytes | str]:
    """Flat ``field, value, …`` for HSET: the answers this batch changed."""
    out: list[bytes | str] = []
    for run_id in _changed_runs(state, changes):
        if (view := of_state.run_view(state, run_id)) is not None:
            out += [RUN + run_id, _encode(view)]
    if state.runs and (changes is None or changes.whole(state) or changes.appended(state, "runs")):
        out += [LATEST_RUN, state.runs[-1].id]
    return out


def stored(state: ThreadState) -> dict[bytes, bytes]:
    """Every answer of the thread as Redis should hold it (``treadle check`` compares the two)."""
    flat = fields(state)
    return {str(k).encode(): v if isinstance(v, bytes) else v.encode() for k, v in zip(flat[::2], flat[1::2])}
