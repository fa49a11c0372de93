"""L9.3: a held run's hand-over waits in its thread's mailbox; the next job for that thread (an interrupt, a
provider event) tells it so, and it leaves the rest to that job."""

from __future__ import annotations

import asyncio

from treadle.runtime.mailbox import Mailboxes


async def test_L9_3_a_waiting_job_hears_when_the_next_job_for_its_thread_arrives():
    boxes = Mailboxes()
    order: list[str] = []
    waited = asyncio.Event()

    async def hold() -> None:
        arrival = boxes.arrival("acme.thr_1")
        waited.set()
        await asyncio.wait_for(arrival.wait(), 5)  # ends only because the next job arrived
        order.append("hold left")

    async def interrupt() -> None:
        order.append("interrupt")

    boxes.submit("acme.thr_1", hold)
    await asyncio.wait_for(waited.wait(), 5)
    other = boxes.arrival("acme.thr_2")
    boxes.submit("acme.thr_1", interrupt)
    await boxes.drain(5)
    assert order == ["hold left", "interrupt"] and not other.is_set()
