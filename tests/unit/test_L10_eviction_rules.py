"""Issue 35, L10: which threads' workspaces may leave their node (core/eviction.py, pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from treadle.core.checkpoints.model import Checkpoint
from treadle.core.eviction import refusal
from treadle.core.state import ThreadState
from treadle.core.thread.model import Thread

NOW = datetime(2026, 1, 2, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)


def _idle(**changes) -> ThreadState:
    thread = Thread(
        id="thr_a", tenant="acme", workspace="threads/thr_a", created_by="u", created_at=LONG_AGO,
        command_id="cmd_1", volume="node-1",
    )  # fmt: skip
    point = Checkpoint(id="ckpt_1", ordinal=0, commit="a" * 40, tree="b" * 40, created_at=LONG_AGO)
    state = ThreadState(thread=thread, checkpoints=[point], last_activity_at=LONG_AGO)
    for name, value in changes.items():
        if name in {"workspace", "volume"}:
            state.thread = msgspec.structs.replace(thread, **{name: value})
        else:
            setattr(state, name, value)
    return state


def test_L10_an_idle_thread_with_a_checkpoint_on_its_home_may_be_evicted():
    assert refusal(_idle(), "node-1", NOW, 3600) is None


def test_L10_a_thread_in_use_elsewhere_or_without_a_checkpoint_keeps_its_workspace():
    assert refusal(_idle(), "node-2", NOW, 3600) == "its home is node-1"
    assert refusal(_idle(workspace="shared/repo"), "node-1", NOW, 3600) == "a named workspace (it may be shared)"
    assert refusal(_idle(), "node-1", NOW, 0) == "eviction is off"
    assert refusal(_idle(active_run_id="run_1"), "node-1", NOW, 3600) == "a run is playing or queued"
    assert refusal(_idle(queue=["run_2"]), "node-1", NOW, 3600) == "a run is playing or queued"
    assert refusal(_idle(last_activity_at=NOW - timedelta(minutes=5)), "node-1", NOW, 3600) == "active recently"
    assert refusal(_idle(checkpoints=[]), "node-1", NOW, 3600) == "its last checkpoint failed"
    failed = Checkpoint(id="ckpt_2", ordinal=1, status="error", created_at=LONG_AGO)
    state = _idle()
    state.checkpoints.append(failed)
    assert refusal(state, "node-1", NOW, 3600) == "its last checkpoint failed"
    assert refusal(ThreadState(), "node-1", NOW, 3600) == "no such thread"
