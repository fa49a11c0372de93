"""The projection document in parts: reassembled parts are byte-identical to the whole state's JSON."""

import msgspec

from treadle.domain import events as ev
from treadle.projections import document

from tests.unit.domain_helpers import apply, new_thread, send


def _stored(fields: list) -> dict[bytes, bytes]:
    pairs = iter(fields)
    out = {b"seq": b"1"}
    for name, value in zip(pairs, pairs):
        out[name.encode()] = value if isinstance(value, bytes) else str(value).encode()
    return out


def test_parts_reassemble_to_exactly_the_states_json():
    state = new_thread(title='tricky "messages":[] title')
    send(state, "one")
    assert document.encode(state) == msgspec.json.encode(state)
    assert document.assemble(_stored(document.fields(state))) == msgspec.json.encode(state)


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
    assert document.assemble(stored) == msgspec.json.encode(state)


def test_an_event_the_document_does_not_know_rewrites_everything():
    state = new_thread()
    send(state, "x")
    changes = document.Changes(state)
    changes.note(ev.UnknownEvent(raw={"a": 1}))
    keys = document.fields(state, changes)[0::2]
    assert "l:messages:0" in keys and "l:runs:0" in keys
