"""Sending a message (L2.1, L3) and reading a thread's lists of items."""

from __future__ import annotations

import msgspec

from treadle.api import MessageAccepted, SendMessageRequest
from treadle.core.errors import BadRequest
from treadle.core.limits import MAX_SCRIPT_BYTES, MAX_TEXT_CHARS, check_script
from treadle.core.thread.commands import SendMessage
from treadle.usecases.ids import checked
from treadle.usecases.ports import Caller, CommandBus, ThreadReads


class MessageLimits(msgspec.Struct, frozen=True, kw_only=True):
    """A deployment's own limits of a message, at most the contract's (``core.limits``)."""

    text_chars: int = MAX_TEXT_CHARS
    script_bytes: int = MAX_SCRIPT_BYTES


def within(limits: MessageLimits, text: str, script: dict[str, object] | None) -> None:
    """400 before anything reaches the broker: a message's text and its script each have a limit."""
    if len(text) > limits.text_chars:
        raise BadRequest(
            f"text is at most {limits.text_chars} characters",
            code="text_too_long",
            details={"field": "text", "limit": limits.text_chars, "size": len(text)},
        )
    check_script(script, limits.script_bytes)


async def send(
    who: Caller,
    commands: CommandBus,
    limits: MessageLimits,
    thread: str,
    request: SendMessageRequest,
    key: str | None,
) -> MessageAccepted:
    """Starts a run, queues it, steers the active run or restarts it with this message (``request.mode``)."""
    thread = checked(thread, "thr")
    if request.target_run_id is not None:
        checked(request.target_run_id, "run")
    within(limits, request.text, request.script)
    body = SendMessage(**msgspec.structs.asdict(request))
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="send", thread=thread, body=body, idempotency_key=key
    )
    return MessageAccepted(
        thread_id=thread,
        message_id=accepted.message_id or "",
        run_id=accepted.run_id or "",
        disposition=accepted.disposition or "",
        seq=accepted.seq,
    )


async def items(
    who: Caller, reads: ThreadReads, thread: str, name: str, start: int, count: int
) -> tuple[int, int, list[bytes]]:
    """(seq, total, items start..start+count as JSON) of the thread's list ``name`` (messages, activity, …)."""
    return await reads.items(who.tenant, checked(thread, "thr"), name, start, count)
