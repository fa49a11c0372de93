"""The queue of runs behind the active one (L3.6): read, reorder, edit a queued message, cancel one."""

from __future__ import annotations

from treadle.api import Acknowledged, EditBody, ReorderBody
from treadle.core.thread.commands import CancelQueued, EditQueued, ReorderQueue
from treadle.usecases.ids import checked
from treadle.usecases.messages import MessageLimits, within
from treadle.usecases.ports import Caller, CommandBus, ThreadReads
from treadle.usecases.runs import acknowledged
from treadle.views.runs import QueueView


async def read(who: Caller, reads: ThreadReads, thread: str) -> QueueView:
    return await reads.queue(who.tenant, checked(thread, "thr"))


async def reorder(
    who: Caller, commands: CommandBus, thread: str, request: ReorderBody, key: str | None
) -> Acknowledged:
    """Name every queued run in the new order."""
    thread = checked(thread, "thr")
    for run_id in request.order:
        checked(run_id, "run")
    return await acknowledged(who, commands, "queue", thread, ReorderQueue(order=request.order), key)


async def edit(
    who: Caller,
    commands: CommandBus,
    limits: MessageLimits,
    thread: str,
    run_id: str,
    request: EditBody,
    key: str | None,
) -> Acknowledged:
    """A queued run's message, changed before it starts."""
    within(limits, request.text, request.script)
    body = EditQueued(run_id=checked(run_id, "run"), text=request.text, script=request.script)
    return await acknowledged(who, commands, "queue", checked(thread, "thr"), body, key)


async def cancel(who: Caller, commands: CommandBus, thread: str, run_id: str, key: str | None) -> Acknowledged:
    body = CancelQueued(run_id=checked(run_id, "run"))
    return await acknowledged(who, commands, "queue", checked(thread, "thr"), body, key)
