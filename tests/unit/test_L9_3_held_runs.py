"""L9.3: a dispatched run no provider host can take waits visibly (``queued`` with its reason), stays
interruptible, and is an ordinary running run once its turn starts."""

from __future__ import annotations

from tests.unit.domain_helpers import T0, apply, command, ctx, new_thread, run_command, send
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv
from treadle.core.run.commands import InterruptRun


def _held(reason: str = "capacity"):
    state = new_thread()
    send(state)
    run = state.active_run
    apply(state, [ev.RunHeld(run_id=run.id, attempt_id=run.attempt.id, reason=reason)])
    return state, run


def test_L9_3_a_held_run_is_queued_with_its_reason_and_still_the_active_run():
    state, run = _held("tenant_quota")
    assert (run.status, run.waiting_reason) == ("queued", "tenant_quota")
    assert state.active_run_id == run.id and run.id not in state.queue
    assert sv.pending_attempt(state) is run  # the supervisor still owes it a provider
    assert state.activity[-1].kind == "run.held" and state.activity[-1].run_id == run.id


def test_L9_3_a_held_run_starts_as_any_other_once_its_turn_starts():
    state, run = _held()
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            )
        ],
    )
    started = pe.ProviderEvent(
        id="evt_p",
        tenant="acme",
        thread=state.thread.id,
        session_id="ps_1",
        provider_thread_id="pth_1",
        run_id=run.id,
        attempt_id=run.attempt.id,
        at=T0,
        body=pe.TurnStarted(native_turn_ref="t1"),
    )
    apply(state, sv.react(state, started, ctx()).events)
    assert (run.status, run.waiting_reason) == ("running", None)


def test_L9_3_a_hold_of_an_attempt_that_already_runs_changes_nothing():
    state, run = _held()
    run.attempt.status = "running"
    run.status = "running"
    apply(state, [ev.RunHeld(run_id=run.id, attempt_id=run.attempt.id, reason="capacity")])
    assert run.status == "running"


def test_L8_a_held_run_can_be_interrupted_and_ends_before_any_provider_saw_it():
    state, run = _held()
    events, receipt = run_command(state, command(InterruptRun(run_id=run.id), thread=state.thread.id))
    assert [type(e) for e in events] == [ev.InterruptRequested] and receipt.disposition == "interrupting"
    assert run.attempt.interrupt == "requested"
