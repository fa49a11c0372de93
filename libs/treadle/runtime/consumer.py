"""A durable pull consumer whose messages are handled per thread, in stream order, then acked.

Several consumers of one worker may share a :class:`Mailboxes`, so all work on a thread is serialised.
A handler that fails with a retryable error (the broker, a checkpoint service or a provider host is not
answering) is retried in place with backoff until it succeeds: a nak would let later messages of the same
thread overtake it. Anything else is terminated after ``max_failures`` and logged as dead-lettered, so a
poison message cannot wedge its thread forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from ..eventlog import tracing
from ..eventlog.errors import LogError
from ..eventlog.nats_patches import Acks, connection_of
from . import dead_letters, logs
from .mailbox import Mailboxes
from .metrics import DEAD_LETTERS, HANDLER_RETRIES
from .pull import LingeringPull

log = logging.getLogger(__name__)

Handle = Callable[[Msg], Awaitable[None]]
KeyOf = Callable[[Msg], str]


def thread_key(msg: Msg) -> str:
    """``treadle.<kind>.<tenant>.<thread>…`` → ``<tenant>.<thread>``."""
    parts = msg.subject.split(".", 4)
    return f"{parts[2]}.{parts[3]}"


LATER_DELAY = 0.5
MAX_LATER_DELIVERIES = 240  # ~2 minutes of waiting for an earlier message before giving up on this one


class Retryable(Exception):
    """A dependency did not answer; the same work will succeed once it is back."""


class Later(Exception):
    """This message must wait for an earlier one still to be (re)delivered: hand it back to the broker
    rather than retry in place, which would block the very message it waits for."""


class PullConsumer:
    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        durable: str,
        filters: list[str],
        handle: Handle,
        mailboxes: Mailboxes | None = None,
        key_of: KeyOf = thread_key,
        batch: int = 256,
        ack_wait: float = 6.0,
        max_ack_pending: int = 4096,
        max_failures: int = 8,
        max_waits: int = MAX_LATER_DELIVERIES,
    ) -> None:
        self._js = js
        self._stream = stream
        self._durable = durable
        self._filters = filters
        self._handle = handle
        self._key_of = key_of
        self._batch = batch
        self._ack_wait = ack_wait
        self._max_ack_pending = max_ack_pending
        self._max_failures = max_failures
        self._max_waits = max_waits
        self._mailboxes = mailboxes if mailboxes is not None else Mailboxes()  # an empty one is falsy: not `or`
        self._beats: dict[int, tuple[Msg, float]] = {}  # in hand: when its next in_progress is due
        self._sweep: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None
        self._pull: LingeringPull | None = None
        self._stopping = False
        self._running: set[asyncio.Task[Any]] = set()  # mailbox tasks at work on this consumer's messages
        self._cut: set[asyncio.Task[Any]] = set()  # of those, the ones stop() cancelled
        self._idle = asyncio.Event()  # set while none is
        self._idle.set()
        self._replays: Subscription | None = None
        self._acks = Acks(connection_of(js))

    async def start(self) -> None:
        config = ConsumerConfig(
            durable_name=self._durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._ack_wait,
            max_ack_pending=self._max_ack_pending,
            filter_subjects=self._filters if len(self._filters) > 1 else None,
            filter_subject=self._filters[0] if len(self._filters) == 1 else None,
        )
        await self._js.add_consumer(self._stream, config)
        self._replays = await connection_of(self._js).subscribe(
            dead_letters.replay_subject(self._durable), queue="replay", cb=self._replay
        )
        self._pull = LingeringPull(self._js, self._stream, self._durable, self._batch, sink=self._deliver)
        await self._pull.start()
        self._task = asyncio.create_task(self._loop(self._pull), name=f"consumer:{self._durable}")

    async def _loop(self, pull: LingeringPull) -> None:
        while not self._stopping:  # deliveries go to _deliver as they come; this keeps a request outstanding
            for msg in await pull.take():
                self._deliver(msg)

    def _deliver(self, msg: Msg) -> None:
        try:
            key = self._key_of(msg)
        except (IndexError, ValueError):  # a subject of the wrong shape: it can never be handled
            self._mailboxes.submit(
                ("malformed", self._durable), functools.partial(self._dead_letter, msg, "malformed subject", 1)
            )
            return
        self._mailboxes.submit(key, functools.partial(self._process, msg))

    async def _dead_letter(self, msg: Msg, why: str, failures: int) -> None:
        DEAD_LETTERS.labels(self._durable).inc()
        try:  # kept with its reason for `treadle dead-letters` (the log keeps the message itself anyway)
            await dead_letters.store(
                self._js,
                consumer=self._durable,
                stream=self._stream,
                stream_seq=msg.metadata.sequence.stream,
                subject=msg.subject,
                reason=why,
                failures=failures,
                data=msg.data,
            )
        except Exception as exc:  # a dead letter must never stop the consumer: the log line below still says it
            log.warning("%s: could not store the dead letter: %r", self._durable, exc)
        log.error(
            "%s: dead-lettering %s (seq %s) after %d failures: %s",
            self._durable,
            msg.subject,
            msg.metadata.sequence.stream,
            failures,
            why,
        )
        await msg.term()

    async def _replay(self, request: Msg) -> None:
        """`treadle dead-letters replay`: the dead-lettered message, read again from its stream, handled as a
        delivery of this consumer (its ack then lands on a sequence already settled, which the broker ignores)."""
        try:
            asked = msgspec.json.decode(request.data, type=dict[str, str | int])
            seq = int(asked["seq"])
            if asked.get("stream") != self._stream or seq <= 0:
                raise ValueError(f"not a message of {self._stream}")
            raw = await self._js.get_msg(self._stream, seq)
            assert raw.subject is not None
            reply = f"$JS.ACK.{self._stream}.{self._durable}.1.{seq}.0.{time.time_ns()}.0"
            msg = Msg(
                _client=connection_of(self._js),
                subject=raw.subject,
                reply=reply,
                data=raw.data or b"",
                headers=raw.headers,
            )
            self._mailboxes.submit(self._key_of(msg), functools.partial(self._process, msg))
        except Exception as exc:
            await request.respond(f"refused: {exc}".encode())
            return
        await request.respond(b"accepted")

    def _keep_alive(self) -> None:
        """While a handler works, tell the broker so (``in_progress``) about every ``ack_wait``/3 (one sweep every
        ``ack_wait``/6 for all messages in hand, not a timer per message): ``ack_wait`` can stay short, and a
        crashed worker's messages come back in seconds, not minutes. The sweep runs only while work is in hand."""
        self._sweep = None
        if not self._beats:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, (msg, due) in list(self._beats.items()):
            if due <= now:
                asyncio.ensure_future(msg.in_progress())
                self._beats[key] = (msg, now + self._ack_wait / 3)
        self._sweep = loop.call_later(self._ack_wait / 6, self._keep_alive)

    async def _process(self, msg: Msg) -> None:
        if self._stopping:  # fetched, then the partition went elsewhere: hand it to the next owner now
            with contextlib.suppress(Exception):
                await msg.nak()
            return
        loop = asyncio.get_running_loop()
        self._beats[id(msg)] = (msg, loop.time() + self._ack_wait / 3)
        if self._sweep is None:
            self._sweep = loop.call_later(self._ack_wait / 6, self._keep_alive)
        # The handler runs in the mailbox's own task (a task of its own per message cost a task, a shield and a
        # wake-up). stop() may cancel it: that cancel is taken back here and the mailbox goes on with the rest of
        # the thread's work (commands share it); a cancel of the mailbox itself goes on up.
        current = asyncio.current_task()
        assert current is not None  # mailbox jobs run in the mailbox's task
        self._running.add(current)
        self._idle.clear()
        cut = False
        try:
            await self._settle(msg)
        except asyncio.CancelledError:
            if current not in self._cut or current.cancelling() > 1:
                raise
            cut = True
        finally:
            self._running.discard(current)
            del self._beats[id(msg)]
            if current in self._cut:
                self._cut.discard(current)
                current.uncancel()  # stop()'s cancel is spent here, whether the handler let it through or not
            if not self._running:
                self._idle.set()
        if cut:  # stop() cut the handler short: its message goes to the next owner now
            with contextlib.suppress(Exception):
                await msg.nak()

    async def _settle(self, msg: Msg) -> None:
        ids = logs.ids_of(msg.data)
        with (
            logs.bound(**ids),
            tracing.nats_span(
                f"handle {self._durable}",
                msg.subject,
                "process",
                msg.headers,
                kind="consumer",
                consumer_group_name=self._durable,
            ),
        ):
            await self._settle_bound(msg)  # every log line about this message names its thread and run

    async def _settle_bound(self, msg: Msg) -> None:
        delay = 0.05
        failures = 0
        last: Exception | None = None
        while True:
            try:
                await self._handle(msg)
                await self._acks.ack(msg)
                return
            except asyncio.CancelledError:
                raise
            except Later as exc:
                if msg.metadata.num_delivered >= self._max_waits:  # what it waits for never came
                    await self._dead_letter(msg, f"still waiting: {exc}", msg.metadata.num_delivered)
                    return
                log.info("%s: %s; redelivering later", self._durable, exc)
                await msg.nak(delay=LATER_DELAY)
                return
            except msgspec.DecodeError as exc:  # malformed payload: no retry can fix it
                await self._dead_letter(msg, f"invalid payload: {exc}", 1)
                return
            except (LogError, Retryable) as exc:
                last = exc
                if isinstance(exc, LogError) and not exc.retryable:
                    log.error("%s: %s refused by the log: %r", self._durable, msg.subject, exc)
                    failures = self._max_failures
                else:
                    log.info("%s: retrying %s after %r", self._durable, msg.subject, exc)
                    failures -= 1  # dependency outages never exhaust a message's budget
            except Exception as exc:
                last = exc
                log.exception("%s: handler failed on %s", self._durable, msg.subject)
            failures += 1
            HANDLER_RETRIES.labels(self._durable).inc()
            if self._stopping:
                # The partition is going elsewhere (or the worker stops): a conflict now may be the new owner's
                # append fencing this one, so no more retries here; the next owner gets the message at once.
                with contextlib.suppress(Exception):
                    await msg.nak()
                return
            if failures >= self._max_failures:
                await self._dead_letter(msg, f"handler kept failing (last: {last!r})", failures)
                return
            await asyncio.sleep(delay)  # backoff between retries of a failing handler, not synchronisation
            delay = min(delay * 2, 5.0)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop fetching and let the handlers at work finish for up to ``timeout``, then cancel them. What was
        fetched but not started is nak'ed, what was cut short is redelivered: both go to the next owner."""
        self._stopping = True
        if self._replays is not None:
            with contextlib.suppress(Exception):
                await self._replays.unsubscribe()
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        # End the pull request before anything is nak'ed: it must not be handed the very messages given back
        # for the next owner. What it had delivered but the loop never took goes back too.
        for msg in await self._pull.close() if self._pull is not None else []:
            with contextlib.suppress(Exception):
                await msg.nak()
        if self._running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout)
            for task in list(self._running):
                self._cut.add(task)
                task.cancel()
            await self._idle.wait()
        self._acks.flush()  # the last acks go now, not after the window
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None


class Work(Protocol):
    """Anything a partition's lease licenses besides its consumers (the coordinator's watch of lost volumes)."""

    async def start(self) -> None: ...
    async def stop(self, timeout: float) -> None: ...


class PartitionConsumers:
    """The consumers (and other work) of one leased partition, started and stopped together (runtime/leases.py)."""

    def __init__(self, consumers: list[PullConsumer | Work]) -> None:
        self.consumers = consumers

    async def start(self) -> None:
        for consumer in self.consumers:
            await consumer.start()

    async def stop(self, timeout: float = 10.0) -> None:
        await asyncio.gather(*(c.stop(timeout) for c in self.consumers))
