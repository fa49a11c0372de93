"""L6.1/L6.5 without I/O: a fork is decided on its source (``forks.prepare``), its effects named
(``forks.decide``: the child's workspace materialised from the source point's checkpoint, then the child
thread created, fenced), and once they are done the source's record of its child returned (``forks.settle``).
A retried fork redoes nothing the first try did; a thread id owned by another command is ``thread_exists``."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import T0, apply, command
from treadle.core import events as ev
from treadle.core.errors import Conflict, NotFound
from treadle.core.lineage import forks
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.core.state import ThreadState

FENCE = ("treadle.evt.acme.creations", 41)


def _queued(run: str, ordinal: int) -> ev.RunQueued:
    return ev.RunQueued(
        run_id=run,
        ordinal=ordinal,
        message_id=f"m{ordinal}",
        text="go",
        root_node_id=f"n{ordinal}",
        attempt_id=f"a{ordinal}",
        mode="auto",
        disposition="started",
        dispatched=True,
        provider="scripted",
    )


def source(*more) -> ThreadState:
    """Thread th: run r1 completed with checkpoint ck1 (commit c1); run r2 still running."""
    checkpoint = ev.CheckpointCaptured(checkpoint_id="ck1", run_id="r1", ordinal=1, commit="c1")
    return apply(
        ThreadState(),
        [
            ev.ThreadCreated(thread_id="th", title="Source", workspace="threads/th", created_by="alice"),
            _queued("r1", 1),
            ev.RunStarted(run_id="r1", attempt_id="a1", session_id="ps_1", turn_id="t1"),
            ev.RunCompleted(run_id="r1", attempt_id="a1", checkpoint=checkpoint),
            _queued("r2", 2),
            ev.RunStarted(run_id="r2", attempt_id="a2", session_id="ps_1", turn_id="t2"),
            *more,
        ],
    )


def fork_of(run: str = "r1", id: str = "cmd_fork", **kw):
    return command(ForkThread(source=ForkSource(type="run", id=run), **kw), thread="th", id=id)


def test_L6_1_L6_5_a_fork_materialises_its_workspace_then_creates_the_child_then_the_source_records_it():
    state, cmd = source(), fork_of()
    fork = forks.prepare(state, cmd)
    child_id = forks.fork_thread_id(cmd)
    assert fork.plan.child_id == child_id and not fork.receipt.duplicate
    assert (fork.receipt.thread_id, fork.receipt.disposition, fork.receipt.seq) == (child_id, "forked", state.seq)

    materialize, create = forks.decide(state, cmd, fork, ThreadState(), FENCE).effects
    assert materialize == forks.MaterializeWorkspace(
        tenant="acme",
        source_thread="th",
        source_workspace="threads/th",
        commit="c1",
        thread=child_id,
        workspace=f"threads/{child_id}",
    )
    assert isinstance(create, forks.CreateChild)
    assert (create.tenant, create.thread, create.command_id, create.fence) == ("acme", child_id, cmd.id, FENCE)
    assert (create.seed, create.at, create.actor) == (f"{cmd.id}|fork-child", T0, "user:alice")
    created, forked = create.events
    assert isinstance(created, ev.ThreadCreated) and isinstance(forked, ev.ThreadForked)
    assert (created.thread_id, created.workspace, created.title) == (child_id, f"threads/{child_id}", "Fork of Source")
    assert (forked.parent_thread_id, forked.root_thread_id) == ("th", "th")
    assert (forked.source_point["run_id"], forked.source_point["commit"]) == ("r1", "c1")

    child = apply(ThreadState(), create.events, cmd.id)  # the effect done: the child's log holds them
    [recorded] = forks.settle(fork, child)
    assert recorded == ev.ChildForked(
        child_thread_id=child_id, transfer_id=forked.transfer_id, source_point=forked.source_point
    )
    apply(state, [recorded], cmd.id)
    again = forks.prepare(state, cmd)  # the source records its child: a retry is a duplicate, nothing to do
    assert again.receipt.duplicate and again.receipt.thread_id == child_id


def test_L6_1_a_fork_whose_child_a_first_try_created_does_it_again_nowhere():
    state, cmd = source(), fork_of()
    fork = forks.prepare(state, cmd)
    [_, create] = forks.decide(state, cmd, fork, ThreadState()).effects
    child = apply(ThreadState(), create.events, cmd.id)
    retried = forks.prepare(state, cmd)  # the source's record was lost (an append conflict): decided again
    assert retried.plan.child_id == fork.plan.child_id and retried.plan.point == fork.plan.point
    assert forks.decide(state, cmd, retried, child).effects == []  # no second workspace, no second child
    assert [type(e) for e in forks.settle(retried, child)] == [ev.ChildForked]


def test_L6_1_a_child_id_owned_by_another_command_is_thread_exists():
    state, cmd = source(), fork_of()
    fork = forks.prepare(state, cmd)
    [_, create] = forks.decide(state, cmd, fork, ThreadState()).effects
    someone_else = apply(ThreadState(), create.events, "cmd_other")
    with pytest.raises(Conflict) as exists:
        forks.settle(fork, someone_else)
    assert exists.value.code == "thread_exists" and fork.plan.child_id in exists.value.message
    with pytest.raises(Conflict):
        forks.settle(fork, ThreadState())  # still no child after the effects: never recorded on the source


def test_L6_5_a_workspace_that_cannot_be_made_refuses_the_fork_with_the_checkpoint_reason():
    refused = forks.workspace_unavailable("not_found", "commit c1 is gone")
    assert (refused.code, refused.status, refused.details) == ("workspace_unavailable", 409, {"reason": "not_found"})
    assert refused.message == "the fork's workspace could not be made from the checkpoint: commit c1 is gone"


def test_L6_1_unstable_or_unknown_sources_are_refused_before_any_effect():
    state = source()
    with pytest.raises(Conflict) as active:
        forks.prepare(state, fork_of("r2", on_active="refuse"))
    assert active.value.code == "unstable_source" and active.value.details["reason"] == "run_active"
    with pytest.raises(NotFound) as missing:
        forks.prepare(state, fork_of("r9"))
    assert missing.value.code == "source_not_found"
    substituted = forks.prepare(state, fork_of("r2", id="cmd_latest"))  # latest completed checkpoint instead
    assert substituted.plan.point["run_id"] == "r1" and substituted.plan.point["substituted_for"] == "r2"


def test_L6_1_the_fork_id_is_derived_from_the_command_so_a_retry_names_the_same_thread():
    assert forks.fork_thread_id(fork_of(id="cmd_a")) == forks.fork_thread_id(fork_of(id="cmd_a"))
    assert forks.fork_thread_id(fork_of(id="cmd_a")) != forks.fork_thread_id(fork_of(id="cmd_b"))
