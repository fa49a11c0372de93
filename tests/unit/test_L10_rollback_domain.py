"""Rollback decisions and their fold (L10.5, L10.6) and the retention policy, pure."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import apply, command, new_thread, run_command, send
from treadle.checkpoints.retention import RefInfo, refs_to_prune
from treadle.core import events as ev
from treadle.core.errors import BadRequest, Conflict
from treadle.core.rollback import decide as rollback
from treadle.core.rollback.commands import RollbackNode, RollbackThread


def finished_runs(n: int):
    """A thread with runs 1..n completed, each with its root checkpoint, and the baseline 0."""
    state = new_thread()
    apply(
        state,
        [
            ev.CheckpointCaptured(
                checkpoint_id="ckpt_b0", ordinal=0, kind="baseline", status="baseline", commit="0" * 40, tree="f" * 40
            )
        ],
    )
    for i in range(1, n + 1):
        events, _ = send(state, f"run {i}")
        run = events[0]
        checkpoint = ev.CheckpointCaptured(
            checkpoint_id=f"ckpt_{i}", run_id=run.run_id, ordinal=i, commit=str(i) * 40, tree="e" * 40
        )
        apply(state, [ev.RunCompleted(run_id=run.run_id, attempt_id=run.attempt_id, checkpoint=checkpoint)])
    return state


def rollback_cmd(state, **kw):
    return command(RollbackThread(**kw), thread=state.thread.id)


def test_L10_5_rollback_starts_with_the_target_and_what_it_makes_obsolete():
    state = finished_runs(3)
    events, receipt = run_command(state, rollback_cmd(state, to_run_ordinal=1))
    [started] = events
    assert isinstance(started, ev.RollbackStarted) and receipt.rollback_id == started.rollback_id
    assert (started.checkpoint_id, started.commit) == ("ckpt_1", "1" * 40)
    assert started.rolled_back_run_ids == [r.id for r in state.runs[1:]]
    assert started.stale_checkpoint_ids == ["ckpt_2", "ckpt_3"]
    assert rollback.pending(state) is not None
    # Nothing is marked until the files are restored.
    assert [r.status for r in state.runs] == ["completed"] * 3


def test_L10_5_completed_rollback_marks_later_runs_rolled_back_and_the_provider_divergent():
    state = finished_runs(3)
    events, _ = run_command(state, rollback_cmd(state, to_run_ordinal=1))
    apply(state, [ev.RollbackCompleted(rollback_id=events[0].rollback_id, undo_ref="refs/x", undo_commit="a" * 40)])
    assert [r.status for r in state.runs] == ["completed", "rolled_back", "rolled_back"]
    assert [c.ordinal for c in state.checkpoints if c.stale] == [2, 3]
    assert state.checkpoint(3) is None and state.checkpoint(1).id == "ckpt_1"
    assert rollback.pending(state) is None and state.rollbacks[0].status == "completed"


def test_L10_5_a_message_sent_during_a_rollback_is_queued_behind_it():
    state = finished_runs(1)
    run_command(state, rollback_cmd(state, to_run_ordinal=0))
    events, receipt = send(state, "after")
    assert receipt.disposition == "queued" and not events[0].dispatched


def test_L10_5_rollback_is_refused_while_a_run_is_active_and_for_bad_ordinals():
    state = finished_runs(1)
    send(state, "busy")
    with pytest.raises(Conflict) as active:
        run_command(state, rollback_cmd(state, to_run_ordinal=1))
    assert active.value.code == "run_active"
    with pytest.raises(BadRequest):
        run_command(state, rollback_cmd(state, to_run_ordinal=5))
    assert state.rollbacks == []


def test_L10_5_asked_to_interrupt_first_the_rollback_waits_for_the_interrupted_run():
    state = finished_runs(1)
    _, busy = send(state, "busy")
    events, _ = run_command(state, rollback_cmd(state, to_run_ordinal=1, interrupt_active=True))
    assert [type(e) for e in events] == [ev.RollbackStarted, ev.InterruptRequested]
    pending = rollback.pending(state)
    assert pending.after_run_id == busy.run_id and rollback.waiting(state, pending)
    run = state.run(busy.run_id)
    apply(state, [ev.RunInterrupted(run_id=run.id, attempt_id=run.attempt.id)])
    assert not rollback.waiting(state, pending) and pending.rolled_back_run_ids == [busy.run_id]


def test_L10_5_a_retried_rollback_command_is_a_duplicate():
    state = finished_runs(2)
    cmd = rollback_cmd(state, to_run_ordinal=1)
    first, receipt = run_command(state, cmd)
    again, duplicate = run_command(state, cmd)
    assert again == [] and duplicate.duplicate and duplicate.rollback_id == receipt.rollback_id


def test_L10_6_node_rollback_needs_a_checkpoint_of_that_node():
    state = finished_runs(1)
    run = state.runs[0]
    apply(
        state,
        [
            ev.NodeStarted(node_id="node_sub", run_id=run.id, attempt_id=run.attempt.id, kind="subagent"),
            ev.CheckpointCaptured(
                checkpoint_id="ckpt_c0",
                run_id=run.id,
                scope="root/node_sub",
                ordinal=0,
                kind="baseline",
                node_id="node_sub",
                commit="c" * 40,
                tree="d" * 40,
            ),
        ],
    )
    with pytest.raises(Exception) as wrong:
        run_command(state, command(RollbackNode(node_id="node_sub", checkpoint_id="ckpt_1"), thread=state.thread.id))
    assert wrong.value.code == "checkpoint_not_found"
    events, _ = run_command(
        state, command(RollbackNode(node_id="node_sub", checkpoint_id="ckpt_c0"), thread=state.thread.id)
    )
    assert events[0].kind == "node" and events[0].touches_parent_workspace is True


def test_retention_never_prunes_the_latest_and_leaves_active_threads_alone():
    refs = [RefInfo(f"refs/treadle/checkpoints/thr_old/root/{n}", "c" * 40, mtime=100 + n) for n in range(5)]
    refs += [RefInfo("refs/treadle/checkpoints/thr_old/undo/rbk_1", "c" * 40, mtime=101.5)]
    refs += [RefInfo(f"refs/treadle/checkpoints/thr_new/root/{n}", "c" * 40, mtime=10_000 + n) for n in range(5)]
    doomed = refs_to_prune(refs, now=10_010, idle_seconds=1000, keep_latest=2)
    assert [r.name for r in doomed] == [f"refs/treadle/checkpoints/thr_old/root/{n}" for n in range(3)] + [
        "refs/treadle/checkpoints/thr_old/undo/rbk_1"
    ]
    with pytest.raises(ValueError):
        refs_to_prune(refs, now=0, idle_seconds=0, keep_latest=0)


def test_L10_4_a_run_whose_provider_was_lost_for_good_gets_a_missing_checkpoint_summary():
    from tests.unit.domain_helpers import ctx
    from treadle.core.providers.model import ProviderCapabilities
    from treadle.core.run import supervision as sv

    state = finished_runs(0)
    events, _ = send(state, "doomed")
    run = state.run(events[0].run_id)
    for n in range(sv.MAX_RECOVERY_ATTEMPTS):
        apply(
            state,
            [
                ev.ProviderAttached(
                    session_id=f"ps_{n}",
                    provider="scripted",
                    host_id="h",
                    boot_id="b",
                    provider_thread_id="pth_1",
                    native_ref="n",
                    capabilities=ProviderCapabilities(),
                ),
                ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id=f"ps_{n}", turn_id=f"turn_{n}"),
            ],
        )
        lost = sv.session_stopped(state, f"ps_{n}", "host gone", ctx(f"s{n}")).events
        apply(state, lost)
    [failed] = [e for e in lost if isinstance(e, ev.RunFailed)]
    assert failed.checkpoint is not None and failed.checkpoint.status == "missing" and failed.checkpoint.commit is None
    assert state.run(run.id).status == "failed" and state.checkpoint(run.ordinal).status == "missing"
