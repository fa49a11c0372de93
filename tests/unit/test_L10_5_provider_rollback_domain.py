"""Provider-native rollback (L10.5), pure: which provider thread drops how many turns, and what the thread
believes afterwards (coverage, divergence, the next run's starting context)."""

from __future__ import annotations

from tests.unit.domain_helpers import apply, command, ctx, new_thread, run_command, send
from treadle.core import events as ev
from treadle.core.lineage import start_context
from treadle.core.providers.capabilities import PROFILES
from treadle.core.rollback import decide as rollback
from treadle.core.rollback.commands import RollbackThread

NATIVE = PROFILES["native_rollback"]
WITHOUT = PROFILES["no_steering"]


def attach(state, session: str, pth: str, provider: str = "scripted", caps=NATIVE):
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id=session,
                provider=provider,
                host_id="host-1",
                boot_id="b",
                provider_thread_id=pth,
                native_ref=f"scripted-{pth}",
                capabilities=caps,
            )
        ],
    )


def finish(state, text: str, provider: str = "scripted", extra_attempts: int = 0):
    """A run played to completion on the live session: one turn per attempt (an interrupted attempt, then a
    restart, leaves two turns)."""
    events, _ = send(state, text, provider=provider)
    queued = events[0]
    run_id, attempt_id = queued.run_id, queued.attempt_id
    session = state.live_session.id
    for n in range(extra_attempts):
        apply(
            state,
            [
                ev.RunStarted(run_id=run_id, attempt_id=attempt_id, session_id=session, turn_id=f"turn_{text}{n}"),
                ev.AttemptEnded(run_id=run_id, attempt_id=attempt_id, status="interrupted", reason="steering"),
            ],
        )
        attempt_id = f"att_{text}_{n}"
        apply(
            state,
            [
                ev.AttemptStarted(
                    run_id=run_id, attempt_id=attempt_id, root_node_id=f"node_{text}{n}", reason="steering_restart"
                )
            ],
        )
    apply(
        state,
        [
            ev.RunStarted(run_id=run_id, attempt_id=attempt_id, session_id=session, turn_id=f"turn_{text}"),
            ev.RunCompleted(
                run_id=run_id,
                attempt_id=attempt_id,
                checkpoint=ev.CheckpointCaptured(
                    checkpoint_id=f"ckpt_{text}",
                    run_id=run_id,
                    ordinal=state.run(run_id).ordinal,
                    commit="1" * 40,
                    tree="e" * 40,
                ),
            ),
        ],
    )
    return state.run(run_id)


def three_runs(caps=NATIVE, extra_attempts_on_run_3: int = 0):
    state = new_thread()
    apply(
        state,
        [
            ev.CheckpointCaptured(
                checkpoint_id="ckpt_b0", ordinal=0, kind="baseline", status="baseline", commit="0" * 40, tree="f" * 40
            )
        ],
    )
    attach(state, "ps_1", "pth_a", caps=caps)
    for text in ("one", "two"):
        finish(state, text)
    finish(state, "three", extra_attempts=extra_attempts_on_run_3)
    return state


def start_rollback(state, to: int):
    cmd = command(RollbackThread(to_run_ordinal=to), thread=state.thread.id)
    run_command(state, cmd)
    return rollback.pending(state)


def complete(state, rb, **kw):
    apply(state, [ev.RollbackCompleted(rollback_id=rb.id, undo_ref="refs/x", undo_commit="a" * 40, **kw)])


def test_L10_5_the_live_provider_thread_drops_one_turn_per_attempt_of_the_rolled_back_runs():
    state = three_runs(extra_attempts_on_run_3=1)  # run 3: an interrupted attempt and its restart
    rb = start_rollback(state, 1)
    plan = rollback.provider_plan(state, rb)
    assert plan is not None and plan.capabilities.rollback
    assert (plan.provider_thread_id, plan.session_id, plan.host_id, plan.turns) == ("pth_a", "ps_1", "host-1", 3)


def test_L10_5_rolled_back_natively_the_provider_thread_is_kept_and_covers_only_the_kept_runs():
    state = three_runs()
    rb = start_rollback(state, 1)
    complete(state, rb, provider_context="rolled_back", provider_thread_id="pth_a", provider_turns_dropped=2)
    pth = state.provider_thread_of("pth_a")
    assert pth.status == "active" and pth.covered_ordinals == [1]
    assert state.live_session.id == "ps_1"  # the session goes on: it holds the rolled-back conversation
    record = state.rollbacks[-1]
    assert (record.provider_context, record.provider_thread_id, record.provider_turns) == ("rolled_back", "pth_a", 2)

    # Run 4 resumes that provider thread as it is: no handoff of runs it still has, none of dropped runs.
    events, _ = send(state, "four")
    run4 = state.run(events[0].run_id)
    assert run4.ordinal == 4
    assert start_context.resolve_start_context(state, run4, NATIVE, {}, ctx()) == []
    assert start_context.placement(state, run4).provider_thread_id == "pth_a"
    assert start_context.session_fits(state, run4)


def test_L10_5_without_the_capability_the_plan_says_so_and_the_provider_thread_diverges():
    state = three_runs(caps=WITHOUT)
    rb = start_rollback(state, 1)
    assert not rollback.provider_plan(state, rb).capabilities.rollback
    complete(state, rb, provider_context="divergent", provider_error=None)
    assert state.provider_thread_of("pth_a").status == "divergent" and state.live_session is None

    events, _ = send(state, "four")
    run4 = state.run(events[0].run_id)
    resolved = start_context.resolve_start_context(state, run4, WITHOUT, {}, ctx())
    handoff = next(e for e in resolved if isinstance(e, ev.HandoffCreated))
    assert handoff.strategy == "full_thread_summary" and handoff.covered_ordinals == [1]  # the kept run only
    assert "one" in handoff.text and "two" not in handoff.text and "three" not in handoff.text


def test_L10_5_a_failed_native_rollback_is_recorded_with_the_providers_message():
    state = three_runs()
    rb = start_rollback(state, 1)
    apply(state, [rollback.provider_requested(rb, rollback.provider_plan(state, rb))])
    assert (rb.provider_session_id, rb.provider_turns) == ("ps_1", 2)  # a retry asks that same session again
    complete(state, rb, provider_context="divergent", provider_thread_id="pth_a", provider_error="provider_error: boom")
    record = state.rollbacks[-1]
    assert record.provider_context == "divergent" and record.provider_error == "provider_error: boom"
    assert state.provider_thread_of("pth_a").status == "divergent"


def test_L10_5_rolling_back_to_the_latest_run_drops_nothing():
    state = three_runs()
    rb = start_rollback(state, 3)
    assert rollback.provider_plan(state, rb).turns == 0 and rb.rolled_back_run_ids == []


def test_L10_5_another_provider_thread_that_saw_a_dropped_run_diverges_the_kept_one_stays():
    state = three_runs()  # runs 1-3 on pth_a
    attach(state, "ps_2", "pth_b", provider="scripted-b")
    finish(state, "four", provider="scripted-b")  # run 4 on pth_b (a handoff of 1-3 in reality)
    state.provider_thread_of("pth_b").covered_ordinals = [1, 2, 3, 4]
    attach(state, "ps_3", "pth_c", provider="scripted-b")  # a later provider thread that saw run 1 only
    state.provider_thread_of("pth_c").covered_ordinals = [1]
    state.provider_thread_of("pth_c").status = "active"
    attach(state, "ps_4", "pth_a")  # back on pth_a for run 5
    finish(state, "five")
    rb = start_rollback(state, 2)
    plan = rollback.provider_plan(state, rb)
    assert (plan.provider_thread_id, plan.turns) == ("pth_a", 2)  # runs 3 and 5; run 4 never reached pth_a
    complete(state, rb, provider_context="rolled_back", provider_thread_id="pth_a", provider_turns_dropped=2)
    assert state.provider_thread_of("pth_a").covered_ordinals == [1, 2]
    assert state.provider_thread_of("pth_b").status == "divergent"  # it remembers runs 3 and 4
    assert state.provider_thread_of("pth_c").status == "active"
