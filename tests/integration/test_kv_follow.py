"""Following a KV bucket (runtime/kv_follow.py), the way the scheduler, the webhook endpoint index and the policy
cache do: the stored records between OPENED and LOADED, then each change; a watch that cannot open is tried
again until it can."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from nats.aio.client import Client as NatsClient

from treadle.runtime import kv_follow
from treadle.runtime.kv_follow import Mark, Record


async def _next(items: asyncio.Queue[Record | Mark]) -> Record | Mark:
    async with asyncio.timeout(30):  # a guard against a hang, not a synchronisation
        return await items.get()


async def test_a_bucket_made_after_the_follower_started_is_followed_from_its_first_record(nc: NatsClient):
    js = nc.jetstream()
    bucket = "follow" + uuid.uuid4().hex[:8]
    items: asyncio.Queue[Record | Mark] = asyncio.Queue()

    async def handle(item: Record | Mark) -> None:
        await items.put(item)

    task = asyncio.create_task(kv_follow.follow(js, bucket, handle))
    try:
        for _ in range(2):  # the follower's first opening reaches the server first, and fails: no such bucket
            await nc.flush()
        kv = await js.create_key_value(bucket=bucket)
        first = await kv.put("a.1", b"one")
        assert await _next(items) is Mark.OPENED
        stored = await _next(items)
        if stored is Mark.LOADED:  # opened before the put: the record comes as a change
            stored = await _next(items)
        else:
            assert await _next(items) is Mark.LOADED
        assert stored == Record("a.1", b"one", first)
        assert isinstance(stored, Record) and stored.stored_at is not None  # the broker's time of the revision

        changed = await kv.put("a.1", b"two")
        assert await _next(items) == Record("a.1", b"two", changed)
        await kv.delete("a.1")
        deleted = await _next(items)
        assert isinstance(deleted, Record) and (deleted.key, deleted.value) == ("a.1", None)
        assert deleted.revision > changed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await js.delete_key_value(bucket)
