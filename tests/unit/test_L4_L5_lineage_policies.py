"""Pure lineage policies: L4.2 replacement of an unusable provider thread, L5.4's fallback after repeated
handoffs, and L5.5's bound on handoff size. The e2e tests cover the same hook over HTTP."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import apply, ctx, new_thread, send
from treadle.core import events as ev
from treadle.core.errors import BadRequest
from treadle.core.lineage import start_context as lineage
from treadle.core.providers import settings as provider_settings
from treadle.core.providers.model import ProviderCapabilities, ProviderThreadSettings
from treadle.core.run import recovery


def run_on(state, provider: str, text: str, reply: str, caps: ProviderCapabilities | None = None, **message):
    """One run through the supervisor's steps: resolve its context, place it if needed, play, complete."""
    send(state, text, provider=provider, **message)
    run = state.runs[-1]
    resolved = lineage.resolve_start_context(state, run, caps, {}, ctx(run.id))
    apply(state, resolved)
    if not lineage.session_fits(state, run):
        pth = lineage.placement(state, run).provider_thread_id or f"pth_new{run.ordinal}"
        apply(
            state,
            [
                ev.ProviderAttached(
                    session_id=f"ps_{run.ordinal}",
                    provider=provider,
                    host_id="h",
                    boot_id="b",
                    provider_thread_id=pth,
                    native_ref=f"ref-{pth}",
                    capabilities=ProviderCapabilities(),
                    settings=provider_settings.of_run(state, run),
                )
            ],
        )
    session = state.live_session
    apply(
        state,
        [ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id=session.id, turn_id=f"turn_{run.ordinal}")],
    )
    if state.start_context(run.id) is not None:
        apply(state, [ev.ContextDelivered(run_id=run.id, provider_thread_id=state.session_thread(session.id).id)])
    apply(
        state,
        [
            ev.MessageCompleted(
                message_id=f"msg_r{run.ordinal}",
                run_id=run.id,
                attempt_id=run.attempt.id,
                node_id=run.attempt.root_node_id,
                text=reply,
            ),
            ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id),
        ],
    )
    handoffs = [h for h in state.handoffs if h.run_id == run.id]
    return run, handoffs


def test_L5_3_returning_provider_gets_the_delta_and_covers_it_afterwards():
    state = new_thread()
    first, _ = run_on(state, "scripted", "one", "did one")
    _, [full] = run_on(state, "scripted-b", "two", "did two")
    assert (full.strategy, full.covered_ordinals) == ("full_thread_summary", [1])
    back, [delta] = run_on(state, "scripted", "three", "did three")
    assert (delta.strategy, delta.covered_ordinals, delta.from_provider) == ("delta", [2], "scripted-b")
    assert back.attempt.provider_thread_id == first.attempt.provider_thread_id
    assert state.provider_thread_of(first.attempt.provider_thread_id).covered_ordinals == [1, 2, 3]


def test_L5_4_a_provider_thread_handed_too_many_deltas_starts_fresh_with_a_full_summary():
    state = new_thread()
    a1 = run_on(state, "scripted", "r1", "ok")[0].attempt.provider_thread_id
    for n in range(2, 8):  # B, A, B, A, B, A: A gets three deltas
        run_on(state, "scripted-b" if n % 2 == 0 else "scripted", f"r{n}", "ok")
    assert (
        sum(h.strategy == "delta" and h.provider_thread_id == a1 for h in state.handoffs) == lineage.MAX_DELTA_HANDOFFS
    )
    run_on(state, "scripted-b", "r8", "ok")
    run, [handoff] = run_on(state, "scripted", "r9", "ok")
    assert (handoff.strategy, handoff.reason, handoff.covered_ordinals) == (
        "full_thread_summary",
        "repeated handoffs",
        list(range(1, 9)),
    )
    assert run.attempt.provider_thread_id != a1


def test_L4_2_an_unusable_provider_thread_is_replaced_from_reconstructed_context():
    state = new_thread()
    first, _ = run_on(state, "scripted", "build the parser", "parser built")
    send(state, "now the tests")
    run = state.runs[-1]
    assert lineage.resolve_start_context(state, run, None, {}, ctx()) == []  # L4.1: resumes as it is
    a1 = first.attempt.provider_thread_id
    apply(state, recovery.resume_failed(state, a1, "cannot resume: thread not found"))  # the host could not resume it
    assert lineage.needs_context(state, run)
    resolved = lineage.resolve_start_context(state, run, None, {}, ctx("again"))
    apply(state, resolved)
    [handoff] = [e for e in resolved if isinstance(e, ev.HandoffCreated)]
    assert (handoff.strategy, handoff.reason) == ("full_thread_summary", "replacement for an unusable provider thread")
    assert "build the parser" in handoff.text and "parser built" in handoff.text
    where = lineage.placement(state, run)
    assert where.provider_thread_id not in (None, a1) and where.native_ref is None  # a new provider thread
    assert [a.kind for a in state.activity if a.kind == "provider_thread.unusable"]  # visible in the graph's feed


def test_L5_5_handoff_text_is_bounded_by_the_targets_max_handoff_chars():
    state = new_thread()
    for n in range(1, 9):
        run_on(state, "scripted", f"request {n}", f"reply {n}: " + "lorem ipsum " * 80)
    small = ProviderCapabilities(max_handoff_chars=2_500)
    _, [handoff] = run_on(state, "scripted-b", "summarise", "ok", caps=small)
    assert len(handoff.text) <= 2_500 and handoff.truncated
    assert "request 8" in handoff.text and "request 1" not in handoff.text  # the newest runs are kept
    assert "earlier runs omitted" in handoff.text


def test_L5_4_a_run_on_another_model_starts_a_fresh_provider_thread_with_a_full_summary_and_returning_resumes():
    state = new_thread()
    first, _ = run_on(state, "scripted", "design the cache", "cache designed")
    other, [full] = run_on(state, "scripted", "review it", "reviewed", model="big-model")
    assert (full.strategy, full.covered_ordinals) == ("full_thread_summary", [1])
    assert full.reason == (
        f"settings incompatible with provider thread {first.attempt.provider_thread_id} (model default -> big-model)"
    )
    assert "design the cache" in full.text and "cache designed" in full.text
    assert other.attempt.provider_thread_id != first.attempt.provider_thread_id
    assert state.provider_thread_of(other.attempt.provider_thread_id).settings.model == "big-model"
    # Back on the thread's model: its own provider thread resumes with only the run it missed (L5.3).
    back, [delta] = run_on(state, "scripted", "ship it", "shipped")
    assert (delta.strategy, delta.covered_ordinals) == ("delta", [2])
    assert back.attempt.provider_thread_id == first.attempt.provider_thread_id
    # The same model again: nothing to hand over, the provider thread is resumed as it is (L4.1).
    again, handoffs = run_on(state, "scripted", "and the docs", "documented")
    assert handoffs == [] and again.attempt.provider_thread_id == first.attempt.provider_thread_id


def test_L5_4_settings_incompatibility_names_what_changed_and_unrecorded_settings_are_compatible():
    held = ProviderThreadSettings(model="m1", runtime_mode="approval_required", workspace="threads/a")
    assert provider_settings.incompatibility(held, held) is None
    assert provider_settings.incompatibility(None, held) is None  # recorded before settings were
    moved = ProviderThreadSettings(model="m1", runtime_mode="full_access", workspace="threads/b")
    assert (
        provider_settings.incompatibility(held, moved)
        == "runtime mode approval_required -> full_access, workspace threads/a -> threads/b"
    )


def test_L5_4_a_model_too_long_is_a_typed_error_and_changes_nothing():
    state = new_thread()
    before = state.seq
    with pytest.raises(BadRequest) as raised:
        send(state, "hi", model="m" * 201)
    assert raised.value.code == "invalid_model" and state.seq == before


def test_L6_2_L6_4_fork_fidelity_is_a_typed_capability_result():
    from treadle.core.providers.capabilities import PROFILES, view

    assert (view(PROFILES["no_fork"]).fork, view(PROFILES["no_fork"]).subagent_fork) == ("portable", "synthetic")
    assert (view(PROFILES["native_fork"]).fork, view(PROFILES["native_fork"]).subagent_fork) == ("native", "synthetic")
    assert view(PROFILES["subagent_fork"]).subagent_fork == "native"
    weak = ProviderCapabilities(fork=True, identity="weak", subagents=True)  # Claude: Treadle-minted turn refs
    assert (view(weak).fork, view(weak).subagent_fork) == ("native", "synthetic")
    nameless = ProviderCapabilities(fork=True, fork_subagent=True, identity="none", subagents=True)
    assert (view(nameless).fork, view(nameless).subagent_fork) == ("portable", "synthetic")
    assert view(ProviderCapabilities(fork=True, subagents=False)).subagent_fork == "unavailable"


def _with_reasoning_and_a_command(state) -> None:
    run = state.runs[-1]
    root = run.attempt.root_node_id
    apply(
        state,
        [
            ev.NodeStarted(
                node_id="node_rs",
                run_id=run.id,
                attempt_id=run.attempt.id,
                parent_id=root,
                kind="reasoning",
                title="reasoning",
            ),
            ev.NodeCompleted(node_id="node_rs", run_id=run.id, output="SECRET-CHAIN: the user seems unsure"),
            ev.NodeStarted(
                node_id="node_ls",
                run_id=run.id,
                attempt_id=run.attempt.id,
                parent_id=root,
                kind="tool",
                title="ls",
                input={"command": "ls"},
            ),
            ev.NodeCompleted(node_id="node_ls", run_id=run.id, output="README.md"),
        ],
    )


def test_L5_5_a_handoff_carries_no_models_reasoning_unless_the_deployment_asks_for_it():
    state = new_thread()
    run_on(state, "scripted", "list the files", "README.md is there")
    _with_reasoning_and_a_command(state)
    _, [handoff] = run_on(state, "scripted-b", "go on", "ok")
    assert "ls `ls` → completed: README.md" in handoff.text  # the commands are carried
    assert "SECRET-CHAIN" not in handoff.text and "reasoning" not in handoff.text

    opted = new_thread()
    run_on(opted, "scripted", "list the files", "README.md is there")
    _with_reasoning_and_a_command(opted)
    send(opted, "go on", provider="scripted-b")
    resolved = lineage.resolve_start_context(opted, opted.runs[-1], None, {}, ctx("r"), reasoning=True)
    [with_reasoning] = [e for e in resolved if isinstance(e, ev.HandoffCreated)]
    assert "reasoning → completed: SECRET-CHAIN: the user seems unsure" in with_reasoning.text


def test_L5_5_the_handoff_reasoning_setting_is_off_by_default_and_a_bad_value_stops_the_worker(monkeypatch):
    from pydantic import ValidationError

    from treadle.runtime.settings import SupervisorSettings

    assert SupervisorSettings().handoff_reasoning is False
    monkeypatch.setenv("TREADLE_SUPERVISOR_HANDOFF_REASONING", "true")
    assert SupervisorSettings().handoff_reasoning is True
    monkeypatch.setenv("TREADLE_SUPERVISOR_HANDOFF_REASONING", "sometimes")
    with pytest.raises(ValidationError, match="handoff_reasoning"):
        SupervisorSettings()
