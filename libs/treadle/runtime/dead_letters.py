"""Dead letters you can act on: a message a consumer gave up on (``runtime/consumer.py`` terminates it) is
stored in stream ``TREADLE_DEAD_LETTERS`` on ``treadle.dlq.<consumer>``: its payload as it was, and headers
that say where it came from and why (``Treadle-Dlq-*``). ``treadle dead-letters list|show|replay|drop``.

Replay hands the original message (read again from its stream by sequence: the log is the truth, the stored
copy is for reading) back to the consumer that gave up on it, through ``treadle.dlq.replay.<consumer>``, which
the consumer's live owner answers by running its handler on it as on a delivery. The record is removed once
the consumer accepted it; failing again stores a new one. Nobody answering (no owner running) changes nothing.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from ..eventlog import streams

STREAM = streams.DEAD_LETTERS_STREAM
H = "Treadle-Dlq-"
MAX_REASON = 1000


class DeadLetterNotFound(LookupError):
    pass


class ReplayRefused(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class DeadLetter:
    seq: int  # in TREADLE_DEAD_LETTERS
    consumer: str
    stream: str
    stream_seq: int
    subject: str
    reason: str
    failures: int
    at: str
    data: bytes


def record_subject(consumer: str) -> str:
    if not consumer or any(c in consumer for c in ".*> \t\r\n"):
        raise ValueError(f"bad consumer name {consumer!r}")
    return f"treadle.dlq.{consumer}"


def replay_subject(consumer: str) -> str:
    return f"treadle.dlq.replay.{record_subject(consumer).removeprefix('treadle.dlq.')}"


def _header_value(text: str) -> str:
    return " ".join(text.split())[:MAX_REASON]  # a header value holds no line break


async def store(
    js: JetStreamContext,
    *,
    consumer: str,
    stream: str,
    stream_seq: int,
    subject: str,
    reason: str,
    failures: int,
    data: bytes,
) -> int:
    headers = {
        f"{H}Consumer": consumer,
        f"{H}Stream": stream,
        f"{H}Seq": str(stream_seq),
        f"{H}Subject": subject,
        f"{H}Reason": _header_value(reason),
        f"{H}Failures": str(failures),
        f"{H}At": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "Nats-Msg-Id": f"{stream}:{stream_seq}:{consumer}:{failures}",  # a retried store is stored once
    }
    ack = await js.publish(record_subject(consumer), data, headers=headers)
    return ack.seq


def _from(seq: int, headers: dict[str, str] | None, data: bytes | None) -> DeadLetter:
    h = headers or {}
    return DeadLetter(
        seq=seq,
        consumer=h.get(f"{H}Consumer", ""),
        stream=h.get(f"{H}Stream", ""),
        stream_seq=int(h.get(f"{H}Seq", "0") or 0),
        subject=h.get(f"{H}Subject", ""),
        reason=h.get(f"{H}Reason", ""),
        failures=int(h.get(f"{H}Failures", "0") or 0),
        at=h.get(f"{H}At", ""),
        data=data or b"",
    )


async def show(js: JetStreamContext, seq: int) -> DeadLetter:
    if seq <= 0:
        raise DeadLetterNotFound(f"no dead letter {seq}")
    try:
        raw = await js.get_msg(STREAM, seq)
    except NotFoundError:
        raise DeadLetterNotFound(f"no dead letter {seq}") from None
    assert raw.seq is not None
    return _from(raw.seq, raw.headers, raw.data)


async def listing(js: JetStreamContext, limit: int = 100) -> list[DeadLetter]:
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        return []
    found: list[DeadLetter] = []
    seq = info.state.first_seq
    while len(found) < limit and seq <= info.state.last_seq:
        try:
            raw = await js.get_msg(STREAM, seq, subject="treadle.dlq.*", next=True)
        except NotFoundError:
            break
        assert raw.seq is not None
        found.append(_from(raw.seq, raw.headers, raw.data))
        seq = raw.seq + 1
    return found


async def drop(js: JetStreamContext, seq: int) -> DeadLetter:
    letter = await show(js, seq)
    await js.delete_msg(STREAM, seq)
    return letter


async def replay(nc: NATS, js: JetStreamContext, seq: int, timeout: float = 5.0) -> DeadLetter:
    letter = await show(js, seq)
    request = msgspec.json.encode({"stream": letter.stream, "seq": letter.stream_seq})
    try:
        reply = await nc.request(replay_subject(letter.consumer), request, timeout=timeout)
    except (NoRespondersError, NatsTimeout):
        raise ReplayRefused(f"consumer {letter.consumer} is not running: nothing replayed") from None
    if reply.data != b"accepted":
        raise ReplayRefused(f"consumer {letter.consumer} refused the replay: {reply.data.decode(errors='replace')}")
    await js.delete_msg(STREAM, seq)
    return letter
