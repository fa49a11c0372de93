"""Creating threads, listing them, renaming, archiving and deleting them."""

from __future__ import annotations

from treadle.api import CreateThreadRequest, ThreadCreated, ThreadDeleted, ThreadUpdated, UpdateThreadRequest
from treadle.core.policy import check_mode
from treadle.core.thread.commands import CreateThread, DeleteThread, UpdateThread
from treadle.usecases.ids import checked
from treadle.usecases.ports import ArchivedFilter, Caller, CommandBus, PolicyBook, ThreadReads
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


async def update(
    who: Caller, commands: CommandBus, thread: str, request: UpdateThreadRequest, key: str | None
) -> ThreadUpdated:
    """Rename and/or archive or unarchive (core/thread/manage.py has the rules)."""
    body = UpdateThread(title=request.title, archived=request.archived)
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="update", thread=checked(thread, "thr"), body=body, idempotency_key=key
    )
    return ThreadUpdated(thread_id=accepted.thread_id, seq=accepted.seq, changed=not accepted.duplicate)


async def delete(who: Caller, commands: CommandBus, thread: str, key: str | None) -> ThreadDeleted:
    """The tombstone and the erasure of the thread's data (refused while a run is active or queued)."""
    accepted = await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="delete",
        thread=checked(thread, "thr"),
        body=DeleteThread(),
        idempotency_key=key,
    )
    return ThreadDeleted(thread_id=accepted.thread_id, seq=accepted.seq)


async def page(
    who: Caller,
    reads: ThreadReads,
    count: int,
    cursor: str | None,
    search: str | None,
    archived: ArchivedFilter = "exclude",
) -> tuple[list[bytes], str | None]:
    """A page of the caller's tenant's threads, newest first (``search``: in the title, any case; ``archived``:
    left out, included or alone)."""
    return await reads.threads(who.tenant, count, cursor, search, archived)


async def head(who: Caller, reads: ThreadReads, thread: str) -> tuple[ThreadHead, int]:
    """The thread without its runs (lineage, transfers, handoffs) and the sequence it reflects."""
    return await reads.head(who.tenant, checked(thread, "thr"))
