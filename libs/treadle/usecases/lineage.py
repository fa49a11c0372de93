"""Forking a thread (L6)."""

from __future__ import annotations

from treadle.api import ForkBody, Forked
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.usecases.ids import checked
from treadle.usecases.ports import Caller, CommandBus

PREFIXES = {"run": "run", "node": "node", "provider_thread": "pth"}


async def fork(who: Caller, commands: CommandBus, thread: str, request: ForkBody, key: str | None) -> Forked:
    """A new thread with lineage and a pending context transfer, from a run, node or provider thread."""
    thread = checked(thread, "thr")
    source = request.source
    checked(source.id, PREFIXES[source.type])
    body = ForkThread(
        source=ForkSource(type=source.type, id=source.id, turn=source.turn),
        title=request.title,
        on_active=request.on_active,
    )
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="fork", thread=thread, body=body, idempotency_key=key
    )
    return Forked(thread_id=accepted.thread_id, parent_thread_id=thread, seq=accepted.seq)
