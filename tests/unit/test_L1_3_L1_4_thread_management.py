"""L1.3 and L1.4 decided in the pure core: renaming, archiving and deleting a thread, with the rules on an active
run, idempotent repeats, typed refusals, and the tombstone alone being enough to find the thread again."""

from __future__ import annotations

import msgspec
import pytest

from tests.unit.domain_helpers import apply, command, new_thread, run_command, send
from treadle.api import UpdateThreadRequest
from treadle.api.constraints import violation
from treadle.core import events as ev
from treadle.core.commands import Command
from treadle.core.errors import BadRequest, Conflict, NotFound
from treadle.core.state import ThreadState
from treadle.core.thread.commands import DeleteThread, SendMessage, UpdateThread


def _update(state: ThreadState, **kw):
    return run_command(state, command(UpdateThread(**kw), thread=state.thread.id))


def _delete(state: ThreadState):
    return run_command(state, command(DeleteThread(), thread=state.thread.id))


def test_L1_3_rename_appends_thread_renamed_and_a_repeat_appends_nothing():
    state = new_thread(title="old")
    events, receipt = _update(state, title="new")
    assert events == [ev.ThreadRenamed(title="new", by="alice")] and not receipt.duplicate
    assert state.thread.title == "new"
    seq = state.seq
    events, receipt = _update(state, title="new")
    assert events == [] and receipt.duplicate and receipt.seq == seq


def test_L1_3_rename_is_allowed_while_a_run_is_active():
    state = new_thread()
    send(state)
    events, _ = _update(state, title="while running")
    assert [type(e) for e in events] == [ev.ThreadRenamed] and state.active_run_id is not None


def test_L1_3_archive_refuses_while_a_run_is_active_or_queued_and_appends_nothing():
    state = new_thread()
    send(state)
    seq = state.seq
    with pytest.raises(Conflict) as refused:
        _update(state, archived=True)
    assert refused.value.code == "thread_busy" and refused.value.status == 409
    assert state.seq == seq and not state.thread.archived


def test_L1_3_an_archived_thread_refuses_messages_until_unarchived():
    state = new_thread()
    events, _ = _update(state, archived=True, title="done")
    assert [type(e) for e in events] == [ev.ThreadRenamed, ev.ThreadArchived] and state.thread.archived
    assert _update(state, archived=True)[0] == []  # already archived
    with pytest.raises(Conflict) as refused:
        send(state)
    assert refused.value.code == "thread_archived"
    events, _ = _update(state, archived=False)
    assert [type(e) for e in events] == [ev.ThreadUnarchived] and not state.thread.archived
    _, receipt = send(state)
    assert receipt.disposition == "started"


def test_L1_3_an_update_naming_nothing_is_refused():
    state = new_thread()
    with pytest.raises(BadRequest) as refused:
        _update(state)
    assert refused.value.code == "empty_update"


def test_L1_3_a_too_long_title_and_an_unknown_field_are_typed_refusals():
    with pytest.raises(msgspec.ValidationError) as too_long:
        msgspec.json.decode(b'{"title": "' + b"x" * 201 + b'"}', type=UpdateThreadRequest)
    refused = violation(too_long.value, UpdateThreadRequest)
    assert refused is not None and refused.code == "invalid_title"
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(b'{"archived": true, "owner": "mallory"}', type=UpdateThreadRequest)
    # the command on the broker: the same field type, the same code
    with pytest.raises(msgspec.ValidationError) as on_broker:
        msgspec.json.decode(
            b'{"id":"c","tenant":"t","user":"u","thread":"thr_1","issued_at":"2026-12-02T12:00:00Z",'
            b'"body":{"type":"thread.update","title":"' + b"x" * 201 + b'"}}',
            type=Command,
        )
    assert (found := violation(on_broker.value, Command, tag="thread.update")) is not None
    assert found.code == "invalid_title"


def test_L1_4_delete_refuses_while_a_run_is_active_or_queued():
    state = new_thread()
    send(state)
    seq = state.seq
    with pytest.raises(Conflict) as refused:
        _delete(state)
    assert refused.value.code == "thread_busy" and state.seq == seq and not state.thread.deleted


def test_L1_4_delete_appends_a_tombstone_and_then_only_a_delete_finds_the_thread():
    state = new_thread(title="gone")
    send(state)
    run = state.runs[0]
    apply(state, [ev.RunCompleted(run_id=run.id, attempt_id=run.attempt.id)])
    events, receipt = _delete(state)
    assert events == [ev.ThreadDeleted(by="alice", workspace=state.thread.workspace, volume="local")]
    assert receipt.disposition == "deleted" and state.thread.deleted
    for body in (SendMessage(text="hi"), UpdateThread(title="back")):
        with pytest.raises(NotFound) as refused:
            run_command(state, command(body, thread=state.thread.id))
        assert refused.value.code == "thread_not_found"
    events, again = _delete(state)
    assert events == [] and again.duplicate and again.disposition == "deleted"


def test_L1_4_the_tombstone_alone_is_a_deleted_thread_a_delete_resumes_from():
    """Once the log is purged the tombstone is the thread's one event: folded alone it still names the
    workspace and home the erasure needs, and a repeated delete is answered, not refused."""
    state = new_thread()
    thread = state.thread
    purged = ThreadState()
    apply(purged, [ev.ThreadDeleted(by="alice", workspace=thread.workspace, volume=thread.volume)])
    assert purged.thread is not None and purged.thread.deleted and purged.thread.workspace == thread.workspace
    events, receipt = run_command(purged, command(DeleteThread(), thread=purged.thread.id))
    assert events == [] and receipt.duplicate
