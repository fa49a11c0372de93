"""Subscriptions whose messages are handed to a plain function by the connection's read loop.

nats-py 2.16 (pinned in pyproject.toml) gives every message of a subscription with a callback to a queue, and
the subscription's own task takes it out and awaits the callback: a queue hand-over and a task step per
message. Most of what a worker receives needs none of that: a PubAck or a direct-get answer resolves a future
(``EventLog``), a pull delivery goes to a mailbox (``LingeringPull``), a reply resolves ``request``'s future.
Here such a subscription's queue is replaced by an object that calls a synchronous handler at once, in the
order the read loop parses them (bench/nats_client.py).

A handler must be quick and must not block: it runs inside the read loop. One that raises is logged and the
message dropped, as nats-py does with a callback's error; the connection goes on. Reconnects keep the
subscription object, so they keep the handler too. ``tests/integration/test_nats_direct.py`` covers order,
errors, unsubscribe, drain and requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

Handler = Callable[[Msg], None]


class _Direct:
    """Stands in for a subscription's pending queue: what nats-py puts in goes to the handler now."""

    __slots__ = ("_handler", "_sub")

    def __init__(self, sub: Subscription, handler: Handler) -> None:
        self._sub, self._handler = sub, handler

    def put_nowait(self, msg: Msg) -> None:
        self._sub._pending_size -= len(msg.data)  # nats-py counted it as waiting in the queue
        try:
            self._handler(msg)
        except Exception:
            log.exception("handler of %s failed; message dropped", self._sub.subject)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def task_done(self) -> None:
        pass

    async def join(self) -> None:
        """Nothing is ever waiting (``drain`` waits for the queue to empty)."""

    async def get(self) -> Msg:
        """The subscription's task waits here until it is stopped: nothing comes through a queue."""
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")


async def subscribe(nc: Client, subject: str, handler: Handler, queue: str = "") -> Subscription:
    """Like ``nc.subscribe(subject, cb=...)`` with a synchronous ``handler`` called by the read loop."""

    async def fallback(msg: Msg) -> None:  # nats-py's task, for a message queued before the swap (none is)
        handler(msg)

    sub = await nc.subscribe(subject, queue=queue, cb=fallback)
    sub._pending_queue = _Direct(sub, handler)  # type: ignore[assignment]
    return sub


_ORIGINAL_INIT_REQUEST_SUB = Client._init_request_sub


async def _init_request_sub(self: Any) -> None:
    """nats-py's reply subscription for ``request``, with its future resolved by the read loop."""
    await _ORIGINAL_INIT_REQUEST_SUB(self)
    prefix = bytes(self._resp_sub_prefix).decode()
    cut = len(prefix)
    answers = self._resp_map

    def resolve(msg: Msg) -> None:
        future = answers.get(msg.subject[cut:])
        if future is not None and not future.done():
            future.set_result(msg)

    for sub in self._subs.values():
        if sub.subject == prefix + "*":
            sub._pending_queue = _Direct(sub, resolve)


def install() -> None:
    """Make ``request`` of every nats-py client in this process take its replies from the read loop."""
    Client._init_request_sub = _init_request_sub  # type: ignore[method-assign]
