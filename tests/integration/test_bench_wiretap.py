"""bench/wiretap.py: the timelines' wiretap runs in a process of its own (the bench's loop, busy with its POSTs and
SSE streams, timed messages 1-3 ms late), records every message with its subject, reply, data and headers, and
times them on the bench's own clock (``time.perf_counter``, CLOCK_MONOTONIC)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from wiretap import Wiretap  # noqa: E402


async def test_the_wiretap_records_every_message_in_order_on_the_benchs_clock(nc, nats_url):
    tap = await Wiretap.start(nats_url, "tap.test.>")  # a shared broker's whole traffic could make it a slow consumer
    sent = []
    for i in range(50):
        sent.append(time.perf_counter())
        await nc.publish(f"tap.test.{i}", f"m{i}".encode(), reply=f"reply.{i}", headers={"k": str(i)})
    await nc.flush()
    done = time.perf_counter()
    records = [r for r in await tap.stop(0) if r[1].startswith("tap.test.")]
    assert [r[1] for r in records] == [f"tap.test.{i}" for i in range(50)]
    assert [(r[2], r[3], r[4]) for r in records] == [(f"reply.{i}", f"m{i}".encode(), {"k": str(i)}) for i in range(50)]
    assert all(at >= t for at, t in zip((r[0] for r in records), sent))  # seen after it was sent, same clock
    assert records[0][0] < done + 5  # and on that clock, not another one
