"""Provider hosts as seen by the supervisor (place a session, start a turn) and the coordinator (roll a
provider thread back, L10.5)."""

from __future__ import annotations

import logging

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from treadle.eventlog import subjects
from treadle.providers import protocol as hp
from treadle.runtime.consumer import Retryable

from ..eventlog import tracing

log = logging.getLogger(__name__)


class HostUnavailable(Retryable):
    pass


class HostGone(HostUnavailable):
    """Nobody listens on the host's subjects: the process is dead and has not come back (a restarted host
    listens again under the same id and answers for itself)."""


class HostClient:
    """Placement, shedding and summaries go to the hosts of a volume, named on each call (the thread's home);
    the other verbs to the host that holds the session."""

    def __init__(self, nc: NATS, timeout: float) -> None:
        self._nc = nc
        self._timeout = timeout

    async def _request(self, subject: str, payload: bytes, timeout: float | None = None) -> bytes:
        try:
            msg = await self._nc.request(
                subject, payload, timeout=timeout or self._timeout, headers=tracing.inject(None)
            )
        except NoRespondersError:
            raise HostGone(f"no provider host listens on {subject}") from None
        except (TimeoutError, NatsTimeout) as exc:
            raise HostUnavailable(f"no provider host answered {subject}: {exc!r}") from None
        return msg.data

    async def place(
        self, request: hp.PlaceSession, timeout: float | None = None, full: bool = False, *, volume: str
    ) -> hp.SessionPlaced | hp.HostFailure:
        """On a host of ``volume`` with room; ``full``: on any of its hosts, which releases an idle session to make
        room (L9.3)."""
        subject = subjects.host_shed(volume) if full else subjects.host_place(volume)
        return hp.place_reply.decode(await self._request(subject, hp.encode(request), timeout))

    async def warm(self, request: hp.WarmSession, *, volume: str) -> None:
        """A hint, best effort: a host of ``volume`` may launch the session's runtime before its placement."""
        try:
            await self._nc.publish(subjects.host_warm(volume), hp.encode(request), headers=tracing.inject(None))
        except Exception as exc:  # the placement starts the runtime as it would have
            log.info("warm hint not sent: %r", exc)

    async def start_turn(self, host_id: str, request: hp.StartTurn) -> hp.TurnAccepted | hp.HostFailure:
        return await self.verb(host_id, "turn.start", request)

    async def verb(self, host_id: str, verb: str, request: msgspec.Struct) -> hp.TurnAccepted | hp.HostFailure:
        """One of ``protocol.VERB_REQUESTS`` on the host that holds the session."""
        return hp.turn_reply.decode(await self._request(subjects.host(host_id, verb), hp.encode(request)))

    async def summarise(self, request: hp.Summarise, *, volume: str) -> hp.Summary | hp.HostFailure:
        """L5.5: a handoff summary from a provider, on any host of the volume. Waits as long as the turn may
        take (plus a margin for the host to start and end it), not the usual request timeout."""
        subject = subjects.host_summarise(volume)
        try:
            msg = await self._nc.request(subject, hp.encode(request), timeout=request.timeout + self._timeout)
        except (TimeoutError, NatsTimeout, NoRespondersError) as exc:
            raise HostUnavailable(f"no provider host answered {subject}: {exc!r}") from None
        return hp.summary_reply.decode(msg.data)

    async def fork(self, host_id: str, request: hp.ForkThread) -> hp.Forked | hp.HostFailure:
        """L6.2: fork the provider thread of a live session natively, on the host that holds it."""
        return hp.fork_reply.decode(await self._request(subjects.host(host_id, "thread.fork"), hp.encode(request)))

    async def rollback(
        self, host_id: str, request: hp.RollbackTurns, timeout: float | None = None
    ) -> hp.RolledBack | hp.HostFailure:
        """L10.5: drop the last turns of a live session's provider thread, on the host that holds it. A
        runtime may restart to do it (Claude Code), so the caller may allow longer than for other verbs."""
        subject = subjects.host(host_id, "thread.rollback")
        return hp.rollback_reply.decode(await self._request(subject, hp.encode(request), timeout))
