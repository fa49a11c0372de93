"""A command that reaches the broker without the gateway (another client of the subjects) is held to the same
limits: the coordinator refuses a field over its limit with the field's own code, naming the field and the
limit, and appends nothing."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import msgspec
import pytest

from treadle.api import limits as lim
from treadle.coordinator.service import Coordinator
from treadle.core import events as ev
from treadle.core.commands import Command, DelegateTask, Rejected, Reply, SendMessage
from treadle.eventlog import nats_patches, streams, subjects
from treadle.eventlog.log import EventLog
from treadle.runtime.settings import CoordinatorSettings, Shared

_n = itertools.count()
_reply = msgspec.json.Decoder(Reply)


@pytest.fixture
async def log(nc) -> EventLog:
    await streams.ensure(nc.jetstream())
    return EventLog(nc)


@pytest.mark.parametrize(
    "verb,body,code,field",
    [
        ("send", SendMessage(text="x" * (lim.MAX_TEXT_CHARS + 1)), "text_too_long", "body.text"),
        ("send", SendMessage(text="x", model="m" * (lim.MAX_MODEL_CHARS + 1)), "invalid_model", "body.model"),
        (
            "delegate",
            DelegateTask(parent_run_id="run_x", task="t", provider="p" * (lim.MAX_NAME_CHARS + 1)),
            "invalid_request",
            "body.provider",
        ),
    ],
)
async def test_L2_1_a_raw_command_over_a_limit_is_refused_with_its_code_and_appends_nothing(
    nc, log, tmp_path, verb, body, code, field
):
    coordinator = Coordinator(nc, Shared(state_dir=tmp_path), CoordinatorSettings())
    thread = f"thr_limits{next(_n)}"
    created = ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u")
    envelope = ev.Envelope(
        id=f"evt_{next(_n):06d}", type=created.TYPE, tenant="acme", thread=thread, at=datetime.now(UTC),
        command_id="cmd_test", actor="test", data=created,
    )  # fmt: skip
    before = await log.append("acme", thread, 0, [envelope])
    # as the coordinator subscribes: handed over by the read loop, the refusal sent from a task of its own
    sub = await nats_patches.subscribe(nc, subjects.command("acme", verb), coordinator._take_command)
    try:
        command = Command(
            id=f"cmd_{next(_n)}", tenant="acme", user="u", thread=thread, issued_at=datetime.now(UTC), body=body
        )
        raw = await nc.request(subjects.command("acme", verb), msgspec.json.encode(command), timeout=10)
    finally:
        await sub.unsubscribe()
    reply = _reply.decode(raw.data)
    assert isinstance(reply, Rejected) and (reply.status, reply.code) == (400, code), reply
    assert reply.details["field"] == field and len(reply.message) < 200
    assert await log.last_seq("acme", thread) == before
