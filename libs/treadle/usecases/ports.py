"""What a use case works through: who calls, the command bus to the coordinator, the tenants' policies, and the
reads of a thread's views. ``ThreadReads`` is the one seam to the read side: each method is a question, so a
new shape of the projections changes its implementation (the gateway's ``reads``), never a use case."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from treadle.core.commands import Accepted, Body
from treadle.core.policy import TenantPolicy
from treadle.views.runs import QueueView
from treadle.views.thread import RunView, ThreadHead, ThreadView

ArchivedFilter = Literal["exclude", "include", "only"]  # archived threads in a list: left out, in, alone


class Caller(Protocol):
    """The principal a request was made with (a token's, a provider session's)."""

    @property
    def tenant(self) -> str: ...

    @property
    def user(self) -> str: ...


class CommandBus(Protocol):
    """Sends one command to the thread coordinator and returns its receipt; refusals raise typed errors."""

    async def send(
        self, *, tenant: str, user: str, verb: str, thread: str | None, body: Body, idempotency_key: str | None
    ) -> Accepted: ...


class PolicyBook(Protocol):
    async def get(self, tenant: str) -> TenantPolicy: ...


@runtime_checkable  # a route asks for it by this type: Litestar checks what it injects
class ThreadReads(Protocol):
    """A tenant's thread views, each read reflecting the thread's last event when it came (a thread of no one's
    raises ``NotFound`` ``thread_not_found``)."""

    async def thread_of(self, tenant: str, entity_id: str) -> str | None:
        """The thread of a run, node, request or plan id; None when unknown."""
        ...

    async def view(self, tenant: str, thread: str) -> ThreadView:
        """The whole thread."""
        ...

    async def logged(self, tenant: str, thread: str) -> ThreadView | None:
        """The thread folded from its log right now, not from the projection (which may lag behind it)."""
        ...

    async def head(self, tenant: str, thread: str) -> tuple[ThreadHead, int]:
        """The thread without its runs, and the sequence it reflects."""
        ...

    async def run(self, tenant: str, thread: str, run_id: str | None) -> tuple[RunView | None, int]:
        """One run (the thread's latest without an id), and the sequence it reflects."""
        ...

    async def queue(self, tenant: str, thread: str) -> QueueView: ...

    async def active_run(self, tenant: str, thread: str) -> ThreadView:
        """The thread with its active run id (and nothing of its runs)."""
        ...

    async def first_run(self, tenant: str, thread: str) -> ThreadView:
        """The thread's lineage and its first run."""
        ...

    async def run_and_transfers(self, tenant: str, thread: str, run_id: str) -> ThreadView:
        """The thread's transfers and the one run."""
        ...

    async def items(self, tenant: str, thread: str, name: str, start: int, count: int) -> tuple[int, int, list[bytes]]:
        """(seq, total, the JSON of items ``start..start+count``) of the thread's list ``name``."""
        ...

    async def threads(
        self, tenant: str, count: int, cursor: str | None, search: str | None, archived: ArchivedFilter = "exclude"
    ) -> tuple[list[bytes], str | None]:
        """A page of the tenant's thread summaries (JSON), newest first, and the cursor of the next."""
        ...
