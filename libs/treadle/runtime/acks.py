"""Acks that ride with the connection's next write instead of costing a write of their own.

``msg.ack()`` publishes, and a publish wakes nats-py's flusher, which writes to the socket. Messages that arrive
one at a time (every partitioned consumer) are acked one at a time, so each ack was a socket write of its own:
on loopback the costliest call in a worker (bench/consumer_cost.py). An ack changes nothing for the handler
that sent it, so it can wait a little: it is queued in the connection's pending buffer without waking the
flusher, goes out with whatever is written next (the next handler's request, another ack), and within
``window`` at the latest. A worker killed inside the window has its last messages redelivered after
``ack_wait``, as one killed between handling and acking always had.

nats-py has no public call for "queue without flushing": this uses its private pending buffer and flusher
(nats-py is pinned by the lock; tests/integration/test_consumer_acks.py checks the acks land).
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, ConnectionDrainingError
from nats.protocol.command import pub_cmd

WINDOW = 0.005  # seconds an ack may wait for company


class Acks:
    """The deferred acks of one connection's consumer."""

    def __init__(self, nc: Client, window: float = WINDOW) -> None:
        self._nc = nc
        self._window = window
        self._timer: asyncio.TimerHandle | None = None

    async def ack(self, msg: Msg) -> None:
        """Like ``msg.ack()``: raises as it would (closed connection, already acked), but does not write."""
        nc = self._nc
        if nc.is_closed:
            raise ConnectionClosedError
        if nc.is_draining_pubs:
            raise ConnectionDrainingError
        msg._check_reply()
        await nc._send_command(pub_cmd(msg.reply, "", b""))  # forces a flush only if the buffer is full
        nc.stats["out_msgs"] += 1
        msg._ackd = True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._window, self.flush)

    def flush(self) -> None:
        """Wake the flusher for what is pending (nothing to do when another write took it already)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._nc._pending_data_size > 0 and self._nc.is_connected:
            asyncio.ensure_future(self._nc._flush_pending())
