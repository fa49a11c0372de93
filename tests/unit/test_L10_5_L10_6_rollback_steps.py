"""L10.5/L10.6 without I/O: carrying out a rollback as pure steps around its effects — the files restored
(``RestoreFiles``), then the provider conversation: decided without the provider, or resumed on a host
(``ResumeProvider``), recorded as requested, asked to drop its turns (``DropTurns``), a session resumed only
for this released (``ReleaseSession``)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.unit.domain_helpers import apply
from tests.unit.test_L10_5_provider_rollback_domain import NATIVE, WITHOUT, start_rollback, three_runs
from treadle.core import events as ev
from treadle.core.rollback import decide as rollback
from treadle.core.rollback import steps
from treadle.core.rollback.decide import ProviderOutcome
from treadle.providers.registry import CATALOGUE


def placed(session_id: str, native_ref: str = "scripted-pth_a", resumed: bool = True):
    """A host's placement as the coordinator gets it (its fields are what ``steps.resumed`` reads)."""
    return SimpleNamespace(
        host_id="host-2",
        boot_id="b2",
        session_id=session_id,
        provider="scripted",
        provider_thread_id="pth_a",
        native_ref=native_ref,
        resumed=resumed,
        capabilities=NATIVE,
    )


def test_L10_5_the_files_are_restored_to_the_target_and_later_checkpoints_retired():
    state = three_runs()
    rb = start_rollback(state, 1)
    files = steps.restore_files(state, "acme", state.thread.id, rb)
    assert (files.tenant, files.thread, files.workspace) == ("acme", state.thread.id, state.thread.workspace)
    assert (files.restore_id, files.commit) == (rb.id, rb.commit)
    assert files.retire == [("root", 2), ("root", 3)]
    failed = steps.restore_failed(rb, "git_error", "bad tree")
    assert failed == ev.RollbackFailed(rollback_id=rb.id, error="git_error: bad tree")


def test_L10_5_a_live_session_that_can_roll_back_is_recorded_as_asked_then_asked_to_drop_the_turns():
    state = three_runs()
    rb = start_rollback(state, 1)
    step = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert step.outcome is None and step.resume is None
    [requested] = step.requested
    assert isinstance(requested, ev.RollbackProviderRequested)
    assert (requested.session_id, requested.host_id, requested.turns) == ("ps_1", "host-1", 2)
    assert step.drop == steps.DropTurns(
        host_id="host-1", session_id="ps_1", provider_thread_id="pth_a", rollback_id=rb.id, turns=2
    )
    outcome, release = steps.dropped(step.drop, steps.Dropped(turns_dropped=2))
    assert outcome == ProviderOutcome(context="rolled_back", provider_thread_id="pth_a", turns_dropped=2)
    assert release == []
    outcome, release = steps.dropped(step.drop, steps.Dropped(error="not_active: a turn is playing"))
    assert outcome == ProviderOutcome(
        context="divergent", provider_thread_id="pth_a", error="not_active: a turn is playing"
    )
    assert release == []  # the session was there before: a run goes on with it


def test_L10_5_asked_before_a_crash_the_same_session_is_asked_again_and_a_gone_one_leaves_it_unknown():
    state = three_runs()
    rb = start_rollback(state, 1)
    apply(state, steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE).requested)
    rb = rollback.pending(state)
    again = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert again.requested == [] and again.resume is None  # never a second session, never recorded twice
    assert (again.drop.session_id, again.drop.turns, again.drop.rollback_id) == ("ps_1", 2, rb.id)
    apply(state, [ev.ProviderStopped(session_id="ps_1", reason="host_lost")])
    gone = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert gone.drop is None and gone.outcome.context == "divergent"
    assert gone.outcome.error == "the provider session asked to roll back is gone; whether it did is unknown"


def test_L10_5_without_the_capability_or_hosts_the_provider_thread_diverges_without_asking():
    state = three_runs(caps=WITHOUT)
    rb = start_rollback(state, 1)
    step = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert step.outcome == ProviderOutcome(context="divergent") and step.drop is None and step.resume is None
    state = three_runs()
    rb = start_rollback(state, 1)
    assert (
        steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE, hosts=False).outcome.context == "divergent"
    )


def test_L10_5_no_rollback_to_the_last_run_keeps_the_provider_context():
    state = three_runs()
    rb = start_rollback(state, 3)
    step = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert step.outcome is not None and step.outcome.context == "kept" and step.drop is None


def test_L10_5_a_provider_thread_no_session_holds_is_resumed_first_then_asked_and_released_if_it_failed():
    state = three_runs()
    apply(state, [ev.ProviderStopped(session_id="ps_1", reason="idle")])
    rb = start_rollback(state, 1)
    step = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    assert step.drop is None and step.requested == []
    resume = step.resume
    assert resume is not None and resume.session_id == steps.resume_session_id(rb)
    assert (resume.provider_thread_id, resume.native_ref, resume.provider) == ("pth_a", "scripted-pth_a", "scripted")
    assert (resume.workspace, resume.capabilities) == (state.thread.workspace, NATIVE)
    assert steps.resume_session_id(rb) == steps.resume_session_id(rb)  # a retry finds the same session

    done = steps.resumed(step, rb, placed(resume.session_id))
    [attached] = done.events
    assert isinstance(attached, ev.ProviderAttached) and attached.session_id == resume.session_id
    assert done.outcome is None and done.release is None
    assert [e.session_id for e in done.step.requested] == [resume.session_id]
    drop = done.step.drop
    assert (drop.host_id, drop.session_id, drop.turns) == ("host-2", resume.session_id, 2)
    outcome, release = steps.dropped(drop, steps.Dropped(error="unsupported: no"), resumed_here=True)
    assert outcome.context == "divergent"
    assert release == [steps.ReleaseSession(host_id="host-2", session_id=resume.session_id)]


def test_L10_5_a_provider_thread_that_cannot_be_resumed_diverges_and_a_wrong_session_is_released():
    state = three_runs()
    apply(state, [ev.ProviderStopped(session_id="ps_1", reason="idle")])
    rb = start_rollback(state, 1)
    step = steps.provider_step(state, "acme", state.thread.id, rb, CATALOGUE)
    failed = steps.resumed(step, rb, error="capacity: full")
    assert failed.step is None and failed.release is None and failed.events == []
    assert failed.outcome == ProviderOutcome(
        context="divergent",
        provider_thread_id="pth_a",
        error="could not resume the provider thread to roll it back: capacity: full",
    )
    wrong = steps.resumed(step, rb, placed(step.resume.session_id, native_ref="scripted-new", resumed=False))
    assert wrong.step is None and wrong.release == steps.ReleaseSession(
        host_id="host-2", session_id=step.resume.session_id
    )
    assert "instead of resuming 'scripted-pth_a'" in wrong.outcome.error
