"""A KV bucket's latest records kept in memory by one long-lived watch, for readers that look every few seconds
(provider hosts' heartbeats and sessions, the volumes' heartbeats): one consumer per bucket for the process's
life, where ``kv_latest`` creates and deletes one per look.

The view is complete only from an exact read on: it opens with ``kv_latest.read`` (a pull consumer's count is
exact, where a watch's end-of-read marker can come early), then an ordered push consumer delivers every change
after the last record read, in stream order. While it is not complete (opening; or the connection reconnected
since, so the broker may have restarted and the view is read again from the start) ``read`` answers with a
complete read of the bucket instead: a reader never judges on a partial view. ``read(confirmed=True)`` also
asks the stream for its last sequence (one request, no consumer) and answers once the view has applied it, as
of a moment during the call like a read of the bucket; a view that does not get there in ``CATCH_UP`` seconds
is opened again, and a complete read answers (a stalled watch looks like a quiet bucket, where records stop
moving, and would pass for heartbeats stopped).

nats-server before 2.11 says nothing when a bucket's TTL removes a record, so the view drops it itself: the TTL
after it arrived (never before the broker, which counts from its storing). A record of the opening read is
older; it is dropped once its broker timestamp says it is that old and a get confirms it gone (the two clocks
may differ).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from treadle.eventlog import kv_latest, nats_patches
from treadle.eventlog.kv_latest import Latest

log = logging.getLogger(__name__)

RETRY = 1.0  # seconds between a view closing and its opening again
CATCH_UP = 1.0  # seconds a confirmed read waits for the watch to deliver what is stored; then it opens again
_STILL_THERE = 10  # a record the clocks said was gone but a get found: looked at again after ttl / this


class KvView:
    """``start`` once, ``read`` whenever, ``stop`` at the end."""

    def __init__(self, js: JetStreamContext, bucket: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._js, self._bucket, self._clock = js, bucket, clock
        self._ttl: float | None = None  # the bucket's, read at each opening
        self._nc: NATS = nats_patches.connection_of(js)  # whose reconnect count says the view must be read again
        self._prefix, self._stream = f"$KV.{bucket}.", f"KV_{bucket}"
        self._records: dict[str, Latest] = {}
        self._expires: dict[str, tuple[float, bool]] = {}  # key -> (when dropped on our clock, confirm with a get)
        self._applied = 0  # the last stream sequence the view holds the bucket up to
        self._delivered = asyncio.Condition()  # notified at each change the watch delivers
        self._complete = False
        self._reconnects = 0
        self._reopen = asyncio.Event()
        self._ready = asyncio.Event()  # set while complete
        self._sub: Any = None
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None
        self._opening = 0  # which opening's watch delivers: a closed one's queued messages are dropped
        self.opened = 0  # how many times the view was read completely (tests, logs)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"kv-view:{self._bucket}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    @property
    def complete(self) -> bool:
        """True while the view holds the bucket: read completely, followed since, no reconnect in between."""
        if self._complete and self._nc.stats["reconnects"] != self._reconnects:
            self._close_soon("the connection reconnected")
        return self._complete

    async def until_complete(self) -> None:
        await self._ready.wait()

    async def read(self, confirmed: bool = False) -> dict[str, Latest]:
        """Every key's latest record: the view's when complete, else a complete read of the bucket. ``confirmed``:
        as of a moment during the call, like a read of the bucket (the view answers once it has applied the
        stream's last sequence, which it is asked for)."""
        if confirmed and self.complete:
            last = (await self._js.stream_info(self._stream)).state.last_seq
            if self._applied < last:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CATCH_UP):
                        async with self._delivered:
                            await self._delivered.wait_for(lambda: self._applied >= last or not self._complete)
            if self._complete and self._applied < last:
                self._close_soon(f"its watch did not deliver sequence {last} in {CATCH_UP} s")
        if not self.complete:
            return await kv_latest.latest(self._js, self._bucket)
        await self._expire()
        return dict(self._records)

    def _close_soon(self, why: str) -> None:
        log.info("view of %s opens again: %s", self._bucket, why)
        self._complete = False
        self._ready.clear()
        self._reopen.set()

    async def _run(self) -> None:
        while True:
            try:
                await self._open()
                await self._reopen.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker away: the next opening reads everything again
                log.warning("view of %s failed, opening it again: %r", self._bucket, exc)
            finally:
                self._complete = False
                self._ready.clear()
                await self._close()
            await asyncio.sleep(RETRY)  # backoff while the broker is away

    async def _open(self) -> None:
        self._opening += 1
        self._reopen.clear()
        self._reconnects = self._nc.stats["reconnects"]
        self._kv = await self._js.key_value(self._bucket)
        info = await self._js.stream_info(self._stream)
        self._ttl, before = info.config.max_age or None, info.state.last_seq
        records, last = await kv_latest.read(self._js, self._bucket)
        now, wall = self._clock(), datetime.now(UTC)
        self._records, self._applied = records, max(before, last)
        self._expires = {}
        if self._ttl is not None:
            for key, record in records.items():
                age = (wall - record.stored_at).total_seconds() if record.stored_at else 0.0
                self._expires[key] = (now + self._ttl - min(max(age, 0.0), self._ttl), True)
        self._sub = await self._js.subscribe(
            self._prefix + ">",
            stream=self._stream,
            cb=functools.partial(self._on_msg, self._opening),
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            config=api.ConsumerConfig(opt_start_seq=self._applied + 1),
            inactive_threshold=30.0,
        )
        self.opened += 1
        self._complete = True
        self._ready.set()
        if self._nc.stats["reconnects"] != self._reconnects:  # during the read: it may be from an earlier broker
            self._close_soon("the connection reconnected while it was read")

    async def _close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):  # the connection may be gone with it
                await sub.unsubscribe()

    async def _on_msg(self, opening: int, msg: Msg) -> None:
        if opening != self._opening:
            return  # a closed watch's message still queued: the opening read since has it
        key, record = kv_latest.entry(msg, self._prefix)
        self._applied = max(self._applied, msg.metadata.sequence.stream)
        if record is None:
            self._records.pop(key, None)
            self._expires.pop(key, None)
        else:
            self._records[key] = record
            if self._ttl is not None:
                self._expires[key] = (self._clock() + self._ttl, False)
        async with self._delivered:
            self._delivered.notify_all()

    async def _expire(self) -> None:
        now = self._clock()
        for key, due in list(self._expires.items()):
            at, confirm = due
            if at > now:
                continue
            record = self._records.get(key)
            if confirm and record is not None and self._kv is not None and self._ttl is not None:
                try:
                    found = await self._kv.get(key)
                except NotFoundError:
                    found = None
                if self._expires.get(key) != due:
                    continue  # the watch delivered a change meanwhile
                if found is not None and found.revision == record.revision:  # our clock ran ahead of the broker's
                    self._expires[key] = (self._clock() + self._ttl / _STILL_THERE, True)
                    continue
                if found is not None and (found.revision or 0) > record.revision:  # the watch is delivering it
                    self._expires[key] = (self._clock() + self._ttl, False)
                    continue
            self._records.pop(key, None)
            self._expires.pop(key, None)
