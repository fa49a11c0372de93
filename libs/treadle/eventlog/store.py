"""Folded thread states kept in memory and brought up to date from the log on demand.

Writers decide on the cached state and append fenced on its sequence; a conflict means the cache was
stale, so callers ``refresh`` and decide again. The cache is only an optimisation: the log is the truth.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime

from nats.aio.msg import Msg

from treadle.core.envelope import Envelope, Payload
from treadle.core.events import decode_event
from treadle.core.ids import IdFactory
from treadle.core.state import ThreadState, evolve

from . import story, subjects, tracing
from .errors import Conflict, Unavailable
from .log import fenced_after
from .metrics import EVENTS_APPENDED
from .port import EventLog


class ThreadStore:
    def __init__(self, log: EventLog, worker: str, capacity: int = 10_000) -> None:
        self.log = log
        self._appended = EVENTS_APPENDED.labels(worker)  # bound once: labels() takes a lock and a lookup per call
        self._capacity = capacity
        self._states: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()
        self._stale: set[tuple[str, str]] = set()  # fenced by a conflict: read the tail before deciding

    def cached(self, tenant: str, thread: str) -> ThreadState | None:
        return self._states.get((tenant, thread))

    def trusted(self, tenant: str, thread: str) -> ThreadState | None:
        """The cached state unless nothing is cached or a conflict (or ``distrust``) marked it stale. It can still
        be behind the log: what is decided on it must be appended (fenced on it) to count."""
        key = (tenant, thread)
        state = self._states.get(key)
        if state is None or state.seq == 0 or key in self._stale:
            return None
        self._states.move_to_end(key)
        return state

    async def load(self, tenant: str, thread: str) -> ThreadState:
        """The cached state (writers append fenced on it, so a stale one costs a conflict, not a wrong
        decision); read from the log when not cached or known to be stale."""
        state = self.trusted(tenant, thread)
        return state if state is not None else await self.refresh(tenant, thread)

    async def through(self, tenant: str, thread: str, msg: Msg) -> ThreadState:
        """The state up to and including ``msg``, an event of this thread delivered by a consumer. Its append
        was fenced on the thread's previous sequence, and the stored message still carries that header: when
        the cache ends exactly there, the event is folded in directly instead of rereading the log."""
        key = (tenant, thread)
        seq = msg.metadata.sequence.stream
        state = self._states.get(key)
        if state is not None and key not in self._stale:
            if state.seq >= seq:
                self._states.move_to_end(key)
                return state
            previous = fenced_after(msg.headers)
            if previous is not None and previous == state.seq:
                evolve(state, decode_event(msg.data, seq))
                self._states.move_to_end(key)
                return state
        state = await self.refresh(tenant, thread)
        if state.seq < seq:
            # On a replicated stream any replica answers direct gets, and one may not have stored yet what
            # the consumer (fed by the leader) delivered. Deciding without the event would drop it: retry.
            raise Unavailable(f"the log read of {tenant}/{thread} ends at {state.seq}, before delivered {seq}")
        return state

    async def refresh(self, tenant: str, thread: str) -> ThreadState:
        key = (tenant, thread)
        state = self._states.get(key) or ThreadState()
        for e in await self.log.read(tenant, thread, after=state.seq):
            evolve(state, e)
        self._stale.discard(key)
        self._remember(key, state)
        return state

    async def _read_tail(self, tenant: str, thread: str, state: ThreadState, through: int) -> None:
        for e in await self.log.read(tenant, thread, after=state.seq):
            evolve(state, e)
        key = (tenant, thread)
        if state.seq < through:  # a replica behind the leader answered the read: the next load reads again
            self._stale.add(key)
        self._remember(key, state)

    def distrust(self, which: Callable[[str, str], bool]) -> None:
        """Cached threads that another process may have written to meanwhile (``which(tenant, thread)``): the
        next load reads their tail. A stale state is fenced when it leads to an append, but a decision to
        append nothing (an event it cannot place) would not be."""
        self._stale.update(key for key in self._states if which(*key))

    def forget(self, tenant: str, thread: str) -> None:
        self._states.pop((tenant, thread), None)
        self._stale.discard((tenant, thread))

    def _remember(self, key: tuple[str, str], state: ThreadState) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self._capacity:
            self._states.popitem(last=False)

    async def append(
        self,
        tenant: str,
        thread: str,
        state: ThreadState,
        payloads: Sequence[Payload],
        *,
        ids: IdFactory,
        at: datetime,
        command_id: str,
        actor: str,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        fence: tuple[str, int] | None = None,
    ) -> int:
        """Append a decision's events on top of ``state`` and fold them in. Raises the log's errors. After a
        conflict the cached state is still a correct prefix of the log, so the next load reads only the tail;
        after anything else (the append may have half-happened in memory) the cache is dropped."""
        envelopes = [
            Envelope(
                id=ids.next("evt"),
                type=p.TYPE,
                tenant=tenant,
                thread=thread,
                at=at,
                command_id=command_id,
                causation_id=causation_id,
                correlation_id=correlation_id,
                actor=actor,
                data=p,
            )
            for p in payloads
        ]
        # one producer span per decision: its trace context goes out with the events, and the story's lines of
        # what was appended carry its ids
        with tracing.nats_span(
            f"append {envelopes[0].type}",
            subjects.thread_events(tenant, thread),
            "send",
            kind="producer",
            batch_message_count=len(envelopes),
        ):
            try:
                appended = await self.log.append_checked(tenant, thread, state.seq, envelopes, fence)
            except Conflict:
                self._stale.add((tenant, thread))
                raise
            except Exception:
                self.forget(tenant, thread)
                raise
            last = appended.seq
            if appended.duplicate:
                # A retried decision: the log holds its first append, decided on whatever state that was (another
                # replica's, or this one's before a lost ack), and a replicated stream acks it without the fence.
                # Folding this decision would give the state events the log does not hold: read what it holds.
                await self._read_tail(tenant, thread, state, last)
                return last
            first = last - len(envelopes) + 1  # an atomic batch is stored contiguously: last-n+1 … last
            for i, e in enumerate(envelopes):
                e.seq = first + i
            story.tell(envelopes)
        self._appended.inc(len(envelopes))
        for e in envelopes:
            evolve(state, e)
        self._remember((tenant, thread), state)
        return last
