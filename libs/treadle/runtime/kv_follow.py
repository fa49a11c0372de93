"""Following a NATS KV bucket: its stored records, then each change, through broker restarts. A watch that ends
(the broker away, its consumer lost) is opened again after ``retry`` seconds and delivers the stored records
again, so a follower keyed by record (and by revision) resumes where it was; the marks say where a pass starts
and where its stored records end. The scheduler, the webhook endpoint index and the policy cache follow their
buckets this way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import cast

from nats.js import JetStreamContext
from nats.js.kv import KeyValue

log = logging.getLogger(__name__)
RETRY = 1.0  # seconds between a watch ending and the next one opening


class Mark(Enum):
    OPENED = "opened"  # a watch (re)opened: the bucket's stored records follow, then LOADED
    LOADED = "loaded"  # the stored records are all in: changes follow as they are made


@dataclass(frozen=True)
class Record:
    key: str
    value: bytes | None  # None: deleted or purged
    revision: int
    # the broker's time of this revision (None when it did not say); a revision is the same record whenever read
    stored_at: datetime | None = field(default=None, compare=False)


async def follow(
    js: JetStreamContext, bucket: str, handle: Callable[[Record | Mark], Awaitable[None]], keys: str = ">"
) -> None:
    """Hands ``handle`` the records of ``bucket`` under ``keys``, watch after watch, until cancelled."""
    while True:
        try:
            watcher = await (await js.key_value(bucket)).watch(keys)
            try:
                await handle(Mark.OPENED)
                async for entry in watcher:
                    if entry is None:
                        await handle(Mark.LOADED)
                        continue
                    deleted = entry.operation in ("DEL", "PURGE") or not entry.value
                    await handle(
                        Record(entry.key, None if deleted else entry.value, entry.revision or 0, _stored_at(entry))
                    )
            finally:
                with contextlib.suppress(Exception):  # the connection may be gone with the watch
                    await watcher.stop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("watch of %s ended, opening it again: %r", bucket, exc)
        await asyncio.sleep(RETRY)  # backoff while the broker is away


def _stored_at(entry: KeyValue.Entry) -> datetime | None:
    """nats-py annotates ``created`` as an int, but a watch fills it with the message's timestamp (a datetime)."""
    return cast("datetime | None", entry.created)
