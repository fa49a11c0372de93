"""Issue 17: every command field has a size limit, and the limits add up within one broker message."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from treadle.core import limits as lim
from treadle.core.commands import Command
from treadle.core.errors import BadRequest
from treadle.core.ids import new_id
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.core.plans.commands import ImplementPlan
from treadle.core.requests.commands import RespondRequest
from treadle.core.rollback.commands import RollbackNode
from treadle.core.run.commands import InterruptRun
from treadle.core.thread.commands import CancelQueued, CreateThread, EditQueued, ReorderQueue, SendMessage

NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024
WORST = "\x01"  # one character, six bytes of JSON


def script_of(size: int) -> dict:
    """A valid script whose JSON is exactly ``size`` bytes."""
    empty = len(msgspec.json.encode({"steps": [{"type": "text", "text": ""}]}))
    return {"steps": [{"type": "text", "text": "s" * (size - empty)}]}


ID = new_id("run", 0)
# (field, builder taking the field's value, value at the limit, value just over, code)
CASES = [
    ("create.title", lambda v: CreateThread(title=v), "t" * lim.MAX_TITLE_CHARS, "invalid_title"),
    ("create.model", lambda v: CreateThread(model=v), "m" * lim.MAX_MODEL_CHARS, "invalid_model"),
    ("create.provider", lambda v: CreateThread(provider=v), "p" * lim.MAX_NAME_CHARS, "invalid_provider"),
    ("create.runtime_mode", lambda v: CreateThread(runtime_mode=v), "r" * lim.MAX_NAME_CHARS, "invalid_runtime_mode"),
    ("create.workspace", lambda v: CreateThread(workspace=v), "w" * lim.MAX_WORKSPACE_CHARS, "invalid_workspace"),
    ("send.text", lambda v: SendMessage(text=v), WORST * lim.MAX_TEXT_CHARS, "text_too_long"),
    ("send.mode", lambda v: SendMessage(text="x", mode=v), "m" * lim.MAX_NAME_CHARS, "invalid_mode"),
    ("send.model", lambda v: SendMessage(text="x", model=v), "m" * lim.MAX_MODEL_CHARS, "invalid_model"),
    ("send.provider", lambda v: SendMessage(text="x", provider=v), "p" * lim.MAX_NAME_CHARS, "invalid_provider"),
    ("send.target_run_id", lambda v: SendMessage(text="x", target_run_id=v), "r" * lim.MAX_NAME_CHARS, "invalid_id"),
    (
        "send.merge_back_from",
        lambda v: SendMessage(text="x", merge_back_from=v),
        "t" * lim.MAX_NAME_CHARS,
        "invalid_id",
    ),
    ("edit.text", lambda v: EditQueued(run_id=ID, text=v), WORST * lim.MAX_TEXT_CHARS, "text_too_long"),
    (
        "respond.message",
        lambda v: RespondRequest(request_id=ID, message=v),
        "a" * lim.MAX_ANSWER_CHARS,
        "invalid_response",
    ),
    (
        "respond.answers",
        lambda v: RespondRequest(request_id=ID, answers={"q": v}),
        "a" * (lim.MAX_ANSWER_CHARS - 1),
        "invalid_response",
    ),
    (
        "respond.decision",
        lambda v: RespondRequest(request_id=ID, decision=v),
        "d" * lim.MAX_NAME_CHARS,
        "invalid_response",
    ),
    (
        "fork.title",
        lambda v: ForkThread(source=ForkSource(type="run", id=ID), title=v),
        "t" * lim.MAX_TITLE_CHARS,
        "invalid_title",
    ),
    (
        "fork.source.id",
        lambda v: ForkThread(source=ForkSource(type="run", id=v)),
        "r" * lim.MAX_NAME_CHARS,
        "invalid_id",
    ),
    (
        "fork.source.turn",
        lambda v: ForkThread(source=ForkSource(type="provider_thread", id=ID, turn=v)),
        "t" * lim.MAX_TURN_REF_CHARS,
        "invalid_id",
    ),
    ("interrupt.run_id", lambda v: InterruptRun(run_id=v), "r" * lim.MAX_NAME_CHARS, "invalid_id"),
    ("interrupt.node_id", lambda v: InterruptRun(node_id=v), "n" * lim.MAX_NAME_CHARS, "invalid_id"),
    ("cancel.run_id", lambda v: CancelQueued(run_id=v), "r" * lim.MAX_NAME_CHARS, "invalid_id"),
    ("plan.plan_id", lambda v: ImplementPlan(plan_id=v), "p" * lim.MAX_NAME_CHARS, "invalid_id"),
    ("plan.as", lambda v: ImplementPlan(plan_id=ID, as_=v), "a" * lim.MAX_NAME_CHARS, "invalid_id"),
    (
        "node_rollback.checkpoint_id",
        lambda v: RollbackNode(node_id=ID, checkpoint_id=v),
        "c" * lim.MAX_NAME_CHARS,
        "invalid_id",
    ),
]


@pytest.mark.parametrize("field,build,at_limit,code", CASES, ids=[c[0] for c in CASES])
def test_each_field_is_accepted_at_its_limit_and_refused_one_over(field, build, at_limit, code):
    lim.check_sizes(build(at_limit))
    with pytest.raises(BadRequest) as refused:
        lim.check_sizes(build(at_limit + at_limit[-1]))
    assert refused.value.code == code


def test_scripts_are_measured_as_json_bytes():
    lim.check_sizes(SendMessage(text="x", script=script_of(lim.MAX_SCRIPT_BYTES)))
    lim.check_sizes(EditQueued(run_id=ID, text="x", script=script_of(lim.MAX_SCRIPT_BYTES)))
    for body in (
        SendMessage(text="x", script=script_of(lim.MAX_SCRIPT_BYTES + 1)),
        EditQueued(run_id=ID, text="x", script=script_of(lim.MAX_SCRIPT_BYTES + 1)),
    ):
        with pytest.raises(BadRequest) as refused:
            lim.check_sizes(body)
        assert refused.value.code == "script_too_large"


def test_answer_count_and_queue_order_are_bounded():
    lim.check_sizes(RespondRequest(request_id=ID, answers={str(i): "" for i in range(lim.MAX_ANSWERS)}))
    with pytest.raises(BadRequest):
        lim.check_sizes(RespondRequest(request_id=ID, answers={str(i): "" for i in range(lim.MAX_ANSWERS + 1)}))
    lim.check_sizes(ReorderQueue(order=[ID] * lim.MAX_QUEUE_ORDER))
    with pytest.raises(BadRequest):
        lim.check_sizes(ReorderQueue(order=[ID] * (lim.MAX_QUEUE_ORDER + 1)))


def test_the_largest_command_at_every_limit_fits_one_broker_message():
    """The budget: the worst message (text of six-byte characters, the largest script, every field full) in its
    envelope stays under NATS's default max_payload, with room for the event envelope the coordinator adds."""
    body = SendMessage(
        text=WORST * lim.MAX_TEXT_CHARS,
        mode="m" * lim.MAX_NAME_CHARS,
        target_run_id="r" * lim.MAX_NAME_CHARS,
        provider="p" * lim.MAX_NAME_CHARS,
        model=WORST * lim.MAX_MODEL_CHARS,
        script=script_of(lim.MAX_SCRIPT_BYTES),
        merge_back_from="t" * lim.MAX_NAME_CHARS,
    )
    lim.check_sizes(body)
    command = Command(
        id=new_id("cmd", 0),
        tenant="t" * 64,
        user="u" * 64,
        thread=new_id("thr", 0),
        issued_at=datetime.now(UTC),
        body=body,
    )
    assert len(msgspec.json.encode(command)) < NATS_DEFAULT_MAX_PAYLOAD - 64 * 1024
