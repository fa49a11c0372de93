"""The thread's Server-Sent Events: the wire format the gateway speaks, and :class:`Follow`, which reads a
thread's durable events from a sequence on and resumes after a dropped stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING

from .errors import ApiError
from .sse import Resume, SseEvent, SseParser

if TYPE_CHECKING:
    from .http import TreadleClient


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """SSE events from an async iterator of lines."""
    parser = SseParser()
    async for line in lines:
        if (event := parser.feed(line)) is not None:
            yield event


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
        self.client, self.thread_id = client, thread_id
        self.reconnect, self.on_retry = reconnect, on_retry
        self._state = Resume(from_seq, live=live)  # the typed clients' bookkeeping of a resuming stream

    @property
    def last_id(self) -> int:
        return self._state.last_id

    def __aiter__(self) -> AsyncGenerator[SseEvent, None]:
        return self._events()

    async def _events(self) -> AsyncGenerator[SseEvent, None]:
        state = self._state
        while True:
            failure: ApiError | None = None
            try:
                # Without live deltas the gateway is asked for none: no frame per raw chunk, sent to be dropped
                stream = self.client.events(self.thread_id, state.last_id, live=state.live)
                async with contextlib.aclosing(stream) as events:
                    async for event in events:
                        if state.accept(event):  # none replayed twice after a reconnect
                            yield event
            except ApiError as exc:
                if not self.reconnect or not exc.retryable:
                    raise
                failure = exc
            if not self.reconnect:
                return
            if self.on_retry is not None:
                self.on_retry(failure)  # None: the gateway ended the stream (shutdown, a slow reader cut off)
            await asyncio.sleep(state.backoff())  # a gateway restarting: back off, then resume after last_id


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
