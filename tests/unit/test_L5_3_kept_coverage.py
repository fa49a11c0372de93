"""Issue 24: a run's start asked which completed runs its provider thread had not seen by walking every run, and a
run's end whether the thread covered it by scanning ``covered_ordinals``; both cost the thread's length. The
answers are now kept as the thread folds (``core.coverage``); after every event of every kind that completes a
run, changes a run's status or a provider thread's coverage (provider switches, handoffs, rollbacks, forks) they
equal the plain computation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit import domain_helpers
from tests.unit.domain_helpers import apply, new_thread
from tests.unit.test_L4_L5_lineage_policies import run_on
from tests.unit.test_L10_5_provider_rollback_domain import complete, start_rollback, three_runs
from treadle.core import events as ev
from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def plain_uncovered(state: ThreadState, covered: list[int], before: int) -> bool:
    own = [r.ordinal for r in state.runs if r.ordinal < before and r.status == "completed"]
    return any(o not in covered for o in own)


def assert_kept(state: ThreadState) -> None:
    top = len(state.runs) + 2
    for pth in state.provider_threads:
        for before in range(0, top):
            assert state.uncovered(pth, before) == plain_uncovered(state, pth.covered_ordinals, before), (pth, before)
        for ordinal in range(0, top):
            assert state.covers(pth, ordinal) == (ordinal in pth.covered_ordinals), (pth, ordinal)


@pytest.fixture
def checked(monkeypatch):
    """Every event the domain helpers fold is followed by the check (the kept answers exist from the start)."""

    def evolve_and_check(state, e):
        evolve(state, e)
        assert_kept(state)
        return state

    monkeypatch.setattr(domain_helpers, "evolve", evolve_and_check)


def test_L5_3_the_kept_coverage_follows_provider_switches_deltas_and_fresh_threads(checked):
    state = new_thread()
    for n, provider in enumerate(["scripted", "scripted-b", "scripted", "scripted", "scripted-b", "scripted"] * 2):
        run_on(state, provider, f"r{n}", "ok")
    assert any(h.strategy == "delta" for h in state.handoffs)
    assert any(h.reason == "repeated handoffs" for h in state.handoffs)  # a fresh thread after too many deltas
    assert_kept(state)


def test_L10_5_the_kept_coverage_follows_a_rollback_that_trims_coverage_and_drops_runs(checked):
    state = three_runs()
    assert_kept(state)
    rb = start_rollback(state, 1)
    complete(state, rb, provider_context="kept", provider_thread_id="pth_a")
    assert state.provider_thread_of("pth_a").covered_ordinals == [1]
    assert [r.status for r in state.runs] == ["completed", "rolled_back", "rolled_back"]
    assert not state.uncovered(state.provider_thread_of("pth_a"), 4)


def test_L5_3_the_kept_coverage_follows_runs_that_fail_are_interrupted_or_start_again(checked):
    state = new_thread()
    run_on(state, "scripted", "one", "ok")
    for end in (ev.RunFailed, ev.RunInterrupted, ev.RunCancelled):
        domain_helpers.send(state, "next")
        run = state.runs[-1]
        apply(state, [end(run_id=run.id, attempt_id=run.attempt.id)])
    domain_helpers.send(state, "restarted")
    run = state.runs[-1]
    session = state.live_session.id
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id=session, turn_id="t1")])
    apply(state, [ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)])
    # a completed run started again (a late event): the fold makes it running, and coverage follows
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id=session, turn_id="t2")])
    assert run.status == "running"
    assert_kept(state)


def test_L5_3_the_kept_coverage_of_a_recorded_log_is_the_plain_one_after_every_event():
    states: dict[str, ThreadState] = {}
    for line in (FIXTURES / "replay-events.jsonl").read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        state = evolve(states.setdefault(e.thread, ThreadState()), e)
        assert_kept(state)
    assert any(s.provider_threads and s.handoffs for s in states.values())
    assert any(s.rollbacks for s in states.values())


def test_L5_3_the_kept_coverage_is_counted_again_when_the_lists_are_replaced():
    state = new_thread()
    run_on(state, "scripted", "one", "ok")
    run_on(state, "scripted", "two", "ok")
    pth = state.provider_threads[0]
    assert not state.uncovered(pth, 3) and state.covers(pth, 2)
    pth.covered_ordinals = [1]  # replaced, as a rollback and a delivered handoff do
    assert state.uncovered(pth, 3) and not state.covers(pth, 2)
    state.runs = state.runs[:1]  # a list replaced (a test, a copy): counted again, not answered wrongly
    assert not state.uncovered(pth, 3)
