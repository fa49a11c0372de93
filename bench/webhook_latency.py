"""Webhook delivery latency and a receiver outage, on the embedded stack with a receiver on loopback.

Latency: from an event's append (its envelope's ``at``) to the receiver having the POST, over ``--threads``
``thread.created`` events (created ``--concurrency`` at a time). Outage: the receiver stops, ``--outage``
threads are created, it comes back after ``--down`` seconds; reported: how long after its return every
delivery had arrived, how many attempts they took, and whether any was lost or sent twice.

    PYTHONPATH=libs:services scripts/loopback-only.sh .venv/bin/python bench/webhook_latency.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.receiver

from tests.support.receiver import Receiver  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402

ENV = {
    "TREADLE_WEBHOOKS_ALLOW_HOSTS": '["127.0.0.1/32"]',
    "TREADLE_WEBHOOKS_BACKOFF_BASE": "0.5",
    "TREADLE_WEBHOOKS_BACKOFF_MAX": "2",
    "TREADLE_WEBHOOKS_RETRY_FOR": "60",
}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _create(http: httpx.AsyncClient, count: int, concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            r = await http.post("/v1/threads", json={"title": "bench"})
            r.raise_for_status()

    await asyncio.gather(*(one() for _ in range(count)))


async def main(threads: int, concurrency: int, outage: int, down: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as state:
        async with Stack(Path(state), env=ENV) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "admin", "admin")
            await nc.close()
            receiver = await Receiver().start()
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=30) as http:
                r = await http.post("/v1/webhooks", json={"url": receiver.url(), "events": ["thread.created"]})
                r.raise_for_status()
                hook = r.json()["webhook"]["id"]

                await _create(http, threads, concurrency)
                got = await receiver.wait(threads, timeout=120)
                latencies = [
                    (request.received_at - datetime.fromisoformat(json.loads(request.body)["at"]).timestamp()) * 1000
                    for request in got
                ]

                port = receiver.port
                await receiver.stop()
                await _create(http, outage, concurrency)
                await asyncio.sleep(down)  # the outage being measured
                back = await Receiver().start(port)
                returned = time.time()
                arrived = await back.wait(outage, timeout=120)
                drained = max(a.received_at for a in arrived) - returned
                records = (await http.get(f"/v1/webhooks/{hook}/deliveries", params={"limit": 500})).json()["items"]
                await back.stop()
    outage_ids = {json.loads(a.body)["delivery_id"] for a in arrived}
    attempts = [d["attempts"] for d in records if d["id"] in outage_ids]
    return {
        "deliveries": threads,
        "latency_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p99": round(_percentile(latencies, 0.99), 1),
            "max": round(max(latencies), 1),
        },
        "outage": {
            "down_s": down,
            "events": outage,
            "delivered_after_return": len(outage_ids),
            "duplicates": len(arrived) - len(outage_ids),
            "all_within_s_of_return": round(drained, 2),
            "attempts": {"min": min(attempts), "max": max(attempts)} if attempts else {},
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--outage", type=int, default=20)
    parser.add_argument("--down", type=float, default=5.0)
    a = parser.parse_args()
    print(json.dumps(asyncio.run(main(a.threads, a.concurrency, a.outage, a.down)), indent=2))
