"""Issue 21, part 3 without I/O: a delegation decided on its parent (``delegation.plan``: only from the active
run, modes only narrowing, bounds), the parent's app-owned node folded and left open by the parent's own end
(an attempt lost, a turn that finished), finalised once by ``delegation.finish`` (a second finish records
nothing), and the async tasks an interrupted run cascades to."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import apply, command, new_thread, send
from treadle.core import delegation
from treadle.core import events as ev
from treadle.core.errors import BadRequest, Conflict, Forbidden, QuotaExceeded
from treadle.core.lineage.commands import DelegateTask, ForkSource, ForkThread
from treadle.core.lineage.decide import source_point
from treadle.core.run.supervision import _close_children
from treadle.core.state import ThreadState
from treadle.providers.registry import CATALOGUE

BOUNDS = delegation.DelegationBounds()


def _parent(**kw) -> tuple[ThreadState, str]:
    state = new_thread(runtime_mode="auto_accept_edits", **kw)
    _, sent = send(state, "orchestrate")
    run = state.run(sent.run_id)
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id="ps1", turn_id="t1")])
    return state, run.id


def _delegate(state: ThreadState, run_id: str, **kw) -> tuple[delegation.Plan, ThreadState]:
    cmd = command(DelegateTask(parent_run_id=run_id, task="count the files", **kw), thread=state.thread.id)
    plan = delegation.plan(state, cmd, BOUNDS, running_children=0, providers=CATALOGUE)
    child = apply(ThreadState(), plan.create, cmd.id)
    return plan, child


def test_a_task_is_planned_from_the_active_run_with_only_its_task_and_role_and_narrowed_modes():
    state, run_id = _parent()
    plan, child = _delegate(state, run_id, role="You are terse.", runtime_mode="approval_required", mode="wait")
    assert plan.first_message.text == "You are terse.\n\ncount the files"
    assert child.thread.runtime_mode == "approval_required" and child.thread.parent_thread_id == state.thread.id
    assert child.lineage.relationship == "subagent"
    assert child.lineage.delegation == {
        "parent_run_id": run_id, "parent_node_id": plan.node_id, "depth": 1, "mode": "wait", "role": "You are terse.",
    }  # fmt: skip
    inherited, _ = _delegate(state, run_id)
    assert inherited.input["runtime_mode"] == "auto_accept_edits" and inherited.input["interaction_mode"] == "default"
    with pytest.raises(Forbidden) as wider:
        _delegate(state, run_id, runtime_mode="full_access")
    assert wider.value.code == "mode_not_allowed"
    for bad in ({"provider": "claude", "script": {"steps": []}}, {"provider": "nobody"}):
        with pytest.raises(BadRequest):  # before any child thread is made
            _delegate(state, run_id, **bad)


def test_a_planning_parent_only_delegates_planning_tasks_and_codex_children_plan_natively():
    assert delegation.narrowed_interaction("default", "plan") == "plan"
    assert delegation.narrowed_interaction("plan", None) == "plan"
    with pytest.raises(Forbidden):
        delegation.narrowed_interaction("plan", "default")
    state, run_id = _parent()
    plan, _ = _delegate(state, run_id, provider="codex", interaction_mode="plan")
    assert plan.first_message.script == {"collaboration_mode": "plan"}


def test_only_an_active_run_delegates_and_the_bounds_hold():
    state, run_id = _parent()
    with pytest.raises(Conflict) as unknown:
        _delegate(state, "run_nope")
    assert unknown.value.code == "parent_not_active"
    plan, child = _delegate(state, run_id)
    apply(state, [delegation.started(plan, "run_child")])
    deep = apply(child, [])
    deep_run = send(deep, "go")[1].run_id
    apply(deep, [ev.RunStarted(run_id=deep_run, attempt_id=deep.run(deep_run).attempt.id, session_id="s", turn_id="t")])
    cmd = command(DelegateTask(parent_run_id=deep_run, task="deeper"), thread=deep.thread.id)
    with pytest.raises(QuotaExceeded) as refused:
        delegation.plan(deep, cmd, delegation.DelegationBounds(max_depth=1), running_children=0, providers=CATALOGUE)
    assert refused.value.details["quota"] == "delegation_depth"
    cmd = command(DelegateTask(parent_run_id=run_id, task="again"), thread=state.thread.id)
    with pytest.raises(QuotaExceeded) as per_run:
        delegation.plan(
            state, cmd, delegation.DelegationBounds(max_children_per_run=1), running_children=0, providers=CATALOGUE
        )
    assert per_run.value.details["quota"] == "children_per_run"


def test_the_app_owned_node_outlives_its_parents_attempt_and_turn_and_is_finalised_once():
    state, run_id = _parent()
    plan, child = _delegate(state, run_id)
    apply(state, [delegation.started(plan, "run_child")])
    run = state.run(run_id)
    node = run.node(plan.node_id)
    assert (node.kind, node.owner, node.child_thread_id, node.status) == ("subagent", "app", child.thread.id, "running")
    assert _close_children(state, run) == []  # the parent's turn ending leaves it open
    apply(state, [ev.AttemptEnded(run_id=run_id, attempt_id=run.attempt.id, status="lost", reason="host_lost")])
    assert node.status == "running"  # so does its attempt being lost

    _, task = send(child, "count the files")
    task_run = child.run(task.run_id)
    apply(child, [ev.RunCompleted(run_id=task_run.id, attempt_id=task_run.attempt.id)])
    finished = delegation.finish(state, child, task_run)
    assert [type(e) for e in finished] == [ev.DelegationFinished]
    apply(state, finished)
    assert (node.status, node.output) == ("completed", "the delegated task ended completed")
    (transfer,) = state.transfers
    assert (transfer.type, transfer.source_thread_id, transfer.run_id) == ("delegation_result", child.thread.id, run_id)
    assert delegation.finish(state, child, task_run) == []  # recorded: a redelivered end records nothing
    apply(child, delegation.ended(child, task_run))
    assert delegation.ended(child, task_run) == []


def test_an_interrupted_run_cascades_to_its_running_async_tasks_only():
    state, run_id = _parent()
    plans = [_delegate(state, run_id, mode=m)[0] for m in ("async", "wait", "async")]
    apply(state, [delegation.started(p, f"run_{i}") for i, p in enumerate(plans)])
    run = state.run(run_id)
    apply(state, [ev.DelegationFinished(
        run_id=run_id, node_id=plans[2].node_id, child_thread_id=plans[2].child_id, child_run_id="run_2",
        transfer_id="xfer_2", status="completed", summary="done",
    )])  # fmt: skip
    assert delegation.cascade_targets(run) == [plans[0].child_id]


def test_L6_a_delegated_tasks_node_is_no_fork_point_its_thread_is():
    state, run_id = _parent()
    plan, child = _delegate(state, run_id)
    apply(state, [delegation.started(plan, "run_child")])
    with pytest.raises(Conflict) as refused:
        source_point(state, ForkThread(source=ForkSource(type="node", id=plan.node_id)))
    assert refused.value.code == "unstable_source"
    assert refused.value.details == {"reason": "delegated_task", "node_id": plan.node_id, "thread_id": plan.child_id}


def test_a_retry_whose_child_exists_records_it_even_if_its_run_ended_or_a_bound_was_reached_since():
    state, run_id = _parent()
    cmd = command(DelegateTask(parent_run_id=run_id, task="t"), thread=state.thread.id)
    first = delegation.plan(state, cmd, BOUNDS, running_children=0, providers=CATALOGUE)
    run = state.run(run_id)
    apply(state, [ev.RunCompleted(run_id=run_id, attempt_id=run.attempt.id)])
    full = delegation.DelegationBounds(max_running_children=1)
    with pytest.raises(Conflict):
        delegation.plan(state, cmd, full, running_children=1, providers=CATALOGUE)
    again = delegation.plan(state, cmd, full, running_children=1, providers=CATALOGUE, admitted=True)
    assert (again.child_id, again.node_id) == (first.child_id, first.node_id)
