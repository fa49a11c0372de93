"""A KV bucket read whole (eventlog/kv_latest.py): every live key once with its latest value, none deleted,
however the reads interleave with writes (a restarted provider host finds its sessions this way, L9.3)."""

from __future__ import annotations

import asyncio

import nats

from treadle.eventlog.kv_latest import latest


async def test_every_live_key_is_read_with_its_latest_value_and_deleted_ones_are_not(nats_url):
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="kv-latest-test", history=1)
    try:
        assert await latest(js, "kv-latest-test") == {}
        for i in range(300):
            await kv.put(f"h.s{i}", b"first")
        for i in range(0, 300, 3):
            await kv.delete(f"h.s{i}")
        for i in range(1, 300, 3):
            await kv.put(f"h.s{i}", b"second")
        expected = {f"h.s{i}": (b"second" if i % 3 == 1 else b"first") for i in range(300) if i % 3}
        reads = await asyncio.gather(*(latest(js, "kv-latest-test") for _ in range(20)))
        for found in reads:
            assert {key: entry.value for key, entry in found.items()} == expected
        entry = await kv.get("h.s1")
        assert reads[0]["h.s1"].revision == entry.revision
        assert (await js.stream_info("KV_kv-latest-test")).state.consumer_count == 0  # nothing left behind
    finally:
        await js.delete_key_value("kv-latest-test")
        await nc.close()
