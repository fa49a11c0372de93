"""The projection document in parts: reassembled parts are byte-identical to the JSON of the thread's view."""

import msgspec

from tests.unit.domain_helpers import apply, new_thread, send
from treadle.core import events as ev
from treadle.projections import document
from treadle.views import VIEW_VERSION
from treadle.views.of_state import thread_view


def _stored(fields: list) -> dict[bytes, bytes]:
    pairs = iter(fields)
    out = {b"seq": b"1"}
    for name, value in zip(pairs, pairs):
        out[name.encode()] = value if isinstance(value, bytes) else str(value).encode()
    return out


def test_parts_reassemble_to_exactly_the_views_json():
    state = new_thread(title='tricky "messages":[] title')
    send(state, "one")
    assert document.encode(state) == msgspec.json.encode(thread_view(state))
    assert document.assemble(_stored(document.fields(state))) == msgspec.json.encode(thread_view(state))


def test_a_batch_rewrites_only_the_parts_it_changed():
    state = new_thread()
    for i in range(5):
        send(state, f"m{i}")
        run = state.active_run or state.runs[-1]
        apply(state, [ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)])
    stored = _stored(document.fields(state))
    changes = document.Changes(state)
    last = state.runs[-1]
    delta = ev.RunWarning(run_id=last.id, message="slow")
    apply(state, [delta])
    changes.note(delta)
    written = document.fields(state, changes)
    keys = written[0::2]
    assert "l:runs:4" in keys and "l:runs:0" not in keys and "l:messages:0" not in keys
    assert [k for k in keys if str(k).startswith("l:activity:")] == [f"l:activity:{len(state.activity) - 1}"]
    stored.update(_stored(written))
    assert document.assemble(stored) == msgspec.json.encode(thread_view(state))


def test_an_event_the_document_does_not_know_rewrites_everything():
    state = new_thread()
    send(state, "x")
    changes = document.Changes(state)
    changes.note(ev.UnknownEvent(raw={"a": 1}))
    keys = document.fields(state, changes)[0::2]
    assert "l:messages:0" in keys and "l:runs:0" in keys


def test_parts_of_another_view_version_reassemble_to_nothing():
    state = new_thread()
    send(state, "x")
    stored = _stored(document.fields(state))
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
