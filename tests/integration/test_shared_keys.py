"""Keys every replica shares (ops/keys.py): made once per deployment, whoever asks first, even when several
replicas ask at the same moment; a gateway restarted later gets the same key, so its cursors stay valid."""

from __future__ import annotations

import asyncio

import nats

from treadle.eventlog import streams
from treadle.ops.keys import KEY_BYTES, shared_key


async def test_replicas_asking_at_once_all_get_the_one_key_made_and_it_outlives_them(nc, nats_url):
    await streams.ensure(nc.jetstream())
    others = [await nats.connect(nats_url) for _ in range(4)]  # one connection per replica
    try:
        keys = await asyncio.gather(*(shared_key(c.jetstream(), "page-cursors-race") for c in [nc, *others]))
    finally:
        for c in others:
            await c.close()
    assert len(set(keys)) == 1 and len(keys[0]) == KEY_BYTES
    assert await shared_key(nc.jetstream(), "page-cursors-race") == keys[0]  # a replica started later
    assert await shared_key(nc.jetstream(), "another-purpose") != keys[0]
