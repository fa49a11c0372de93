"""Publishes written at the end of the loop turn, without a trip through nats-py's flusher task.

nats-py 2.16 (pinned in pyproject.toml) queues a future for its flusher task at every publish that finds the
flusher idle, and the flusher wakes, writes and awaits ``drain``: a future, a queue hand-over and a task step
per write. A worker at low load writes one message at a time (an append, a reply, a request), so it paid that
for each. Here the first publish of a loop turn schedules one callback that writes whatever the turn queued:
the same bytes in the same order, written as soon (bench/nats_client.py).

The flusher keeps what it was for. When the broker reads slower than we write (the transport holds more than
``HIGH_WATER`` unsent), the callback hands the writing back to it, and it awaits ``drain``: the pending buffer
then fills up to nats-py's limit, where a publish waits, as before. A forced flush, a connection not (yet)
connected and any transport but plain TCP keep nats-py's own path. ``tests/integration/test_nats_writes.py``
checks order, back-pressure from a stopped broker and reconnection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client
from nats.aio.transport import TcpTransport

HIGH_WATER = 256 * 1024  # bytes the socket's transport may hold unsent before the flusher waits on it

_ORIGINAL = Client._flush_pending


async def _flush_pending(self: Any, force_flush: bool = False) -> Any:
    if force_flush or not self.is_connected or type(self._transport) is not TcpTransport:
        return await _ORIGINAL(self, force_flush)
    if not self._write_scheduled:
        self._write_scheduled = True
        asyncio.get_running_loop().call_soon(write_pending, self)
    return None


def write_pending(nc: Any) -> None:
    """Write what is pending now (the scheduled callback; also for a caller that must not wait a turn)."""
    nc._write_scheduled = False
    if not nc._pending_data_size or not nc.is_connected:
        return  # written already, or kept for the reconnect, which writes what is pending
    transport = nc._transport
    if transport._io_writer.transport.get_write_buffer_size() > HIGH_WATER:
        if nc._flush_queue is not None and nc._flush_queue.empty():
            nc._flush_queue.put_nowait(asyncio.get_running_loop().create_future())  # the flusher drains
        return
    transport.writelines(nc._pending)
    nc._pending = []
    nc._pending_data_size = 0


def install() -> None:
    """Make every nats-py client in this process write at the end of the loop turn."""
    Client._write_scheduled = False  # type: ignore[attr-defined]
    Client._flush_pending = _flush_pending  # type: ignore[method-assign]


def uninstall() -> None:
    """nats-py's own path again (for the tests that compare the two)."""
    Client._flush_pending = _ORIGINAL  # type: ignore[method-assign]
