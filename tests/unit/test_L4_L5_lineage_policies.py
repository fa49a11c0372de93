"""Pure lineage policies: L4.2 replacement of an unusable provider thread, L5.4's fallback after repeated
handoffs, and L5.5's bound on handoff size. The e2e tests cover the same hook over HTTP."""

from __future__ import annotations

from treadle.domain import events as ev
from treadle.domain import recovery
from treadle.domain import start_context as lineage
from treadle.domain.entities import ProviderCapabilities

from domain_helpers import apply, ctx, new_thread, send


def run_on(state, provider: str, text: str, reply: str, caps: ProviderCapabilities | None = None):
    """One run through the supervisor's steps: resolve its context, place it if needed, play, complete."""
    send(state, text, provider=provider)
    run = state.runs[-1]
    resolved = lineage.resolve_start_context(state, run, caps, {}, ctx(run.id))
    apply(state, resolved)
    if not lineage.session_fits(state, run):
        pth = lineage.placement(state, run).provider_thread_id or f"pth_new{run.ordinal}"
        apply(state, [ev.ProviderAttached(session_id=f"ps_{run.ordinal}", provider=provider, host_id="h", boot_id="b",
                                          provider_thread_id=pth, native_ref=f"ref-{pth}",
                                          capabilities=ProviderCapabilities())])
    session = state.live_session
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id=session.id, turn_id=f"turn_{run.ordinal}")])
    if state.start_context(run.id) is not None:
        apply(state, [ev.ContextDelivered(run_id=run.id, provider_thread_id=state.session_thread(session.id).id)])
    apply(state, [ev.MessageCompleted(message_id=f"msg_r{run.ordinal}", run_id=run.id, attempt_id=run.attempt.id,
                                      node_id=run.attempt.root_node_id, text=reply),
                  ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)])
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
    assert sum(h.strategy == "delta" and h.provider_thread_id == a1 for h in state.handoffs) == lineage.MAX_DELTA_HANDOFFS
    run_on(state, "scripted-b", "r8", "ok")
    run, [handoff] = run_on(state, "scripted", "r9", "ok")
    assert (handoff.strategy, handoff.reason, handoff.covered_ordinals) == (
        "full_thread_summary", "repeated handoffs", list(range(1, 9)))
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
