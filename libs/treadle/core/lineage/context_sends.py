"""A message asking for a clean context (L5.4) or a merge-back (L7.1), decided purely: always a run of its own
(never a steer), with the context request decided in the same batch as its ``run.queued``.

``check`` normalises the message and says which fork the worker must read first (the merge-back's source, an
input of the decision); ``decide`` then decides the message on the thread with that fork as it is."""

from __future__ import annotations

import msgspec

from treadle.core import events as ev
from treadle.core.commands import Accepted, Command, SendMessage
from treadle.core.ctx import Ctx
from treadle.core.decide import decide as decide_command
from treadle.core.errors import Conflict, NotFound
from treadle.core.lineage import decide as lineage
from treadle.core.view import ThreadView


def wants_context(command: Command) -> bool:
    body = command.body
    return isinstance(body, SendMessage) and (body.clean_context or body.merge_back_from is not None)


def check(command: Command) -> tuple[Command, str | None]:
    """The command as it is decided (mode ``auto`` queues after the active run), and the thread id of the fork
    to read before deciding (None: no merge-back). Refuses modes that cannot carry a context request."""
    body = command.body
    assert isinstance(body, SendMessage)
    if body.mode == "auto":
        body = msgspec.structs.replace(body, mode="queue_after_active")
    if body.mode not in ("queue_after_active", "start_immediately", "reject"):
        raise Conflict(
            f"mode {body.mode} cannot carry clean_context or merge_back_from; it needs a run of its own",
            code="invalid_mode",
        )
    if body.merge_back_from is not None and not lineage.is_thread_id(body.merge_back_from):
        raise NotFound(f"thread {body.merge_back_from!r} not found", code="thread_not_found")
    return msgspec.structs.replace(command, body=body), body.merge_back_from


def decide(
    state: ThreadView, command: Command, fork_state: ThreadView | None, ctx: Ctx
) -> tuple[list[ev.Payload], Accepted]:
    """``command`` as ``check`` returned it; ``fork_state``: the merge-back's source thread as read."""
    body = command.body
    assert isinstance(body, SendMessage)
    events, receipt = decide_command(state, command, ctx)
    if receipt.duplicate or not events:
        return events, receipt
    queued = next(e for e in events if isinstance(e, ev.RunQueued))
    queued.context = lineage.context_request(
        state,
        clean_context=body.clean_context,
        merge_back_from=body.merge_back_from,
        fork_state=fork_state,
        ctx=ctx,
    )
    return events, receipt
