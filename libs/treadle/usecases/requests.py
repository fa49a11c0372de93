"""Answering an approval or a question (L11)."""

from __future__ import annotations

from treadle.api import Acknowledged, RespondBody
from treadle.core.limits import check_answers
from treadle.core.requests.commands import RespondRequest
from treadle.usecases.ids import owner
from treadle.usecases.ports import Caller, CommandBus, ThreadReads
from treadle.usecases.runs import acknowledged


async def answer(
    who: Caller, commands: CommandBus, reads: ThreadReads, request_id: str, answer: RespondBody, key: str | None
) -> Acknowledged:
    thread = await owner(reads, who.tenant, request_id, "req", "request_not_found")
    check_answers(answer.answers, answer.message)
    body = RespondRequest(
        request_id=request_id, decision=answer.decision, answers=answer.answers, message=answer.message
    )
    return await acknowledged(who, commands, "respond", thread, body, key)
