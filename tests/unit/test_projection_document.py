"""The projection document in parts: reassembled parts are byte-identical to the JSON of the thread's view."""

import json
from pathlib import Path

import msgspec

from tests.support.stored_fields import as_stored
from tests.unit.domain_helpers import apply, new_thread, send
from treadle.core import events as ev
from treadle.core.events import decode_event
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.state import ThreadState, evolve
from treadle.projections import changes as changes_
from treadle.projections import document
from treadle.views import VIEW_VERSION, of_state
from treadle.views.of_state import thread_view


def test_parts_reassemble_to_exactly_the_views_json():
    state = new_thread(title='tricky "messages":[] title')
    send(state, "one")
    assert document.encode(state) == msgspec.json.encode(thread_view(state))
    assert document.assemble(as_stored(document.fields(state))) == msgspec.json.encode(thread_view(state))


def test_a_batch_rewrites_only_the_parts_it_changed():
    state = new_thread()
    for i in range(5):
        send(state, f"m{i}")
        run = state.active_run or state.runs[-1]
        apply(state, [ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)])
    stored = as_stored(document.fields(state))
    changes = changes_.Changes(state)
    last = state.runs[-1]
    delta = ev.RunWarning(run_id=last.id, message="slow")
    apply(state, [delta])
    changes.note(delta)
    written = document.fields(state, changes)
    keys = written[0::2]
    assert "l:runs:4" in keys and "l:runs:0" not in keys and "l:messages:0" not in keys
    assert [k for k in keys if str(k).startswith("l:activity:")] == [f"l:activity:{len(state.activity) - 1}"]
    stored.update(as_stored(written))
    assert document.assemble(stored) == msgspec.json.encode(thread_view(state))


def test_events_that_rewrite_no_item_write_no_item():
    """A rename, an archive and an event this version does not know (its fold does nothing) are not local, yet
    their folds rewrite no item of the long lists: their writes carry the small fields that changed, no item."""
    state = new_thread()
    send(state, "x")
    document.fields(state)
    unknown = ev.UnknownEvent(raw={"a": 1})
    for payload in (ev.ThreadRenamed(title="new", by="u"), ev.ThreadArchived(by="u"), unknown):
        changes = changes_.Changes(state)
        if payload is not unknown:  # one of a newer writer folds as nothing (it has no type of this version's)
            apply(state, [payload])
        changes.note(payload)
        keys = document.fields(state, changes)[0::2]
        assert [k for k in keys if str(k).startswith("l:")] == [], payload
    assert state.thread is not None and state.thread.title == "new" and state.thread.archived


def test_parts_of_another_view_version_reassemble_to_nothing():
    state = new_thread()
    send(state, "x")
    stored = as_stored(document.fields(state))
    assert stored[b"v"] == str(VIEW_VERSION).encode() and document.assemble(stored) is not None
    stored[b"v"] = str(VIEW_VERSION + 1).encode()
    assert document.assemble(stored) is None
    del stored[b"v"]
    assert document.assemble(stored) is None


def test_the_view_leaves_out_what_only_the_fold_needs():
    state = new_thread()
    send(state, "x")
    doc = msgspec.json.decode(document.encode(state))
    assert "provider_seq" not in doc and "command_id" not in doc["thread"]
    assert all("command_id" not in m for m in doc["messages"])
    assert all("provider_index" not in a for r in doc["runs"] for a in r["attempts"])


def test_only_domain_types_shaped_like_their_view_are_encoded_as_they_are():
    from treadle.core.checkpoints.model import Checkpoint
    from treadle.core.run.model import Attempt, Run
    from treadle.views import checkpoints, of_state, runs

    assert of_state._as_is(Checkpoint, checkpoints.Checkpoint)  # the same fields, all the way down
    assert not of_state._as_is(Attempt, runs.Attempt)  # provider_index stays out of the view
    assert not of_state._as_is(Run, runs.Run)  # ...and so out of the run's attempts
    assert of_state._PART_AS_IS["sessions"] and not of_state._ITEM_AS_IS["messages"]


def test_a_write_carries_the_small_fields_that_changed_and_the_events_said_to_keep_provider_threads_do():
    """Issue 24: a provider thread's covered ordinals grow with every run; its part is written when it changes
    (a run completed), not on every event, and not encoded for a batch of events that keep it. Over the recorded
    log, no event whose trait says it keeps them (``provider_threads=False``) changes the provider threads."""
    state = new_thread()
    send(state, "one")
    run = state.runs[-1]
    attached = ev.ProviderAttached(
        session_id="ps_1",
        provider="scripted",
        host_id="h",
        boot_id="b",
        provider_thread_id="pth_1",
        native_ref="ref",
        capabilities=ProviderCapabilities(),
    )
    apply(state, [attached])
    stored = as_stored(document.fields(state))
    for payloads, changed in (
        ([ev.RunStarted(run_id=run.id, attempt_id=run.attempt.id, session_id="ps_1", turn_id="t")], False),
        ([ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)], True),
        ([ev.RunWarning(run_id=run.id, message="late")], False),
    ):
        changes = changes_.Changes(state)
        apply(state, payloads)
        for p in payloads:
            changes.note(p)
        written = document.fields(state, changes)
        assert ("f:provider_threads" in written[0::2]) == changed, payloads
        stored.update(as_stored(written))
        assert document.assemble(stored) == msgspec.json.encode(thread_view(state))
    assert state.provider_threads[0].covered_ordinals == [1]

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "replay-events.jsonl"
    states: dict[str, ThreadState] = {}
    kept = 0
    for line in fixtures.read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        s = states.setdefault(e.thread, ThreadState())
        before = of_state.encoded_part(s, "provider_threads")
        evolve(s, e)
        if not e.data.TRAITS.provider_threads:
            kept += 1
            assert of_state.encoded_part(s, "provider_threads") == before, row["seq"]
    assert kept > 30
