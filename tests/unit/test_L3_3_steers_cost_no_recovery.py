"""L3.3 with L9.3: an attempt a steer restarted is the user's doing, not a loss. The recovery budget counts only
the attempts the provider lost or did not start, so a run steered twice still gets its recovery when its
provider is then lost (it failed: "provider lost 3 times" after one loss)."""

from __future__ import annotations

from tests.unit.domain_helpers import apply, ctx
from tests.unit.test_L9_3_turn_ended_before_it_started import ended, handed_over
from treadle.core import provider_events as pe
from treadle.core.events import RunFailed
from treadle.core.run import supervision as sv
from treadle.core.run.model import Attempt


def with_earlier(state, *statuses: tuple[str, str]):
    """The active run playing its turn, with earlier attempts ended as ``(status, reason)`` before this one."""
    apply(state, sv.react(state, ended(state, pe.TurnStarted(native_turn_ref="t")), ctx("t")).events)
    run = state.active_run
    assert run.attempt.status == "running"
    earlier = [
        Attempt(id=f"att_old{i}", run_id=run.id, number=i, reason=reason, status=status, root_node_id=f"node_old{i}")
        for i, (status, reason) in enumerate(statuses)
    ]
    run.attempts[:0] = earlier
    return run


def test_L3_3_a_run_steered_twice_is_recovered_when_its_provider_is_then_lost():
    state = handed_over()
    run = with_earlier(state, ("interrupted", "initial"), ("interrupted", "steering_restart"))
    assert sv.recovery_spent(run) == 1
    reaction = sv.session_stopped(state, "ps_1", "host_restarted", ctx("s"))
    assert not any(isinstance(e, RunFailed) for e in reaction.events)
    apply(state, reaction.events)
    assert [a.status for a in state.active_run.attempts][-2:] == ["lost", "pending"]


def test_L9_3_the_third_loss_fails_the_run_whatever_steers_came_between():
    state = handed_over()
    run = with_earlier(state, ("lost", "initial"), ("interrupted", "provider_recovery"), ("failed", "retry"))
    assert sv.recovery_spent(run) == 3
    reaction = sv.session_stopped(state, "ps_1", "host_restarted", ctx("s"))
    [failed] = [e for e in reaction.events if isinstance(e, RunFailed)]
    assert failed.error == "provider lost 3 times: host_restarted"
