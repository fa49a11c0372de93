"""The event log as a port: what the coordinator and the supervisor (and ``store.ThreadStore``) ask of it. The
JetStream implementation is ``log.EventLog``; the in-memory twin is ``treadle.memory.eventlog``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from treadle.core.envelope import Envelope


class Appended(NamedTuple):
    """Where an append's last event is, and whether the log had stored these envelopes already (a retry): then
    what is stored is their first append, which may have been decided on another state than this one."""

    seq: int
    duplicate: bool = False


class EventLog(Protocol):
    """Thread events in one ordered log. Appends are fenced on the thread's last sequence (``Conflict``), land
    whole or not at all, and are idempotent by envelope id; ``Unavailable`` means the outcome is unknown.
    Errors: ``treadle.eventlog.errors`` (Conflict, Unavailable, Rejected) and ValueError for a malformed call."""

    async def append(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> int:
        """Append iff the thread's last sequence is ``expected_seq`` (or ``fence``'s filter subject's last
        sequence is its number); the sequence of the last event appended."""
        ...

    async def append_checked(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> Appended:
        """``append``, saying whether the envelopes were stored already. A replicated stream's leader answers a
        repeated envelope id as a duplicate before it looks at the fence, so a duplicate says nothing of the
        state the events were decided on."""
        ...

    async def read(self, tenant: str, thread: str, after: int = 0) -> list[Envelope]:
        """Every event of the thread with a sequence above ``after``, in order, ``seq`` set."""
        ...

    async def last_seq(self, tenant: str, thread: str) -> int:
        """The thread's last sequence (0: no events)."""
        ...

    async def last_seq_of(self, filter_subject: str) -> int:
        """The last sequence stored under a (wildcard) subject filter, 0 for none: the base of a fence."""
        ...

    async def subject_count(self, filter_subject: str) -> int:
        """How many distinct stored subjects match the filter (threads of a tenant: its ``thread.created``s)."""
        ...
