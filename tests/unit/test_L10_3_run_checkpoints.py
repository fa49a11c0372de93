"""Issue 24: a run's checkpoint summed up its child scopes by scanning every checkpoint of the thread, so each
capture cost the thread's length. It now reads the run's checkpoints by an index; after every event of a recorded
log (child scopes, rollbacks that mark checkpoints stale) they are the plain filter, and so are the summaries."""

from __future__ import annotations

import json
from pathlib import Path

from treadle.core.checkpoints import child_scopes
from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_L10_3_a_runs_checkpoints_by_index_are_the_plain_filter_after_every_event():
    states: dict[str, ThreadState] = {}
    for line in (FIXTURES / "replay-events.jsonl").read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        state = evolve(states.setdefault(e.thread, ThreadState()), e)
        for run in state.runs:
            plain = [c for c in state.checkpoints if c.run_id == run.id]
            assert state.run_checkpoints(run.id) == plain
            assert child_scopes.summaries(plain, run.id) == child_scopes.summaries(state.checkpoints, run.id)
    assert any(c.scope != child_scopes.ROOT for s in states.values() for c in s.checkpoints)
