"""A pull request kept outstanding on a durable consumer, its deliveries taken as they come.

A JetStream pull request for a batch hands over each message the moment it is stored, until the batch is used
up or the request expires. Asking for one message at a time instead (``fetch(1)``, then a no-wait fetch for
the rest) costs a request, a reply inbox wait and a timer per message whenever a consumer sees one message at
a time, which is what partitions do to every consumer (bench/profile.py: with 8 partitions under the scenario-B
load, one pull round trip per delivered message). Here a new request is sent only when the last one is used
up, expired (status 408) or ended by the server (409, e.g. a leader change), or went unanswered (the broker
restarted and forgot it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from ..eventlog import nats_patches

log = logging.getLogger(__name__)

# How long one request waits at the server. Messages are delivered the moment they arrive either way; this only
# sets how often an idle consumer asks again, and how soon a request the broker forgot (a restart) is replaced.
IDLE_WAIT = 5.0
LAPSE_GRACE = 1.0  # past the expiry without its 408: the request is lost (the broker restarted)
ERROR_BACKOFF = 0.5  # after a request the server refused (consumer gone, leader moving)
_HEARTBEAT, _EXPIRED = "100", "408"


class LingeringPull:
    """The deliveries of one durable pull consumer. :meth:`take` waits for deliveries and returns all that
    have arrived since it was last called, in delivery order; with a ``sink``, each delivery goes to it the
    moment it arrives instead (one task wake-up less per message), and :meth:`take` only keeps the request
    outstanding (it returns what arrives once :meth:`close` began)."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        durable: str,
        batch: int = 256,
        expires: float = IDLE_WAIT,
        sink: Callable[[Msg], None] | None = None,
    ) -> None:
        self._nc = nats_patches.connection_of(js)
        self._subject = f"{nats_patches.api_prefix(js)}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._durable = durable
        self._request_body = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
        self._batch, self._expires = batch, expires
        self._ready: list[Msg] = []
        self._wake = asyncio.Event()
        self._left = 0  # deliveries the outstanding request may still bring; 0: none outstanding
        self._retry_after = 0.0  # >0: the last request failed or was refused; ask again after this long
        self._lapse: asyncio.TimerHandle | None = None
        self._asking: asyncio.Future[Any] | None = None  # the publish of the last request
        self._sub: Subscription | None = None
        self._sink = sink

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox()
        self._sub = await nats_patches.subscribe(self._nc, self._inbox, self._on_msg)
        await self._request()

    async def _request(self) -> None:
        self._ask()
        if self._asking is not None:
            await self._asking

    def _ask(self) -> None:
        """Send the next request: counted as outstanding at once, published by a task of its own (the
        deliveries' handler runs in the connection's read loop, which must not wait)."""
        if self._lapse is not None:
            self._lapse.cancel()
        self._left = self._batch
        self._lapse = asyncio.get_running_loop().call_later(self._expires + LAPSE_GRACE, self._lapsed)
        self._asking = asyncio.ensure_future(self._publish_request())

    async def _publish_request(self) -> None:
        try:
            await self._nc.publish(self._subject, self._request_body, reply=self._inbox)
        except Exception as exc:  # the connection is closed or its buffer full: the lapse asks again
            log.warning("%s: pull request failed: %r", self._durable, exc)

    def _lapsed(self) -> None:
        self._lapse = None
        self._left = 0
        self._wake.set()

    def _on_msg(self, msg: Msg) -> None:
        status = JetStreamContext.is_status_msg(msg)
        if status is None:
            if self._sink is not None:
                self._sink(msg)
            else:
                self._ready.append(msg)
                self._wake.set()
            self._left -= 1
            if self._left <= 0:
                self._ask()
            return
        if status == _HEARTBEAT:
            return
        # The request is over: expired idle (408, ask again at once), or refused (consumer deleted, leader moving,
        # too many waiting requests: ask again after a pause, so a consumer that is gone does not spin).
        if status != _EXPIRED:
            log.info("%s: pull request ended: %s %s", self._durable, status, (msg.headers or {}).get("Description", ""))
            self._retry_after = ERROR_BACKOFF
            self._left = 0
            self._wake.set()
            return
        self._ask()

    async def take(self, timeout: float | None = None) -> list[Msg]:
        """Wait for at least one delivery, or ``timeout`` (then ``[]``); return everything delivered so far."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._ready:
            if self._left <= 0:  # expired unanswered, or refused
                if self._retry_after:
                    await asyncio.sleep(self._retry_after)  # backoff after a refusal, not synchronisation
                    self._retry_after = 0.0
                await self._request()
            if deadline is None:
                await self._wake.wait()
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), max(deadline - loop.time(), 0))
                except TimeoutError:
                    return []
            self._wake.clear()
        msgs, self._ready = self._ready, []
        return msgs

    async def close(self, timeout: float = 2.0) -> list[Msg]:
        """Stop asking and take in what is already on its way: returns the deliveries nobody took, which the
        caller gives back (or leaves unacknowledged) for the next owner."""
        self._sink = None  # what the drain brings in is returned, not handed on
        if self._lapse is not None:
            self._lapse.cancel()
        if self._sub is not None:
            try:
                # Interest ends first, so the server hands nothing more to this inbox; the round trip brings in
                # what it had sent already.
                await asyncio.wait_for(self._sub.drain(), timeout)
            except Exception:
                with contextlib.suppress(Exception):
                    await self._sub.unsubscribe()
        msgs, self._ready = self._ready, []
        return msgs
