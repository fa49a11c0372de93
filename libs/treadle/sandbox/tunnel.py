"""The two ends of an egress tunnel as asyncio protocols: bytes go straight from one transport to the other.

Streams (StreamReader/Writer) cost a buffer copy and a task switch per chunk, a quarter of loopback speed;
here each chunk is written to the peer from ``data_received``, and a peer that cannot keep up pauses the
reading of this end (``pause_writing``/``resume_writing``). Before the ends are joined, what arrives is
kept in ``pending`` (the CONNECT request head and anything right behind it), bounded by pausing reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast


class Blocked(Exception):
    """Raised by an end's ``inspect``: the tunnel ends, once ``answer`` is sent to that end's own party."""

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.answer = answer


class TunnelEnd(asyncio.Protocol):
    # Set by connection_made, which the loop calls first and before the end is handed to anyone (on_connect,
    # or create_connection's return): every method but abort runs after it.
    transport: asyncio.Transport

    def __init__(self, keep_at_most: int, on_connect: Callable[[TunnelEnd], None] | None = None) -> None:
        self.keep_at_most = keep_at_most
        self._on_connect = on_connect
        self.peer: TunnelEnd | None = None
        self.pending = bytearray()
        self.refused = False
        self.eof = False  # the other party will send nothing more (end of stream or connection lost)
        self.changed = asyncio.Event()  # set on every arrival, end of stream or loss before joining
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # What this end receives passes through it before its peer gets it (None: straight through)
        self.inspect: Callable[[bytes], bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream protocol gets a stream transport; uvloop's are not asyncio.Transport subclasses
        self.transport = cast(asyncio.Transport, transport)
        if self._on_connect is not None:
            self._on_connect(self)

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            if self.inspect is not None:
                try:
                    data = self.inspect(data)
                except Blocked as blocked:
                    self._block(blocked.answer)
                    return
            self.peer.transport.write(data)
            return
        if self.refused:
            return
        self.pending += data
        if b"\r\n\r\n" in self.pending or len(self.pending) >= self.keep_at_most:
            self.transport.pause_reading()  # nothing more until joined (or refused)
        self.changed.set()

    def eof_received(self) -> bool:
        self.eof = True
        self.changed.set()
        if self.refused:
            self.transport.close()
        if self.peer is not None:
            _pass_eof(self, self.peer)
        return True  # keep our sending half open: the other direction may still be busy

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and not self.peer.transport.is_closing():
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.changed.set()
        if self.peer is not None:
            # A clean close lets the peer flush what it was sent; an error drops it as well.
            self.peer.transport.close() if exc is None else self.peer.transport.abort()
        if not self.lost.done():
            self.lost.set_result(None)

    def refuse(self, answer: bytes, linger: float) -> None:
        """Send ``answer`` and end our half, then discard what comes until the client closes (at most
        ``linger`` seconds): closing at once could fail the client's write before it reads the answer."""
        self.refused = True
        self.pending.clear()
        self.transport.write(answer)
        if self.eof:
            self.transport.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.transport.resume_reading()
        timer = asyncio.get_running_loop().call_later(linger, self.transport.abort)
        self.lost.add_done_callback(lambda _: timer.cancel())

    def _block(self, answer: bytes) -> None:
        """Drop the peer at once (nothing more reaches it) and close this end once ``answer`` is flushed."""
        peer, self.peer = self.peer, None
        self.refused = True
        if peer is not None:
            peer.peer = None
            peer.transport.abort()
        self.transport.write(answer)
        self.transport.close()

    def abort(self) -> None:
        if hasattr(self, "transport"):  # not connected yet: nothing to drop
            self.transport.abort()


def join(client: TunnelEnd, upstream: TunnelEnd, greeting: bytes, early: bytes) -> None:
    """Answer the client with ``greeting`` and connect the ends; runs without awaiting, so nothing can
    arrive in between and every byte keeps its order."""
    client.transport.write(greeting)
    client.peer, upstream.peer = upstream, client
    if upstream.pending:
        client.transport.write(bytes(upstream.pending))
    if early:
        upstream.transport.write(early)
    client.pending.clear()
    upstream.pending.clear()
    for end, peer in ((client, upstream), (upstream, client)):
        if end.lost.done():
            peer.transport.close()
        elif end.eof:
            _pass_eof(end, peer)
    for end in (client, upstream):
        if not end.transport.is_closing():
            end.transport.resume_reading()


def _pass_eof(end: TunnelEnd, peer: TunnelEnd) -> None:
    """``end`` will receive no more: tell its ``peer``, and close both once neither direction has more to send."""
    if peer.transport.is_closing():
        return
    if peer.transport.can_write_eof():
        peer.transport.write_eof()
    if peer.eof:
        end.transport.close()
        peer.transport.close()
