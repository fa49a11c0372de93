"""Issue 23, item 5: a message a consumer gives up on is stored in TREADLE_DEAD_LETTERS with its reason, and
`treadle dead-letters list|show|replay|drop` acts on it, against the real broker. Replay hands the original
back to the live consumer (which handles it like a delivery); drop deletes it; a wrong or stale sequence, or
a consumer nobody runs, is refused with one line and nothing changes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from nats.js.api import StreamConfig

from tests.support.helpers import wait_for
from treadle.eventlog import streams
from treadle.runtime import dead_letters
from treadle.runtime.consumer import PullConsumer

TREADLE = str(Path(sys.executable).with_name("treadle"))


async def _cli(nats_url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    proc = await asyncio.create_subprocess_exec(
        TREADLE, "dead-letters", *args, "--nats-url", nats_url, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_dead_letter_is_stored_with_its_reason_and_can_be_listed_shown_replayed_and_dropped(nc, nats_url):
    js = nc.jetstream()
    await streams.ensure_stream(js, streams.DEAD_LETTERS)
    name, prefix, durable = f"DLQ_{uuid.uuid4().hex[:8]}", f"dlq{uuid.uuid4().hex[:8]}", f"dlqc{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    broken, handled = True, []

    async def handle(msg) -> None:
        if broken and msg.data.startswith(b'{"tenant":"acme"'):
            raise RuntimeError("the handler cannot take this yet")
        handled.append(msg.data)

    consumer = PullConsumer(js, stream=name, durable=durable, filters=[f"{prefix}.>"], handle=handle, max_failures=2)
    await consumer.start()
    try:
        first = b'{"tenant":"acme","thread":"th_1","data":{"run_id":"run_1"}}'
        ack = await js.publish(f"{prefix}.acme.th_1.x", first)
        await js.publish(f"{prefix}.acme.th_2.x", b'{"tenant":"acme","thread":"th_2"}')

        async def mine() -> list[dead_letters.DeadLetter]:
            return [d for d in await dead_letters.listing(js, limit=10_000) if d.consumer == durable]

        letters = await wait_for(lambda: _two(mine), timeout=30, what="both messages dead-lettered")
        one = next(d for d in letters if d.stream_seq == ack.seq)
        assert (one.stream, one.subject, one.failures, one.data) == (name, f"{prefix}.acme.th_1.x", 2, first)
        assert "handler kept failing" in one.reason and "cannot take this yet" in one.reason

        code, out, _ = await _cli(nats_url, "list", "--limit", "10000")
        assert code == 0 and f"{one.seq}\t" in out and durable in out
        code, out, _ = await _cli(nats_url, "show", str(one.seq))
        shown = json.loads(out)
        assert code == 0 and shown["data"]["thread"] == "th_1" and shown["stream_seq"] == ack.seq

        broken = False  # the fix is deployed: replay hands it back, the consumer handles it, the record goes
        code, out, err = await _cli(nats_url, "replay", str(one.seq))
        assert code == 0, err
        await wait_for(lambda: first in handled, timeout=20, what="the replayed message handled")
        assert one.seq not in {d.seq for d in await mine()}

        other = next(d for d in letters if d.seq != one.seq)
        code, _, _ = await _cli(nats_url, "drop", str(other.seq))
        assert code == 0 and await mine() == []

        # hostile: a sequence that is gone, one that is not a number
        code, _, err = await _cli(nats_url, "show", str(other.seq))
        assert code == 1 and f"no dead letter {other.seq}" in err
        code, _, err = await _cli(nats_url, "drop", "-3")
        assert code == 2 and "positive number" in err
        code, _, err = await _cli(nats_url, "replay", "99999999999999999999999")
        assert code == 2 and "positive number" in err
    finally:
        await consumer.stop()

    # a dead letter whose consumer nobody runs is kept, and replay says why
    seq = await dead_letters.store(
        js,
        consumer=durable,
        stream=name,
        stream_seq=ack.seq,
        subject="x",
        reason="r\nwith a newline",
        failures=1,
        data=b"{}",
    )
    assert (await dead_letters.show(js, seq)).reason == "r with a newline"
    code, _, err = await _cli(nats_url, "replay", str(seq))
    assert code == 1 and f"consumer {durable} is not running" in err
    assert (await dead_letters.show(js, seq)).seq == seq
    await dead_letters.drop(js, seq)


async def _two(mine) -> list[dead_letters.DeadLetter] | None:
    found = await mine()
    return found if len(found) == 2 else None
