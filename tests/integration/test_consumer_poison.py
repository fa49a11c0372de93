"""Issue 9, item 5 (fixes found by the subject fuzz): a pull consumer dead-letters what it can never handle
and keeps consuming. Before, a subject of the wrong shape stopped its fetch loop for good, and a malformed
payload held its thread for eight retries."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
from nats.js.api import StreamConfig

from tests.support.helpers import wait_for
from treadle.eventlog.errors import Conflict
from treadle.runtime.consumer import Later, PullConsumer
from treadle.runtime.mailbox import Mailboxes


async def test_malformed_subjects_payloads_and_endless_waits_are_dead_lettered_and_consuming_goes_on(nc):
    js = nc.jetstream()
    name = f"POISON_{uuid.uuid4().hex[:8]}"
    prefix = f"poison{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    handled: list[str] = []
    deliveries: dict[str, int] = {}

    async def handle(msg) -> None:
        deliveries[msg.subject] = deliveries.get(msg.subject, 0) + 1
        if msg.data == b"wait":
            raise Later("an earlier message never comes")
        msgspec.json.decode(msg.data, type=dict)  # malformed JSON raises DecodeError
        handled.append(msg.subject)

    consumer = PullConsumer(js, stream=name, durable="poison", filters=[f"{prefix}.>"], handle=handle, max_waits=3)
    await consumer.start()
    try:
        await js.publish(f"{prefix}.short", b"{}")  # too few tokens for a thread key
        await js.publish(f"{prefix}.t.th1.x", b"{not json")  # deterministic decode failure
        await js.publish(f"{prefix}.t.th2.x", b"wait")  # waits forever
        await js.publish(f"{prefix}.t.th1.y", b"{}")  # a good one behind the bad ones
        await wait_for(lambda: f"{prefix}.t.th1.y" in handled, timeout=20, what="the good message handled")

        async def settled() -> bool:
            info = await js.consumer_info(name, "poison")
            return info.num_pending == 0 and info.num_ack_pending == 0

        await wait_for(settled, timeout=20, interval=0.1, what="every message settled")
    finally:
        await consumer.stop()
    assert deliveries[f"{prefix}.t.th1.x"] == 1  # dead-lettered at once, not retried
    assert deliveries[f"{prefix}.t.th2.x"] == 3  # handed back until max_waits, then dead-lettered
    assert f"{prefix}.short" not in deliveries  # never reached the handler


async def test_consumers_sharing_mailboxes_handle_one_threads_messages_one_at_a_time(nc):
    """Issue 6 (a chaos stall): the supervisor's two consumers (thread events, provider events) share one
    Mailboxes so one thread's work runs one item at a time, but an empty Mailboxes is falsy and each consumer
    made its own: a hand-over placed a session while the provider event of the one just placed was folded,
    and the run was left on a session it no longer ran on."""
    js = nc.jetstream()
    name, prefix = f"SHARED_{uuid.uuid4().hex[:8]}", f"shared{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    mailboxes = Mailboxes()
    gate, running, done = asyncio.Event(), [], []

    async def handle(msg) -> None:
        running.append(msg.subject)
        if msg.subject.endswith(".first"):
            await gate.wait()
        running.remove(msg.subject)
        done.append(msg.subject)

    consumers = [
        PullConsumer(
            js, stream=name, durable=f"shared{n}", filters=[f"{prefix}.{kind}.>"], handle=handle, mailboxes=mailboxes
        )
        for n, kind in enumerate(("evt", "prov"))
    ]
    for consumer in consumers:
        await consumer.start()
    try:
        await js.publish(f"{prefix}.evt.t.th1.first", b"{}")
        await wait_for(lambda: running == [f"{prefix}.evt.t.th1.first"], what="the first message in its handler")
        await js.publish(f"{prefix}.prov.t.th1.second", b"{}")  # the same thread, through the other consumer
        await wait_for(lambda: len(mailboxes) == 2, what="the second message queued behind the first")
        assert running == [f"{prefix}.evt.t.th1.first"]
        gate.set()
        await wait_for(lambda: len(done) == 2, what="both handled")
        assert done == [f"{prefix}.evt.t.th1.first", f"{prefix}.prov.t.th1.second"]
    finally:
        gate.set()
        for consumer in consumers:
            await consumer.stop()


async def test_a_consumer_stopped_on_a_lost_lease_stops_retrying_a_fenced_append_and_the_next_owner_gets_it(nc):
    """A replica whose partition was taken over sees the new owner's appends as conflicts: it must stop
    retrying once it lets go (not treat the fence as a conflict to retry forever), and hand the message on
    at once rather than after ack_wait."""
    js = nc.jetstream()
    name = f"FENCED_{uuid.uuid4().hex[:8]}"
    prefix = f"fenced{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    stale_tries: list[int] = []
    owner_handled: list[int] = []

    async def stale(msg) -> None:
        stale_tries.append(msg.metadata.num_delivered)
        raise Conflict(7, "wrong last sequence: 7")  # the new owner appended first: fenced, every time

    async def owner(msg) -> None:
        owner_handled.append(msg.metadata.num_delivered)

    old = PullConsumer(js, stream=name, durable="part-0", filters=[f"{prefix}.>"], handle=stale, ack_wait=30)
    await old.start()
    await js.publish(f"{prefix}.t.th1.x", b"{}")
    await wait_for(lambda: len(stale_tries) >= 2, timeout=20, what="the stale replica retrying the fenced append")
    await old.stop(timeout=5)
    tries = len(stale_tries)

    new = PullConsumer(js, stream=name, durable="part-0", filters=[f"{prefix}.>"], handle=owner, ack_wait=30)
    await new.start()
    try:
        # ack_wait is 30 s: only the nak on stop can bring the message back within the wait below
        await wait_for(lambda: owner_handled, timeout=10, what="the next owner handled the message")
    finally:
        await new.stop()
    assert len(stale_tries) == tries  # no retry after letting go
    assert owner_handled == [2]
