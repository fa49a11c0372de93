"""The read side as the use cases see it (``usecases.ports.ThreadReads``), over this request's app: each question
answered from the thread's stored parts, with the guarantees of ``deps.thread_read`` (never behind the thread's
last event; the whole document when the parts are not all stored). The one seam between the use cases and the
projections: a new shape of the read side changes this module only."""

from __future__ import annotations

from functools import partial

from treadle.projections import parts
from treadle.usecases.ports import ArchivedFilter
from treadle.views.runs import QueueView
from treadle.views.thread import RunView, ThreadHead, ThreadView, queue_view, run_view, thread_head

from . import deps, lists


def _whole(view: ThreadView) -> ThreadView:
    """A thread not (wholly) projected yet is read whole: its document has every field the parts reads give."""
    return view


async def _run(run_id: str | None, snap: parts.Snapshot) -> tuple[RunView | None, int]:
    run = await (parts.run(snap, run_id) if run_id is not None else parts.latest_run(snap))
    return run, snap.sequence


def _run_of(run_id: str | None, view: ThreadView) -> tuple[RunView | None, int]:
    target = run_id or (view.runs[-1].id if view.runs else None)
    return (run_view(view, target) if target else None), view.seq


async def _head(snap: parts.Snapshot) -> tuple[ThreadHead, int]:
    return await parts.head(snap), snap.sequence


def _head_of(view: ThreadView) -> tuple[ThreadHead, int]:
    return thread_head(view), view.seq


class GatewayReads:
    def __init__(self, request: deps.HttpRequest) -> None:
        self._request = request

    async def thread_of(self, tenant: str, entity_id: str) -> str | None:
        return await deps.thread_of(self._request, tenant, entity_id)

    async def view(self, tenant: str, thread: str) -> ThreadView:
        return await deps.thread_view(self._request, tenant, thread)

    async def logged(self, tenant: str, thread: str) -> ThreadView | None:
        return await deps.logged_view(self._request, tenant, thread)

    async def head(self, tenant: str, thread: str) -> tuple[ThreadHead, int]:
        return await deps.thread_read(self._request, tenant, thread, _head, _head_of)

    async def run(self, tenant: str, thread: str, run_id: str | None) -> tuple[RunView | None, int]:
        return await deps.thread_read(self._request, tenant, thread, partial(_run, run_id), partial(_run_of, run_id))

    async def queue(self, tenant: str, thread: str) -> QueueView:
        return await deps.thread_read(self._request, tenant, thread, parts.queue, queue_view)

    async def active_run(self, tenant: str, thread: str) -> ThreadView:
        return await deps.thread_read(self._request, tenant, thread, parts.active_run, _whole)

    async def first_run(self, tenant: str, thread: str) -> ThreadView:
        return await deps.thread_read(self._request, tenant, thread, parts.first_run, _whole)

    async def run_and_transfers(self, tenant: str, thread: str, run_id: str) -> ThreadView:
        read = partial(parts.run_and_transfers, run_id=run_id)
        return await deps.thread_read(self._request, tenant, thread, read, _whole)

    async def items(self, tenant: str, thread: str, name: str, start: int, count: int) -> tuple[int, int, list[bytes]]:
        return await lists.items(self._request, tenant, thread, name, start, count)

    async def threads(
        self, tenant: str, count: int, cursor: str | None, search: str | None, archived: ArchivedFilter = "exclude"
    ) -> tuple[list[bytes], str | None]:
        return await lists.threads_page(self._request, tenant, count, cursor, search, archived)


def reads_of(request: deps.HttpRequest) -> GatewayReads:
    """A route's ``reads`` dependency."""
    return GatewayReads(request)
