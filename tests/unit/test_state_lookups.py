"""The thread state's lookups by index (``treadle.core.lookup``) answer what a scan of the lists answers: the
newest item with the id, after appends, after a list is replaced or shortened, and after messages change runs."""

from __future__ import annotations

from datetime import UTC, datetime

from treadle.core.lookup import Groups, Index
from treadle.core.state import ThreadState
from treadle.core.thread.model import Message

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _msg(i: int, run: str, command: str | None = None) -> Message:
    return Message(id=f"msg_{i}", role="user", text=str(i), run_id=run, created_at=AT, command_id=command)


def test_lookups_follow_appends_and_miss_unknown_ids() -> None:
    state = ThreadState()
    assert state.message("msg_0") is None
    for i in range(50):
        state.messages.append(_msg(i, f"run_{i % 5}", f"cmd_{i}"))
        assert state.message(f"msg_{i}") is state.messages[i]
    assert state.message("msg_50") is None
    assert state.message_for_command("cmd_7") is state.messages[7]
    assert state.message_for_command("cmd_x") is None
    assert state.run_messages("run_3") == [m for m in state.messages if m.run_id == "run_3"]
    assert state.position("messages", "msg_42") == 42
    assert state.position("messages", "nope") is None


def test_a_replaced_or_shortened_list_is_indexed_again() -> None:
    state = ThreadState(messages=[_msg(i, "run_a") for i in range(10)])
    assert state.message("msg_9") is not None
    state.messages = [_msg(i, "run_b") for i in range(3)]
    assert state.message("msg_9") is None
    assert state.run_messages("run_a") == []
    assert [m.id for m in state.run_messages("run_b")] == ["msg_0", "msg_1", "msg_2"]
    del state.messages[1:]
    assert state.message("msg_2") is None and state.message("msg_0") is state.messages[0]


def test_messages_moved_to_another_run_are_found_under_it() -> None:
    state = ThreadState(messages=[_msg(i, "run_old") for i in range(4)])
    assert len(state.run_messages("run_old")) == 4
    state.messages[2].run_id = "run_new"
    state.messages_moved([2], ["run_old"])
    assert [m.id for m in state.run_messages("run_new")] == ["msg_2"]
    assert [m.id for m in state.run_messages("run_old")] == ["msg_0", "msg_1", "msg_3"]


def test_an_item_changed_in_place_is_not_returned_for_its_old_key() -> None:
    items = [_msg(i, "r") for i in range(3)]
    index, groups = Index(lambda m: m.id), Groups(lambda m: m.run_id)
    assert index.find(items, "msg_1") is items[1] and groups.of(items, "r") == items
    items[1] = _msg(9, "s")
    assert index.find(items, "msg_1") is None
    assert index.find(items, "msg_9") is items[1]
    assert groups.of(items, "r") == [items[0], items[2]]


def test_duplicate_ids_give_the_newest_as_the_reverse_scan_did() -> None:
    state = ThreadState(messages=[_msg(1, "r"), _msg(1, "s")])
    assert state.message("msg_1") is state.messages[1]


def test_the_indexes_stay_out_of_the_encoded_state() -> None:
    import msgspec

    state = ThreadState(messages=[_msg(1, "r")])
    before = msgspec.json.encode(state)
    assert state.message("msg_1") is not None and state.run_messages("r")
    assert msgspec.json.encode(state) == before
    assert state == ThreadState(messages=[_msg(1, "r")])
