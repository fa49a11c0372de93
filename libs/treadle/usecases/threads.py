"""Creating threads and listing them."""

from __future__ import annotations

from treadle.api import CreateThreadRequest, ThreadCreated
from treadle.core.policy import check_mode
from treadle.core.thread.commands import CreateThread
from treadle.usecases.ids import checked
from treadle.usecases.ports import Caller, CommandBus, PolicyBook, ThreadReads
from treadle.views.thread import ThreadHead


async def create(
    who: Caller, commands: CommandBus, policies: PolicyBook, request: CreateThreadRequest, key: str | None
) -> ThreadCreated:
    # Early refusal at the door; the coordinator decides it again for every path that makes a thread.
    check_mode(await policies.get(who.tenant), request.runtime_mode, "a new thread")
    body = CreateThread(
        title=request.title,
        provider=request.provider,
        model=request.model,
        runtime_mode=request.runtime_mode,
        workspace=request.workspace,
    )
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="create", thread=None, body=body, idempotency_key=key
    )
    return ThreadCreated(thread_id=accepted.thread_id, seq=accepted.seq)


async def page(
    who: Caller, reads: ThreadReads, count: int, cursor: str | None, search: str | None
) -> tuple[list[bytes], str | None]:
    """A page of the caller's tenant's threads, newest first (``search``: in the title, any case)."""
    return await reads.threads(who.tenant, count, cursor, search)


async def head(who: Caller, reads: ThreadReads, thread: str) -> tuple[ThreadHead, int]:
    """The thread without its runs (lineage, transfers, handoffs) and the sequence it reflects."""
    return await reads.head(who.tenant, checked(thread, "thr"))
