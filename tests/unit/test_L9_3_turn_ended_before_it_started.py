"""L9.3/L2.5 in the pure fold: a turn whose first report is its end (the provider refused or failed it before
it started) settles its pending attempt instead of being ignored (the run then waited for ever); the same end
from a session the attempt is not on is still a stale report."""

from __future__ import annotations

from tests.unit.domain_helpers import T0, apply, ctx, new_thread, send
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv


def handed_over():
    state = new_thread()
    send(state, "go")
    attached = ev.ProviderAttached(
        session_id="ps_1",
        provider="scripted",
        host_id="h",
        boot_id="b",
        provider_thread_id="pth_1",
        native_ref="n",
        capabilities=ProviderCapabilities(),
    )
    apply(state, [attached])
    return state


def ended(state, body: pe.TurnCompleted, session: str = "ps_1", index: int = 1) -> pe.ProviderEvent:
    run = state.active_run
    return pe.ProviderEvent(
        id=f"evt_{session}_{index}",
        tenant="acme",
        thread=state.thread.id,
        session_id=session,
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=index,
        at=T0,
        body=body,
    )


def test_L9_3_a_failed_turn_that_never_started_is_tried_again_in_a_new_attempt():
    state = handed_over()
    first = state.active_run.attempt.id
    report = ended(state, pe.TurnCompleted(status="failed", error="busy"))
    reaction = sv.react(state, report, ctx("a"))
    assert reaction.finalize is None
    apply(state, reaction.events)
    run = state.active_run
    assert [(a.id == first, a.status, a.reason) for a in run.attempts] == [
        (True, "failed", "initial"),
        (False, "pending", "retry"),
    ]
    assert sv.pending_attempt(state) is run  # handed over again
    # the same report again (a redelivery) is of an attempt that is no longer current
    assert sv.react(state, report, ctx("a")) is sv.IGNORE


def test_L2_5_the_run_fails_through_the_barrier_once_it_has_had_its_attempts():
    state = handed_over()
    for i in range(sv.MAX_RECOVERY_ATTEMPTS - 1):
        apply(state, sv.react(state, ended(state, pe.TurnCompleted(status="failed")), ctx(f"r{i}")).events)
    reaction = sv.react(state, ended(state, pe.TurnCompleted(status="failed", error="busy")), ctx("last"))
    assert reaction.events == [] and reaction.run_id == state.active_run.id
    assert reaction.finalize is not None and reaction.finalize.status == "failed" and "busy" in reaction.finalize.error


def test_L8_2_an_interrupted_end_before_the_start_ends_the_run_as_reported():
    state = handed_over()
    reaction = sv.react(state, ended(state, pe.TurnCompleted(status="interrupted")), ctx("i"))
    assert reaction.finalize is not None and reaction.finalize.status == "interrupted"


def test_L9_3_an_end_from_another_session_or_after_the_start_is_not_taken_for_a_refusal():
    state = handed_over()
    assert sv.react(state, ended(state, pe.TurnCompleted(status="failed"), session="ps_old"), ctx("o")) is sv.IGNORE
    assert sv.react(state, ended(state, pe.TurnCompleted(status="failed"), index=3), ctx("w")).wait
