"""Thread commands: ``decide(state, command, ctx) -> (events, receipt)`` for the thread coordinator.

Routes each command to the concept that decides it.
"""

from __future__ import annotations

from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx
from treadle.core.errors import BadRequest
from treadle.core.limits import check_sizes
from treadle.core.plans import decide as plans
from treadle.core.plans.commands import ImplementPlan
from treadle.core.rollback import decide as rollback
from treadle.core.run import interrupts
from treadle.core.run.commands import InterruptRun
from treadle.core.thread import manage, queue
from treadle.core.thread.commands import (
    CancelQueued,
    CreateThread,
    DeleteThread,
    EditQueued,
    ReorderQueue,
    SendMessage,
    UpdateThread,
)
from treadle.core.thread.decide import Decision, capabilities_for, create_thread, send_message
from treadle.core.thread.model import Thread
from treadle.core.view import ThreadView


def require_thread(state: ThreadView, command: Command) -> None:
    """Every command but a create needs its thread; another tenant's thread is not in this tenant's log, and a
    deleted thread is found by a delete alone."""
    if not isinstance(command.body, CreateThread):
        the_thread(state, command)


def the_thread(state: ThreadView, command: Command) -> Thread:
    """The thread a command other than a create is for (NotFound when there is none)."""
    return manage.live_thread(state, command)


def decide(state: ThreadView, command: Command, ctx: Ctx) -> Decision:
    """Every thread command but ``RespondRequest``, whose answer must reach a live provider callback first
    (the coordinator checks it with :func:`requests.answerable`)."""
    body = command.body
    check_sizes(body)
    if isinstance(body, CreateThread):
        return create_thread(state, command, body, ctx)
    thread = the_thread(state, command)
    if isinstance(body, UpdateThread):
        return manage.update_thread(state, command, body)
    if isinstance(body, DeleteThread):
        return manage.delete_thread(state, command, body)
    if isinstance(body, SendMessage):
        return send_message(state, command, body, ctx)
    if isinstance(body, rollback.ROLLBACK_COMMANDS):
        return rollback.decide(state, command, ctx)
    receipt = Accepted(seq=0, thread_id=thread.id)
    if isinstance(body, InterruptRun):
        run = interrupts.target(state, body)
        caps = capabilities_for(state, run, ctx.providers)
        events, receipt.disposition = interrupts.interrupt(state, body, caps, command.user)
        receipt.run_id = run.id
        return events, receipt
    if isinstance(body, ReorderQueue):
        return queue.reorder(state, body), receipt
    if isinstance(body, EditQueued):
        receipt.run_id = body.run_id
        return queue.edit(state, body, ctx.providers), receipt
    if isinstance(body, CancelQueued):
        receipt.run_id = body.run_id
        return queue.cancel(state, body), receipt
    if isinstance(body, ImplementPlan):
        events, sent = plans.implement(state, command, body, lambda st, cmd, msg: send_message(st, cmd, msg, ctx))
        return events, sent or receipt
    raise BadRequest(f"unknown command {type(body).__name__}")
