"""Pure parts of the Claude provider: how a turn's end is judged, and how turns are read from a transcript."""

from __future__ import annotations

import json

import pytest
from claude_agent_sdk import AssistantMessage, ResultMessage, StreamEvent, TextBlock, UserMessage

from tests.claude.claude_fixtures import RecordingSink
from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.base import Turn
from treadle.providers.claude.store import PendingRewind, SessionStore
from treadle.providers.claude.translate import TurnTranslator


def result(**kw) -> ResultMessage:
    base = dict(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=1,
        session_id="s",
        terminal_reason="completed",
    )
    return ResultMessage(**{**base, **kw})


def translator(res: ResultMessage | None, api_error: str | None = None) -> TurnTranslator:
    t = TurnTranslator(
        Turn(run_id="r", attempt_id="a", root_node_id="n", text="", script=None, ids=IdFactory("a", 0)), sink=None
    )  # type: ignore[arg-type]  # no sink: these tests read the translator's result only
    t.result, t.api_error = res, api_error
    return t


@pytest.mark.parametrize(
    "res,api_error,interrupted,expected",
    [
        (result(), None, False, pe.TurnCompleted(status="completed")),
        # An API failure is a "success" result with is_error and the HTTP status: the CLI's own text is the error.
        (
            result(is_error=True, api_error_status=400, stop_reason="stop_sequence"),
            "API Error: 400 no",
            False,
            pe.TurnCompleted(status="failed", error="API Error: 400 no"),
        ),
        (
            result(is_error=True, api_error_status=529),
            None,
            False,
            pe.TurnCompleted(status="failed", error="API error 529: success"),
        ),
        (
            result(subtype="error_max_turns", is_error=True, errors=["too many turns"]),
            None,
            False,
            pe.TurnCompleted(status="failed", error="too many turns"),
        ),
        (
            result(subtype="error_during_execution", is_error=True, terminal_reason="aborted_streaming"),
            None,
            False,
            pe.TurnCompleted(status="interrupted"),
        ),
        (
            result(subtype="error_during_execution", is_error=True, terminal_reason=None),
            None,
            True,
            pe.TurnCompleted(status="interrupted"),
        ),
        (None, None, False, pe.TurnCompleted(status="failed", error="Claude Code ended the turn without a result")),
    ],
)
def test_L2_5_a_turns_end_is_judged_by_is_error_status_and_terminal_reason_not_subtype(
    res, api_error, interrupted, expected
):
    assert translator(res, api_error).completion(interrupted) == expected


def test_L10_5_transcript_turns_follow_the_live_branch(tmp_path):
    store = SessionStore(tmp_path)
    store.ensure()
    (tmp_path / "projects" / "-w").mkdir()
    lines = [
        {"type": "user", "uuid": "p1", "parentUuid": None, "promptSource": "sdk"},
        {"type": "assistant", "uuid": "a1", "parentUuid": "p1"},
        {"type": "user", "uuid": "p2", "parentUuid": "a1", "promptSource": "sdk"},
        {"type": "assistant", "uuid": "a2", "parentUuid": "p2"},
        {"type": "assistant", "uuid": "side", "parentUuid": "p2", "isSidechain": True},
        {"type": "user", "uuid": "p3", "parentUuid": "a1", "promptSource": "sdk"},  # after a rollback of turn 2
        {"type": "user", "uuid": "r3", "parentUuid": "p3"},  # harness text belongs to the turn
        {"type": "assistant", "uuid": "a3", "parentUuid": "r3"},
    ]
    (tmp_path / "projects" / "-w" / "sid.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')

    assert store.turns("sid") == [("p1", "a1"), ("p3", "a3")]
    assert store.turns("sid", leaf="a2") == [("p1", "a1"), ("p2", "a2")]
    store.record_rewind("sid", PendingRewind(at="a1"))
    assert store.turns("sid") == [("p1", "a1")]
    store.forget_rewind("sid")
    store.record_ended("sid", "p1")
    assert store.resume_point("sid") == "a1"  # turn 3 never reported its end
    store.record_ended("sid", "p3")
    assert store.resume_point("sid") is None


def _stream(event: dict) -> StreamEvent:
    return StreamEvent(uuid="u", session_id="s", event=event)


# The order Claude Code reports a streamed text block in (measured): the whole block as an AssistantMessage
# first, then the block's stop and the message's end. An interrupt makes it report the cut-off block the same
# way, followed by its interruption note and a synthetic end without a stop reason.
_START = _stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
_DELTA = _stream({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word000 "}})
_WHOLE = AssistantMessage(content=[TextBlock(text="word000 ")], model="m")
_STOP = _stream({"type": "content_block_stop", "index": 0})


@pytest.mark.parametrize(
    "messages,finished",
    [
        (
            [_START, _DELTA, _WHOLE, _STOP, _stream({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})],
            True,
        ),
        (
            [
                _START,
                _DELTA,
                _WHOLE,
                UserMessage(content=[TextBlock(text="[Request interrupted by user]")]),
                _STOP,
                _stream({"type": "message_delta", "delta": {"stop_reason": None}}),
            ],
            False,
        ),
        ([_START, _DELTA, _WHOLE], False),  # the process died before the message ended
    ],
)
async def test_L3_4_a_text_block_the_model_never_finished_is_not_reported_as_a_finished_message(messages, finished):
    sink = RecordingSink()
    t = TurnTranslator(
        Turn(run_id="r", attempt_id="a", root_node_id="n", text="", script=None, ids=IdFactory("a", 0)), sink
    )
    for message in messages:
        await t.feed(message)
    await t.close_open()

    assert "".join(*sink.live.values()) == "word000 "
    assert sink.texts() == (["word000 "] if finished else [])  # left open: the run's end closes it as incomplete


def test_an_edit_approval_shows_the_files_and_a_bounded_diff_from_the_tool_input_alone():
    """Issue 25: the diff of a Claude edit comes from the tool's input (the workspace is never read by the host)."""
    from treadle.core.requests.model import MAX_DIFF_CHARS
    from treadle.providers.claude.approvals import file_edits, tool_action

    [edit] = file_edits("Edit", {"file_path": "/ws/a.md", "old_string": "red\n", "new_string": "blue\n"})
    assert (edit.path, edit.change) == ("/ws/a.md", "update") and "-red\n+blue\n" in edit.diff
    [write] = file_edits("Write", {"file_path": "/ws/big.txt", "content": "x\n" * 1_000_000})
    assert write.change == "write" and len(write.diff) < MAX_DIFF_CHARS + 100 and "[diff cut:" in write.diff
    [multi] = file_edits("MultiEdit", {"file_path": "/ws/m", "edits": [{"old_string": "a", "new_string": "b"}, "junk"]})
    assert "-a\n+b\n" in multi.diff
    said = {"url": "https://example.invalid/x", "prompt": "harmless", "description": "just reading docs"}
    assert tool_action("WebFetch", said) == "WebFetch https://example.invalid/x"
    assert tool_action("mcp__x__y", {"blob": "z" * 10_000}).endswith("…")
