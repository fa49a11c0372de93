"""The thread's Server-Sent Events: the wire format the gateway speaks, and :class:`Follow`, which reads a
thread's durable events from a sequence on and resumes after a dropped stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    from .http import TreadleClient


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event. ``id`` is the stream sequence of a durable event, None for live deltas."""

    id: int | None
    event: str
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data)


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """The subset of the SSE wire format the gateway speaks: id, event and (multi-line) data fields."""
    id_: int | None = None
    event = ""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield SseEvent(id_, event or "message", "\n".join(data).encode())
            # Only durable events carry an id, so it must not leak into the live delta that follows.
            id_, event, data = None, "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            id_ = int(value) if value.isdigit() else None


class Follow:
    """Durable events of a thread from ``from_seq`` on, reconnecting with ``Last-Event-ID`` when the stream
    drops. ``last_id`` is the sequence of the last event yielded: persist it to resume later."""

    def __init__(
        self,
        client: TreadleClient,
        thread_id: str,
        from_seq: int = 0,
        *,
        live: bool = False,
        reconnect: bool = True,
        on_retry: Callable[[ApiError | None], None] | None = None,
    ) -> None:
        self.client, self.thread_id, self.last_id = client, thread_id, from_seq
        self.live, self.reconnect, self.on_retry = live, reconnect, on_retry

    def __aiter__(self) -> AsyncGenerator[SseEvent, None]:
        return self._events()

    async def _events(self) -> AsyncGenerator[SseEvent, None]:
        delay = 0.1
        while True:
            failure: ApiError | None = None
            try:
                async with contextlib.aclosing(self.client.events(self.thread_id, self.last_id)) as events:
                    async for event in events:
                        delay = 0.1
                        if event.id is None:
                            if self.live:
                                yield event
                            continue
                        if event.id <= self.last_id:  # replayed after a reconnect
                            continue
                        self.last_id = event.id
                        yield event
            except ApiError as exc:
                if not self.reconnect or exc.status not in (0, 502, 503, 504):
                    raise
                failure = exc
            if not self.reconnect:
                return
            if self.on_retry is not None:
                self.on_retry(failure)  # None: the gateway ended the stream (shutdown, a slow reader cut off)
            await asyncio.sleep(delay)  # a gateway restarting: back off, then resume after last_id
            delay = min(delay * 2, 2.0)


def follow(
    client: TreadleClient,
    thread_id: str,
    from_seq: int = 0,
    *,
    live: bool = False,
    on_retry: Callable[[ApiError | None], None] | None = None,
) -> Follow:
    return Follow(client, thread_id, from_seq, live=live, on_retry=on_retry)


async def signal_first(lines: AsyncIterator[str], event: asyncio.Event | None) -> AsyncIterator[str]:
    async for line in lines:
        if event is not None and not event.is_set():
            event.set()
        yield line
