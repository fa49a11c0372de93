"""The event log over JetStream: ``append(tenant, thread, expected_seq, events)`` and ``read(...)``.

Appends are fenced by optimistic concurrency on the thread's wildcard subject and written as one atomic
batch, so a decision lands whole or not at all, and only on top of the state it was decided on.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from treadle.core.envelope import Envelope
from treadle.core.events import decode_event, encode_event

from . import nats_patches, subjects, tracing
from .errors import Conflict, Rejected, Unavailable
from .port import Appended

ELSS = "Nats-Expected-Last-Subject-Sequence"
ELSS_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
NO_RESPONDERS = "503"  # the status the server answers a request nobody listens to with
MAX_BATCH = 1000
READ_BATCH = 1000


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _PubAck(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    count: int = 0
    error: _ApiError | None = None


_ack_decoder = msgspec.json.Decoder(_PubAck)


# What a replicated stream's leader answers while an earlier append is still being replicated (it cannot know
# the outcome yet), beside the single server's answers:
WRONG_LAST_SEQUENCE_IN_FLIGHT = 10164  # an append fenced on the thread while another is in flight: a lost race
DUPLICATE_IN_FLIGHT = 10158  # this very event (its Msg-Id) is in flight: it may yet land


def _raise_for(err: _ApiError) -> None:
    if err.err_code in (10071, 10070):
        actual = err.description.rsplit(":", 1)[-1].strip()
        raise Conflict(int(actual) if actual.isdigit() else None, err.description)
    if err.err_code in (10201, WRONG_LAST_SEQUENCE_IN_FLIGHT):
        raise Conflict(None, err.description)  # 10201: a re-sent batch whose Msg-Ids are already stored
    if err.err_code == DUPLICATE_IN_FLIGHT:
        raise Unavailable(f"{err.err_code}: {err.description}")
    if err.code in (503, 504):  # e.g. 10008 "temporarily unavailable" while a clustered stream elects a leader
        raise Unavailable(f"{err.err_code or err.code}: {err.description}")
    raise Rejected(err.err_code or err.code, err.description)


async def acked_publish(nc: NATS, subject: str, payload: bytes, headers: dict[str, str], timeout: float = 5.0) -> int:
    """A message stored in the stream that takes ``subject``: the sequence its PubAck gives (``js.publish`` reads
    the same answer with ``json.loads`` and a dataclass, 13 µs a message). Raises as an append does for an error
    answer, ``Unavailable`` when no stream answers, nats' ``TimeoutError`` when nothing does in time."""
    try:
        msg = await nc.request(subject, payload, timeout=timeout, headers=headers)
    except NoRespondersError:
        raise Unavailable(f"no stream stores {subject}") from None
    ack = _ack_decoder.decode(msg.data)
    if ack.error is not None:
        _raise_for(ack.error)
    return ack.seq


def batch_payloads(tenant: str, thread: str, events: Sequence[Envelope], limit: int) -> list[bytes]:
    """The encoded events of one append, every one checked before any is sent: a batch must never be abandoned
    half sent (ValueError for a malformed call, Rejected for an event over the broker's message limit)."""
    if not events:
        raise ValueError("nothing to append")
    if len(events) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} events per decision")
    if any(e.tenant != tenant or e.thread != thread for e in events):
        # Readers find a thread by its envelopes: one stored under another thread's subject poisons both.
        raise ValueError(f"an event of another thread cannot be appended to {tenant}/{thread}")
    payloads = [encode_event(e) for e in events]
    if any(len(p) > limit for p in payloads):
        raise Rejected(413, f"an event exceeds the broker's {limit}-byte message limit")
    return payloads


def fenced_after(headers: dict[str, Any] | None) -> int | None:
    """The thread's previous stream sequence as a stored event's fence says (None: it carried no fence). A fence
    wider than its thread (a new thread fenced on its tenant's creations) is only ever its thread's first
    append: nothing of the thread came before it."""
    headers = headers or {}
    if (fence := headers.get(ELSS)) is None:
        return None
    return int(fence) if headers.get(ELSS_SUBJECT, ".>").endswith(".>") else 0


def _expire(answer: asyncio.Future[Any]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


class EventLog:
    def __init__(self, nc: NATS, timeout: float = 5.0) -> None:
        self._nc = nc
        self._timeout = timeout
        # Direct-get batches answer with many messages, appends with one; one wildcard inbox routes them all by
        # token, instead of a subscribe/unsubscribe pair per read.
        self._inbox: str | None = None
        self._inbox_lock = asyncio.Lock()
        self._waiting: dict[str, tuple[list[Any], asyncio.Future[Any]]] = {}  # a read's answers so far, and its end
        self._answers: dict[str, asyncio.Future[Any]] = {}  # appends waiting for their one reply
        self._tokens = itertools.count()

    async def _request(self, subject: str, payload: bytes, headers: dict[str, str]) -> _PubAck | None:
        # Answered on this log's reply inbox rather than by nc.request, which costs a random token (a getrandom
        # call), a future with a callback and asyncio.wait_for's waiter and timer for every append.
        inbox = await self._reply_inbox()
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._answers[token] = answer
        expiry = loop.call_later(self._timeout, _expire, answer)
        try:
            await self._nc.publish(subject, payload, reply=f"{inbox}.{token}", headers=tracing.inject(headers))
            msg = await answer
        except TimeoutError:
            raise Unavailable(f"append to {subject} not acknowledged: timed out") from None
        finally:
            expiry.cancel()
            del self._answers[token]
        if msg.headers and msg.headers.get("Status") == NO_RESPONDERS:
            raise Unavailable(f"append to {subject} not acknowledged: no responders") from None
        if not msg.data:
            return None  # a batch member's provisional reply
        ack = _ack_decoder.decode(msg.data)
        if ack.error is not None:
            _raise_for(ack.error)
        return ack

    async def append(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> int:
        return (await self.append_checked(tenant, thread, expected_seq, events, fence)).seq

    async def append_checked(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> Appended:
        """Append ``events`` iff the thread's last sequence is ``expected_seq`` (0: the thread is new).
        Returns the stream sequence of the last event. Raises Conflict, Unavailable or Rejected.
        ``fence`` (filter subject, its last sequence) replaces the thread's fence for a decision that is wider
        than one thread: a new thread counted against its tenant's (its own subjects are empty anyway)."""
        payloads = batch_payloads(tenant, thread, events, self._nc.max_payload)
        fence_subject, fence_seq = fence or (subjects.thread_events(tenant, thread), expected_seq)
        fence_headers = {ELSS: str(fence_seq), ELSS_SUBJECT: fence_subject}
        if len(events) == 1:
            ack = await self._request(
                subjects.event(tenant, thread, events[0].type),
                payloads[0],
                {**fence_headers, "Nats-Msg-Id": events[0].id},
            )
            assert ack is not None
            return Appended(ack.seq, ack.duplicate)
        batch = uuid.uuid4().hex
        last = len(events)
        for i, (e, payload) in enumerate(zip(events, payloads), start=1):
            headers = {"Nats-Batch-Id": batch, BATCH_SEQUENCE: str(i), "Nats-Msg-Id": e.id}
            subject = subjects.event(tenant, thread, e.type)
            if i == 1:
                headers.update(fence_headers)
            if i == last:
                headers["Nats-Batch-Commit"] = "1"
                ack = await self._request(subject, payload, headers)
                assert ack is not None
                return Appended(ack.seq)  # a batch holding a stored envelope is refused (10201), never a duplicate
            if i == 1:
                await self._request(subject, payload, headers)  # the server replies once it opened the batch
            else:
                await self._nc.publish(subject, payload, headers=tracing.inject(headers))
        raise AssertionError("unreachable")

    async def read(self, tenant: str, thread: str, after: int = 0) -> list[Envelope]:
        """Every event of the thread with sequence > ``after``, in order (batched direct get)."""
        return await self.read_subject(subjects.thread_events(tenant, thread), after)

    async def read_subject(self, filter_subject: str, after: int = 0) -> list[Envelope]:
        out: list[Envelope] = []
        start = after + 1
        while True:
            got, more = await self._direct_batch(filter_subject, start)
            out.extend(got)
            if not more or not got:
                return out
            last = got[-1].seq
            assert last is not None  # read from the stream: every event has its sequence
            start = last + 1

    async def _reply_inbox(self) -> str:
        if self._inbox is not None:
            return self._inbox
        async with self._inbox_lock:
            if self._inbox is None:
                inbox = self._nc.new_inbox()
                await nats_patches.subscribe(self._nc, inbox + ".*", self._route)
                self._inbox = inbox
        return self._inbox

    def _route(self, msg: Msg) -> None:
        token = msg.subject.rsplit(".", 1)[1]
        if (answer := self._answers.get(token)) is not None:
            if not answer.done():
                answer.set_result(msg)
            return
        read = self._waiting.get(token)
        if read is None:  # the read or append gave up (timeout) and late answers are dropped
            return
        answers, ended = read
        answers.append(msg)
        if (msg.headers or {}).get("Status") is not None and not ended.done():  # a batch ends with a status
            ended.set_result(None)

    async def _direct_batch(self, filter_subject: str, start: int) -> tuple[list[Envelope], bool]:
        """One batch of a direct get. Its answers are gathered by the inbox's callback and looked at once the
        batch has ended (a wait per answer cost a task each); it times out only when nothing came for a while."""
        inbox = await self._reply_inbox()
        token = str(next(self._tokens))
        answers: list[Any] = []
        ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = (answers, ended)
        try:
            request = msgspec.json.encode({"seq": start, "next_by_subj": filter_subject, "batch": READ_BATCH})
            await self._nc.publish(f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}", request, reply=f"{inbox}.{token}")
            heard = -1
            while not ended.done():
                if len(answers) == heard:
                    raise Unavailable(f"direct get of {filter_subject} timed out")
                heard = len(answers)
                await asyncio.wait([ended], timeout=self._timeout)
        finally:
            del self._waiting[token]
        got: list[Envelope] = []
        for msg in answers:
            headers = msg.headers or {}
            status = headers.get("Status")
            if status == "404":
                return got, False
            if status == "204":  # end of batch; more may follow when we hit the batch size
                return got, len(got) >= READ_BATCH
            if status is not None:
                raise Unavailable(f"direct get of {filter_subject}: status {status} {headers.get('Description', '')}")
            got.append(decode_event(msg.data, int(headers["Nats-Sequence"])))
        raise AssertionError("a direct get batch ends with a status")

    async def last_seq(self, tenant: str, thread: str) -> int:
        events = await self._last(subjects.thread_events(tenant, thread))
        return events or 0

    async def last_seq_of(self, filter_subject: str) -> int:
        """The last sequence stored under ``filter_subject`` (wildcards allowed), 0 for none: a fence's base."""
        return await self._last(filter_subject) or 0

    async def subject_count(self, filter_subject: str) -> int:
        """How many distinct stored subjects match ``filter_subject`` (e.g. a tenant's ``thread.created``s)."""
        try:
            info = await self._nc.jetstream().stream_info(subjects.EVENTS_STREAM, subjects_filter=filter_subject)
        except NatsError as exc:
            raise Unavailable(f"subjects of {filter_subject} uncountable: {exc!r}") from None
        return len(info.state.subjects or {})

    async def subject_at(self, seq: int) -> str | None:
        """The subject of the event stored at stream sequence ``seq`` (None: no such event, or deleted)."""
        try:
            msg = await self._nc.request(
                f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}", msgspec.json.encode({"seq": seq}), timeout=self._timeout
            )
        except (TimeoutError, NatsTimeout, NoRespondersError) as exc:
            raise Unavailable(f"direct get of sequence {seq}: {exc!r}") from None
        headers = msg.headers or {}
        return None if headers.get("Status") else headers.get("Nats-Subject")

    async def _last(self, filter_subject: str) -> int | None:
        try:
            msg = await self._nc.request(
                f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}",
                msgspec.json.encode({"last_by_subj": filter_subject}),
                timeout=self._timeout,
            )
        except (TimeoutError, NatsTimeout, NoRespondersError) as exc:
            raise Unavailable(f"direct get last of {filter_subject}: {exc!r}") from None
        headers = msg.headers or {}
        if headers.get("Status") == "404":
            return None
        return int(headers["Nats-Sequence"])
