"""Every key's latest value in a KV bucket, read completely.

nats-py's ``keys()`` and ``watchall()`` end their initial read on a marker that a push consumer's race can
send too early (the consumer's info says nothing is pending while its messages are still on the way), so a
read may come back short. A pull consumer receives nothing it has not asked for: its pending count is exact,
and the read ends when the last fetched message says none are left.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

_DELETED = {"DEL", "PURGE"}
_BATCH = 256


class Latest(msgspec.Struct, frozen=True):
    value: bytes
    revision: int  # the stream sequence of the value: it moves on every put
    stored_at: datetime | None = None  # the broker's time of the put (None when it did not say)


def entry(msg: Msg, prefix: str) -> tuple[str, Latest | None]:
    """A KV message's key and record (None: the key was deleted or purged, or its record expired)."""
    key = msg.subject[len(prefix) :]
    headers = msg.headers or {}
    if headers.get("KV-Operation") in _DELETED or "Nats-Marker-Reason" in headers:
        return key, None
    return key, Latest(msg.data, msg.metadata.sequence.stream, msg.metadata.timestamp)


async def latest(js: JetStreamContext, bucket: str, keys: str = ">") -> dict[str, Latest]:
    """``keys``: a subject filter of the keys to read (``h.host-1.>``), all of them by default."""
    return (await read(js, bucket, keys))[0]


async def read(js: JetStreamContext, bucket: str, keys: str = ">") -> tuple[dict[str, Latest], int]:
    """``latest``, and the stream sequence of the last record read (deletes included; 0: none): every change
    after it is yet to be read."""
    prefix = f"$KV.{bucket}."
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=30.0,
        mem_storage=True,
    )
    stream = f"KV_{bucket}"
    sub = await js.pull_subscribe(prefix + keys, stream=stream, config=config)
    found: dict[str, Latest] = {}
    last = 0
    info = None
    try:
        info = await sub.consumer_info()
        pending = info.num_pending or 0
        while pending > 0:
            for msg in await sub.fetch(min(pending, _BATCH), timeout=5.0):
                key, record = entry(msg, prefix)
                if record is None:
                    found.pop(key, None)
                else:
                    found[key] = record
                last = max(last, msg.metadata.sequence.stream)
                pending = msg.metadata.num_pending
    finally:
        await sub.unsubscribe()
        if info is not None:  # else the server drops it after inactive_threshold
            with contextlib.suppress(NotFoundError):
                await js.delete_consumer(stream, info.name)
    return found, last
