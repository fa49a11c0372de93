"""Upgrading a deployment to partitions without losing or repeating an event.

Before partitions, each thread-keyed worker kind consumed through one durable consumer (``projector``,
``supervisor-dispatch``, ``supervisor-provider``, ``coordinator-run-ended``) filtered on the unpartitioned
subjects. Once the broker maps subjects to partitions no event arrives in that form any more, but the old
consumers may still hold a tail of events the old workers never acknowledged.

That tail is worked off first, through the old consumers themselves (their acknowledgement state is exactly
what is left to do), by the replica holding partition 0; no partition's new consumer starts before the old
ones are empty and deleted. So a thread's events from before the upgrade are handled before its events from
after it, each once. A deployment that never had the old consumers (or finished migrating) pays one
``consumer_info`` per old consumer at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

if TYPE_CHECKING:
    from .leases import Unit  # leases imports this module

log = logging.getLogger(__name__)

OWNER = 0  # the partition whose holder works off the old consumers


# Filters that match the unpartitioned form only (its exact token count). The old consumers get these: the
# projector's and the provider consumer's old filters (``treadle.evt.>``, ``treadle.prov.>``) would also take
# partitioned events, so they could never drain, and would hand the new consumers' events to the old ones.
UNPARTITIONED_EVENTS = "treadle.evt.*.*.*.*"
UNPARTITIONED_PROVIDER = "treadle.prov.*.*.*"


def unpartitioned_event_types(*types: str) -> list[str]:
    """The filters the old consumers of some event types were created with."""
    return [f"treadle.evt.*.*.{t}" for t in types]


@dataclass(frozen=True)
class Legacy:
    """The old consumers of a worker kind, as ``(stream, durable)``, and how to consume them: ``make()``
    returns a unit (start/stop) reading exactly those durables with the filters they were created with."""

    durables: tuple[tuple[str, str], ...]
    make: Callable[[], Unit]


async def remaining(js: JetStreamContext, durables: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], int]:
    """The old consumers that still exist, each with what it has left (pending plus unacknowledged)."""
    left = {}
    for stream, durable in durables:
        try:
            info = await js.consumer_info(stream, durable)
        except NotFoundError:
            continue
        left[(stream, durable)] = (info.num_pending or 0) + (info.num_ack_pending or 0)
    return left


async def retire(js: JetStreamContext, durables: Iterable[tuple[str, str]]) -> None:
    for stream, durable in durables:
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(stream, durable)
        log.info("partition migration: old consumer %s on %s is drained and deleted", durable, stream)


class Migration:
    """Runs while old consumers exist: the holder of :data:`OWNER` drains them, every replica waits for
    ``done`` before starting any partition's consumers."""

    def __init__(self, js: JetStreamContext, legacy: Legacy, owns: Callable[[int], bool], period: float) -> None:
        self._js, self._legacy, self._owns, self._period = js, legacy, owns, period
        self.done = asyncio.Event()
        self._unit: Unit | None = None  # the old consumers, while this replica works them off
        self._task: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        if not await remaining(self._js, self._legacy.durables):
            self.done.set()
            return
        log.warning(
            "partition migration: old consumers %s still exist; their events come first",
            ", ".join(d for _, d in self._legacy.durables),
        )
        self._task = asyncio.create_task(self._run(), name="partition-migration")

    async def _run(self) -> None:
        while True:
            try:
                if await self._step():
                    self.done.set()
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may be away; the next round asks again
                log.warning("partition migration round failed: %r", exc)
            await asyncio.sleep(self._period)  # polls the old consumers' state, a few rounds per upgrade

    async def _step(self) -> bool:
        left = await remaining(self._js, self._legacy.durables)
        if not left:
            await self.let_go()
            return True
        if not self._owns(OWNER):
            await self.let_go()
            return False
        if self._unit is None:
            self._unit = self._legacy.make()
            await self._unit.start()
            return False
        if any(left.values()):
            return False
        await self.let_go()  # drained: nothing new can arrive in the old form
        await retire(self._js, left)
        return True

    async def let_go(self) -> None:
        """Stop working the old consumers (partition 0 went elsewhere, or they are done)."""
        unit, self._unit = self._unit, None
        if unit is not None:
            await unit.stop(10.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.let_go()
