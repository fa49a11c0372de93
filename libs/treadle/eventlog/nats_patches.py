"""Every place Treadle reaches into nats-py's private internals, in one module, checked against the version
they were written for.

Each patch replaces a private step of nats-py with one that gives the same result for less per message (the
numbers are in bench/nats_client.py and bench/consumer_cost.py), or reads a private attribute nats-py has no
public accessor for. They rely on internals no release promises to keep, so they are written for exactly
``WRITTEN_FOR``. With any other installed version they are off: :func:`install` changes nothing and logs why,
:func:`subscribe` and :class:`Acks` take nats-py's public paths, and the workers run correct and slower.
Off rather than a refusal to start: every patch has a public fallback, and an urgent nats-py upgrade (a
security fix) must not wait on them; the tests of tests/integration/test_nats_patches.py fail loudly on the
new version until the patches are checked against it and ``WRITTEN_FOR`` moves. The two accessors of a
JetStream context (:func:`connection_of`, :func:`api_prefix`) have no fallback and stay on: they read plain
attributes, and a missing one fails at once.

The patches (``install`` puts 1–4 and 8 in place for every client of the process; workers call it at connect):

1. Header blocks (``Client._parse_header_lines``): one regex search per header name instead of a generator
   over its characters (~3 µs per header, about half of nats-py's parsing of every delivery and PubAck).
2. Delivery metadata (``Msg.Metadata._from_reply``): the two frozen dataclasses filled in directly instead of
   through ``__init__``'s ``object.__setattr__`` per field (8.8 µs → 3.4 µs per delivery).
3. End-of-turn writes (``Client._flush_pending``): the first publish of a loop turn schedules one callback
   that writes whatever the turn queued, instead of a future, a queue hand-over and a flusher task step per
   write. Above ``HIGH_WATER`` bytes unsent the flusher takes over again (back-pressure as before); a forced
   flush, a connection not connected and any transport but plain TCP keep nats-py's own path.
4. Direct subscriptions (``Subscription._pending_queue``, ``Client._init_request_sub``): a subscription's
   queue replaced by an object that calls a synchronous handler from the read loop, in parse order; for
   PubAcks, direct-get answers, pull deliveries, ``request``'s replies and an SSE stream's deliveries (no queue,
   no task step each).
   A handler must be quick; one that raises is logged and its message dropped, as nats-py does.
5. Deferred acks (``Client._send_command``, ``_pending_data_size``, ``_flush_pending``; ``Msg._check_reply``,
   ``_ackd``): an ack queued in the pending buffer without waking the flusher; it leaves with the next write,
   within ``WINDOW`` at the latest (a worker killed inside it gets those messages redelivered).
6. A JetStream context's connection and API prefix (``JetStreamContext._nc``, ``_prefix``): read, never set.
7. An ordered consumer's flow-control poller (``_JSI._fctask``): cancelled for a callback subscription (the SSE
   streams), where it only woke four times a second per open stream to find nothing to answer.
8. Requests (``Client._request_new_style``): a counter for the reply token and a timer that fails the future,
   instead of a NUID and a random token (a getrandom call), a done callback and ``asyncio.wait_for``'s waiter
   and extra loop step per request (the commands, turn starts, captures and provider events of every run).

Each has its test on a real broker: tests/integration/test_nats_patches.py (the version, 1, 2, 6, 7 and the
public paths with the patches off), test_nats_writes.py (3), test_nats_direct.py (4), test_consumer_acks.py (5);
tests/unit/test_nats_headers.py and test_nats_metadata.py compare 1 and 2 with nats-py's own on arbitrary input.

What upstream could take, one paragraph per patch:

1. Parse header names with a compiled pattern (or ``bytes.split`` and one ``isspace`` per name) rather than
   ``any(c.isspace() for c in key)``; the output is identical (tests/unit/test_nats_headers.py checks it on
   arbitrary bytes) and every header-carrying message pays the difference.
2. Build ``Msg.Metadata`` and its ``SequencePair`` without the frozen dataclass ``__init__`` (a ``__slots__``
   class, or ``object.__new__`` plus ``__dict__`` as here), and parse a delivery's metadata once, lazily; or
   expose ``Msg.Metadata.from_reply`` and the token parser publicly so clients can read the stream sequence
   alone.
3. Write pending bytes from a ``loop.call_soon`` callback at the end of the turn when the transport's buffer
   is below a high-water mark, keeping the flusher task for back-pressure only; a publish then costs no future
   and no task switch. The ordering and reconnect semantics are unchanged (tests/integration/test_nats_writes.py).
4. Accept a synchronous ``cb`` (or a ``direct=True`` flag) on ``subscribe`` that is called from the read
   loop, and use it for the client's own request/response inbox; ``drain``, ``unsubscribe`` and slow-consumer
   accounting then need no queue for such a subscription.
5. Offer ``Msg.ack(flush=False)`` (or ``nc.publish(..., flush=False)``): queue without waking the flusher,
   raising as ``ack`` does for a closed or draining connection and an acked message.
6. Expose ``JetStreamContext.connection`` and ``JetStreamContext.api_prefix`` as read-only properties (a
   pull consumer built on ``CONSUMER.MSG.NEXT`` requests needs both).
7. Start the flow-control poller only for a subscription without a callback, or answer a deferred
   flow-control request from the message path instead of a 250 ms loop.
8. Make a request's token a per-client counter (the inbox prefix is already unique) and time it out with
   ``call_later`` on its future rather than ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.metadata
import itertools
import logging
import re
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.aio.transport import TcpTransport
from nats.errors import ConnectionClosedError, ConnectionDrainingError, NotJSMessageError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.client import JetStreamContext
from nats.protocol.command import pub_cmd

log = logging.getLogger(__name__)

WRITTEN_FOR = "2.16.0"
INSTALLED = importlib.metadata.version("nats-py")
ACTIVE = INSTALLED == WRITTEN_FOR  # off for any other version (see the module's docstring)


def check_version() -> bool:
    """True when the patches may go in; else says once why they stay out."""
    if not ACTIVE:
        log.warning(
            "nats-py %s is installed; Treadle's nats-py patches were written for %s and are off "
            "(correct, slower). Check them against %s and move WRITTEN_FOR (treadle.eventlog.nats_patches).",
            INSTALLED,
            WRITTEN_FOR,
            INSTALLED,
        )
    return ACTIVE


# --- 1. header blocks ----------------------------------------------------------------------------------

_SPACE = re.compile(r"\s")  # str.isspace's set: both use the interpreter's Unicode whitespace test
_CRLF = b"\r\n"


def parse_header_lines(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _SPACE.search(key):
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


_ORIGINAL_HEADERS = Client.__dict__["_parse_header_lines"]  # a staticmethod


def original_header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's own parser (for the tests that the two agree)."""
    parsed: dict[str, str] = _ORIGINAL_HEADERS.__func__(raw)
    return parsed


# --- 2. delivery metadata ------------------------------------------------------------------------------

_ORIGINAL_METADATA = Msg.Metadata.__dict__["_from_reply"]  # a classmethod
_UTC = datetime.UTC
_V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>; longer ones carry a domain
_V2_TOKENS = 12
_new = object.__new__


def ack_tokens(reply: str | None) -> list[str]:
    """The tokens of a JetStream ack subject; ``NotJSMessageError`` for anything else (nats-py's rule)."""
    if not reply:
        raise NotJSMessageError
    tokens = reply.split(".")
    if (len(tokens) == _V1_TOKENS or len(tokens) >= _V2_TOKENS - 1) and tokens[0] == "$JS" and tokens[1] == "ACK":
        return tokens
    raise NotJSMessageError


def metadata_from_reply(reply: str) -> Msg.Metadata:
    tokens = ack_tokens(reply)
    if len(tokens) == _V1_TOKENS:
        stamp, sseq, cseq, delivered, pending, stream, consumer, domain = 7, 5, 6, 4, 8, 2, 3, None
    else:
        stamp, sseq, cseq, delivered, pending, stream, consumer = 9, 7, 8, 6, 10, 4, 5
        domain = "" if tokens[2] == "_" else tokens[2]
    # nats-py's order of conversions, so a malformed token fails alike
    timestamp = datetime.datetime.fromtimestamp(int(tokens[stamp]) / 1_000_000_000.0, _UTC)
    pair = _new(Msg.Metadata.SequencePair)
    pair.__dict__["stream"] = int(tokens[sseq])
    pair.__dict__["consumer"] = int(tokens[cseq])
    meta = _new(Msg.Metadata)
    meta.__dict__.update(
        sequence=pair,
        num_delivered=int(tokens[delivered]),
        num_pending=int(tokens[pending]),
        timestamp=timestamp,
        stream=tokens[stream],
        consumer=tokens[consumer],
        domain=domain,
    )
    return meta


def stream_sequence(reply: str) -> int:
    """A delivery's stream sequence alone (an SSE frame needs nothing else of the metadata)."""
    tokens = ack_tokens(reply)
    return int(tokens[5 if len(tokens) == _V1_TOKENS else 7])


def original_metadata(reply: str) -> Msg.Metadata:
    """nats-py's own parser (for the tests that the two agree)."""
    parsed: Msg.Metadata = _ORIGINAL_METADATA.__func__(Msg.Metadata, reply)
    return parsed


# --- 3. end-of-turn writes -----------------------------------------------------------------------------

HIGH_WATER = 256 * 1024  # bytes the socket's transport may hold unsent before the flusher waits on it

_ORIGINAL_FLUSH = Client._flush_pending


async def _flush_pending(self: Any, force_flush: bool = False) -> Any:
    if force_flush or not self.is_connected or type(self._transport) is not TcpTransport:
        return await _ORIGINAL_FLUSH(self, force_flush)
    if not self._write_scheduled:
        self._write_scheduled = True
        asyncio.get_running_loop().call_soon(write_pending, self)
    return None


def write_pending(nc: Any) -> None:
    """Write what is pending now (the scheduled callback)."""
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


def pending_bytes(nc: Client) -> int:
    """What the connection holds unwritten (for the test of back-pressure)."""
    held: int = nc._pending_data_size
    return held


def unsent_bytes(nc: Client) -> int:
    """What the socket's transport holds unsent (for the test of back-pressure)."""
    unsent: int = nc._transport._io_writer.transport.get_write_buffer_size()  # type: ignore[union-attr]
    return unsent


# --- 4. direct subscriptions ---------------------------------------------------------------------------

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


def is_direct(sub: Subscription) -> bool:
    return isinstance(sub._pending_queue, _Direct)


async def subscribe(nc: Client, subject: str, handler: Handler, queue: str = "") -> Subscription:
    """Like ``nc.subscribe(subject, cb=...)`` with a synchronous ``handler`` called by the read loop (with the
    patches off: by nats-py's task for the subscription, in the same order)."""

    async def fallback(msg: Msg) -> None:  # nats-py's task: a message queued before the swap, or patches off
        try:
            handler(msg)
        except Exception:
            log.exception("handler of %s failed; message dropped", subject)

    sub = await nc.subscribe(subject, queue=queue, cb=fallback)
    make_direct(sub, handler)
    return sub


def make_direct(sub: Subscription, handler: Handler) -> None:
    """From now on the read loop hands ``sub``'s messages to ``handler`` (a subscription made with a callback, e.g.
    JetStream's); those already queued go to it first, in order. With the patches off its callback goes on."""
    if not ACTIVE:
        return
    queued = sub._pending_queue
    sub._pending_queue = direct = _Direct(sub, handler)  # type: ignore[assignment]
    while not queued.empty():  # the subscription's task, woken for them, finds the old queue empty
        direct.put_nowait(queued.get_nowait())
        queued.task_done()


_ORIGINAL_INIT_REQUEST_SUB = Client._init_request_sub


async def _init_request_sub(self: Any) -> None:
    """nats-py's reply subscription for ``request``, with its future resolved by the read loop."""
    await _ORIGINAL_INIT_REQUEST_SUB(self)
    prefix = self._resp_inbox = bytes(self._resp_sub_prefix).decode()
    cut = len(prefix)
    answers = self._resp_map

    def resolve(msg: Msg) -> None:
        future = answers.get(msg.subject[cut:])
        if future is not None and not future.done():
            future.set_result(msg)

    for sub in self._subs.values():
        if sub.subject == prefix + "*":
            sub._pending_queue = _Direct(sub, resolve)


_ORIGINAL_REQUEST = Client._request_new_style
_tokens = itertools.count()  # a request's token: unique in the process (the inbox prefix is the connection's)


async def _request_new_style(
    self: Any, subject: str, payload: bytes, timeout: float = 1, headers: dict[str, Any] | None = None
) -> Msg:
    """nats-py's ``request`` without a random token (a getrandom call and a NUID), a done callback, and
    ``asyncio.wait_for``'s waiter and extra loop step: a counter, and a timer that fails the future."""
    if self.is_draining_pubs:
        raise ConnectionDrainingError
    if not self._resp_sub_prefix:
        await self._init_request_sub()
    token = str(next(_tokens))
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Msg] = loop.create_future()
    answers = self._resp_map
    answers[token] = future
    expiry = loop.call_later(timeout, _expire, future)
    try:
        inbox = self._resp_inbox or bytes(self._resp_sub_prefix).decode()  # made before the patches went in
        await self.publish(subject, payload, reply=inbox + token, headers=headers)
        return await future
    finally:
        expiry.cancel()
        answers.pop(token, None)


def _expire(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(NatsTimeoutError())


def request_subscription(nc: Client) -> Subscription | None:
    """The connection's ``request`` reply subscription, once it has one (for the test that it is direct)."""
    prefix = bytes(nc._resp_sub_prefix or b"").decode()
    return next((s for s in nc._subs.values() if prefix and s.subject == prefix + "*"), None)


# --- 5. deferred acks ----------------------------------------------------------------------------------

WINDOW = 0.005  # seconds an ack may wait for company


class Acks:
    """The deferred acks of one connection's consumer."""

    def __init__(self, nc: Client, window: float = WINDOW) -> None:
        self._nc = nc
        self._window = window
        self._timer: asyncio.TimerHandle | None = None

    async def ack(self, msg: Msg) -> None:
        """Like ``msg.ack()``: raises as it would (closed connection, already acked), but does not write."""
        if not ACTIVE:
            await msg.ack()
            return
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


# --- 6. a JetStream context's connection and API prefix -------------------------------------------------


def connection_of(js: JetStreamContext) -> Client:
    nc: Client = js._nc
    return nc


def api_prefix(js: JetStreamContext) -> str:
    prefix: str = js._prefix
    return prefix


# --- 7. an ordered consumer's flow-control poller -------------------------------------------------------


def stop_flow_control_poller(psub: JetStreamContext.PushSubscription) -> None:
    """Cancel the task nats-py starts for every ordered consumer to answer flow control late, when the
    subscription has a callback: it wakes every 250 ms, and for such a subscription it never has anything to send.
    (The read loop answers a flow-control request at once when ``delivered`` has reached the data before it; with
    a callback ``delivered`` counts every message as it is read, so it always has.)"""
    if not ACTIVE:
        return
    sub: Subscription = psub._sub
    jsi = sub._jsi
    if sub._cb is not None and jsi is not None and jsi._fctask is not None:
        jsi._fctask.cancel()


# --- installing 1–4 and 8 ------------------------------------------------------------------------------------


def install() -> bool:
    """Put patches 1–4 and 8 in place for every nats-py client of this process (idempotent). False: left out,
    the installed nats-py is not the one they were written for (logged)."""
    if not check_version():
        return False
    Client._parse_header_lines = staticmethod(parse_header_lines)  # type: ignore[method-assign]
    Msg.Metadata._from_reply = classmethod(lambda _cls, reply: metadata_from_reply(reply))  # type: ignore[method-assign,assignment]
    Client._write_scheduled = False  # type: ignore[attr-defined]
    Client._resp_inbox = None  # type: ignore[attr-defined]  # the request inbox prefix as text (patch 8)
    Client._flush_pending = _flush_pending  # type: ignore[method-assign]
    Client._init_request_sub = _init_request_sub  # type: ignore[method-assign]
    Client._request_new_style = _request_new_style  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """nats-py's own paths again (for the tests that compare the two)."""
    Client._parse_header_lines = _ORIGINAL_HEADERS  # type: ignore[method-assign]
    Msg.Metadata._from_reply = _ORIGINAL_METADATA  # type: ignore[method-assign]
    Client._flush_pending = _ORIGINAL_FLUSH  # type: ignore[method-assign]
    Client._init_request_sub = _ORIGINAL_INIT_REQUEST_SUB  # type: ignore[method-assign]
    Client._request_new_style = _ORIGINAL_REQUEST  # type: ignore[method-assign]
