"""Reports one provider turn: normalised events to ``TREADLE_PROVIDER`` in order (each carrying the turn's trace
context), raw text live.

What a runtime reports in one burst (read in one go) is sent together, once the burst has been handed over:
its normalised events as one provider message (``ProviderEvent.then``; while one is being stored, the next
collects what comes meanwhile), its raw chunks as one live message, always before the next durable one, so a
UI never sees live text after the event that completes its message. The turn's end waits until everything
is stored.

A turn's start waits up to ``START_HOLD`` for the turn's first output (a model's first text): stored together, the
supervisor appends that text's ``message.delta`` carrying the run's start (``MessageDelta.started``), a provider
message and a durable event fewer per turn. A start with nothing after it within the hold is stored alone.

A message's completion that would go alone waits up to ``COMPLETION_HOLD`` for what the runtime reports next:
a turn's last message is completed a few ms before the turn's end (Codex ~13 ms, Claude Code ~3-16 ms), and
stored together the supervisor appends one event (``RunEnded.message``) where there were two — a provider
message and a durable event fewer per turn, on the turn's critical end. Only a message already opened by a
stored delta waits: its place in the thread is taken, so the wait reorders nothing (live text showed it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import ConnectionClosedError

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.core.provider_events import LiveDelta
from treadle.core.trimming import MAX_EVENT_BYTES, within
from treadle.eventlog import subjects, tracing
from treadle.eventlog.log import acked_publish
from treadle.providers.coalesce import Coalescer

_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)
TEXT_PIECE_CHARS = 32_768  # a larger raw chunk is published in pieces: even as 6-byte escapes it fits
MAX_BATCH = 64  # events in one provider message; with this many waiting, the reporting runtime waits too
START_HOLD_LOOP_TURNS = 8  # how long a turn's start waits for its end in the same burst (``_end_follows``)
# Seconds a turn's start waits for the turn's first output: with it, the supervisor appends one event where there
# were two (the first text's ``message.delta`` carries ``run.started``); users see the run running that much later,
# so it stays below what they notice (a real model's first token mostly comes later: its start then goes alone)
START_HOLD = 0.05
COMPLETION_HOLD = 0.05  # seconds an opened message's lone completion waits for the next report (the turn's end)


class TurnPublisher:
    def __init__(
        self,
        nc: NATS,
        *,
        tenant: str,
        thread: str,
        session_id: str,
        provider_thread_id: str,
        run_id: str,
        attempt_id: str,
        ids: IdFactory,
    ) -> None:
        self._nc = nc
        self._ids = ids
        self._subject = subjects.provider(tenant, thread, provider_thread_id)
        self._live = subjects.live(tenant, thread)
        self._base = dict(
            tenant=tenant,
            thread=thread,
            session_id=session_id,
            provider_thread_id=provider_thread_id,
            run_id=run_id,
            attempt_id=attempt_id,
        )
        self._lock = asyncio.Lock()  # other reports wait while the turn's end (or a full outbox) is being stored
        self._index = 0  # numbers the turn's events, so the supervisor can fold them in order after a crash
        self._outbox: list[pe.AnyBody] = []  # events not yet sent, in order
        self._sender: asyncio.Future[Any] | None = None
        self._reported = asyncio.Event()  # set when an event joins the outbox (ends a completion's hold)
        self._opened: set[str] = set()  # messages with a delta handed to the broker: their place is taken
        self._buffers: dict[str, tuple[Coalescer, str]] = {}
        self._live_queue: list[LiveDelta] = []  # raw chunks not yet sent live, consecutive ones of a message merged
        self._live_sender: asyncio.Future[Any] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # The turn's trace context, taken once (made inside the turn's span): every event of the turn carries it
        self._trace = tracing.inject(None)

    async def event(self, body: pe.AnyBody) -> None:
        async with self._lock:
            if isinstance(body, pe.TurnCompleted):
                # Text of a message the provider never completed (an interrupt cut it off) is still buffered:
                # stored before the turn's end, so the run's end closes that message with all that streamed.
                for message_id in list(self._buffers):
                    self._flush_buffer(message_id)
            if isinstance(body, pe.TextCompleted):
                self._drop_unsent_text(body.message_id)
            self._publish(body)
            if isinstance(body, pe.TurnCompleted) or len(self._outbox) >= MAX_BATCH:
                await self.drain()

    def _drop_unsent_text(self, message_id: str) -> None:
        """A completion carries its message's whole text: when the outbox ends with that message's unsent
        deltas, the completion takes the place of the first (where the message begins) and the rest go. With
        anything else after them, they stay, so no other event is seen after the message's completion."""
        start = len(self._outbox)
        while start and _delta_of(self._outbox[start - 1], message_id):
            start -= 1
        del self._outbox[start:]

    def _publish(self, body: pe.AnyBody) -> None:
        self._raise_failure()  # the connection closed under an earlier event: nothing more can be stored
        self._outbox.append(body)
        self._reported.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send_outbox())
            self._sender.add_done_callback(_retrieved)

    async def drain(self) -> None:
        """Wait until every event handed over is stored (raises what stopped the sending)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.wait([self._sender])  # waiting is cancellable; the sending is not cut short by it
        self._raise_failure()

    def _raise_failure(self) -> None:
        sender = self._sender
        if sender is not None and sender.done() and not sender.cancelled() and (failure := sender.exception()):
            raise failure

    async def _send_outbox(self) -> None:
        while self._outbox:
            if isinstance(self._outbox[0], pe.TurnStarted):
                if len(self._outbox) == 1:
                    await self._next_report(START_HOLD)  # the first output, which carries the start
                await self._end_follows()
            elif self._opened_completion_last():
                await self._next_report(COMPLETION_HOLD)
            await self._send_live()
            batch, self._outbox = self._outbox[:MAX_BATCH], self._outbox[MAX_BATCH:]
            self._opened.update(body.message_id for body in batch if isinstance(body, pe.TextDelta))
            await self._store(batch)

    def _opened_completion_last(self) -> bool:
        last = self._outbox[-1]
        return isinstance(last, pe.TextCompleted) and last.message_id in self._opened and len(self._outbox) < MAX_BATCH

    async def _next_report(self, timeout: float) -> None:
        """Wait until the runtime reports anything more, at most ``timeout`` seconds."""
        self._reported.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reported.wait(), timeout)

    async def _end_follows(self) -> bool:
        """Whether the turn's end follows its start in the same burst: what a runtime reports without waiting for
        anything (a turn over at once; the scripted runtime) lands within a few loop turns, no timer. The start
        then goes with it, and the supervisor appends the run's end carrying its start (``RunEnded.started``),
        one event where there were two."""
        for _ in range(START_HOLD_LOOP_TURNS):
            if any(isinstance(body, pe.TurnCompleted) for body in self._outbox):
                return True
            await asyncio.sleep(0)
        return any(isinstance(body, pe.TurnCompleted) for body in self._outbox)

    async def _store(self, bodies: list[pe.AnyBody]) -> None:
        """Store ``bodies`` (in order) in as few messages as fit, retrying until stored: a lost provider event
        would leave its run waiting forever, and the stream's dedupe window makes a resend that landed harmless."""
        budget = min(MAX_EVENT_BYTES, self._nc.max_payload // 4)
        event = pe.ProviderEvent(
            id=self._ids.next("evt"),
            index=self._index + 1,
            at=datetime.now(UTC),
            body=bodies[0],
            then=bodies[1:],
            **self._base,
        )
        payload = _encode(event)
        if len(payload) > budget and len(bodies) > 1:  # too much for one message: halves, in order
            half = len(bodies) // 2
            await self._store(bodies[:half])
            await self._store(bodies[half:])
            return
        if len(payload) > budget:  # its body is cut down to fit (the event's own fields are a few hundred bytes)
            event = msgspec.structs.replace(event, body=within(bodies[0], budget))
            payload = _encode(event)
        self._index += len(bodies)
        headers = {"Nats-Msg-Id": event.id}
        if self._trace:
            headers.update(self._trace)
        delay = 0.1
        while True:
            try:
                await acked_publish(self._nc, self._subject, payload, headers)
                return
            except (asyncio.CancelledError, ConnectionClosedError):
                raise  # a closed connection never comes back: the host is going away, and its sessions with it
            except Exception as exc:  # the broker is restarting or unreachable: keep the turn's events
                log.warning("provider event %s not stored yet (%r); retrying", event.id, exc)
                await asyncio.sleep(delay)  # backoff while the broker is away
                delay = min(delay * 2, 2.0)

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        for start in range(0, len(chunk), TEXT_PIECE_CHARS):
            await self._text_piece(message_id, node_id, chunk[start : start + TEXT_PIECE_CHARS])

    async def _text_piece(self, message_id: str, node_id: str, chunk: str) -> None:
        self._queue_live(message_id, node_id, chunk)
        coalescer, _ = self._buffers.setdefault(message_id, (Coalescer(), node_id))
        ready = coalescer.add(chunk)
        if ready is not None:
            await self.event(pe.TextDelta(message_id=message_id, node_id=node_id, text=ready))
        elif message_id not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[message_id] = loop.call_later(coalescer.due_in(), self._on_timer, message_id)

    def _queue_live(self, message_id: str, node_id: str, chunk: str) -> None:
        last = self._live_queue[-1] if self._live_queue else None
        if last and last.message_id == message_id and len(last.text) + len(chunk) <= TEXT_PIECE_CHARS:
            self._live_queue[-1] = msgspec.structs.replace(last, text=last.text + chunk)
        else:
            self._live_queue.append(
                LiveDelta(
                    run_id=self._base["run_id"],
                    attempt_id=self._base["attempt_id"],
                    message_id=message_id,
                    node_id=node_id,
                    text=chunk,
                )
            )
        if self._live_sender is None or self._live_sender.done():
            # A task runs once the caller yields: the rest of this burst is queued by then.
            self._live_sender = asyncio.ensure_future(self._send_live())

    async def _send_live(self) -> None:
        """Best effort, as live text is: on a failure the rest is dropped (the durable events carry the text).
        One chunk is taken at a time, so the task and a durable event's send keep the chunks in order."""
        while self._live_queue:
            delta = self._live_queue.pop(0)
            try:
                await self._nc.publish(self._live, _encode(delta))
            except Exception as exc:
                log.debug("live text of %s not sent: %r", delta.message_id, exc)
                self._live_queue.clear()

    def _on_timer(self, message_id: str) -> None:
        self._timers.pop(message_id, None)
        with contextlib.suppress(Exception):  # a sending that failed is raised at the turn's next report
            self._flush_buffer(message_id)

    def _flush_buffer(self, message_id: str) -> None:
        timer = self._timers.pop(message_id, None)
        if timer:
            timer.cancel()
        entry = self._buffers.get(message_id)
        if entry is None:
            return
        coalescer, node_id = entry
        text = coalescer.flush()
        if text:
            self._publish(pe.TextDelta(message_id=message_id, node_id=node_id, text=text))

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        """The full text supersedes whatever is still buffered, so the buffer is dropped, not flushed."""
        timer = self._timers.pop(message_id, None)
        if timer:
            timer.cancel()
        self._buffers.pop(message_id, None)
        await self.event(pe.TextCompleted(message_id=message_id, node_id=node_id, text=text))

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


def _delta_of(body: pe.AnyBody, message_id: str) -> bool:
    return isinstance(body, pe.TextDelta) and body.message_id == message_id


def _retrieved(sender: asyncio.Future[Any]) -> None:
    """A sender nobody waits for any more (its turn was cancelled) must not log 'exception never retrieved'."""
    if not sender.cancelled() and (failure := sender.exception()) is not None:
        log.info("provider events not stored: %r", failure)
