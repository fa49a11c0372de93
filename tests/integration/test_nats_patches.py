"""The nats-py patches (eventlog/nats_patches.py) on a real broker: the version they were written for, and one
test per patch that it is on the path and gives what nats-py gives (3, 4 and 5 have files of their own:
test_nats_writes.py, test_nats_direct.py, test_consumer_acks.py). With another nats-py they stay off and the
public paths carry the same traffic."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.support.helpers import wait_for
from treadle.eventlog import nats_patches

T = TypeVar("T")
HEADERS = [
    {"Nats-Msg-Id": "cmd_1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    {"X-Last-Sequence": "41", "X-Colons": "a: b:c", "X-Unicode": "héllo wörld"},
    {"Only": ""},
]


@pytest.fixture
def patched() -> object:
    assert nats_patches.install()
    yield
    nats_patches.uninstall()


async def _with_and_without(read: Callable[[], Awaitable[T]]) -> tuple[T, T]:
    """``read()`` through the patches, then through nats-py's own code."""
    assert nats_patches.install()
    try:
        ours = await read()
    finally:
        nats_patches.uninstall()
    return ours, await read()


@pytest.fixture
async def stream(nats_url: str) -> AsyncIterator[tuple[Client, str, str]]:
    nc = await nats.connect(nats_url)
    name, prefix = f"PATCHES_{uuid.uuid4().hex[:8]}", f"patches{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"], allow_direct=True))
    for i, headers in enumerate(HEADERS):
        await js.publish(f"{prefix}.{i}", b"%d" % i, headers=headers)
    yield nc, name, prefix
    await js.delete_stream(name)
    await nc.close()


def test_the_patches_are_written_for_the_installed_nats_py() -> None:
    """An upgrade of nats-py fails here until the patches are checked against it (they are off meanwhile)."""
    assert nats_patches.INSTALLED == nats_patches.WRITTEN_FOR and nats_patches.ACTIVE, (
        f"nats-py {nats_patches.INSTALLED} is installed, the patches were written for {nats_patches.WRITTEN_FOR}"
    )


async def test_patch_1_header_blocks_from_the_broker_parse_as_nats_py_parses_them(nats_url: str, stream) -> None:
    nc, name, prefix = stream
    js = nc.jetstream()

    async def read() -> list[dict[str, str] | None]:
        got: list[dict[str, str] | None] = []
        sub = await nc.subscribe(f"{prefix}.live")
        for headers in HEADERS:
            await nc.publish(f"{prefix}.live", b"x", headers=headers)
            got.append((await sub.next_msg(timeout=5)).headers)
        await sub.unsubscribe()
        for seq in range(1, len(HEADERS) + 1):  # a direct get answers with the stored message's headers
            got.append((await js.get_msg(name, seq, direct=True)).headers)
        return got

    ours, theirs = await _with_and_without(read)
    assert ours == theirs
    assert ours[: len(HEADERS)] == HEADERS


def test_patch_1_and_2_install_replaces_nats_py_s_parsers_and_uninstall_puts_them_back(patched) -> None:
    assert Client._parse_header_lines is nats_patches.parse_header_lines
    reply = "$JS.ACK.S.C.1.7.7.1700000000000000000.0"
    assert Msg.Metadata._from_reply(reply) == nats_patches.original_metadata(reply)
    assert Msg.Metadata.__dict__["_from_reply"] is not nats_patches._ORIGINAL_METADATA


async def test_patch_2_a_delivery_s_metadata_is_nats_py_s(stream) -> None:
    nc, name, prefix = stream
    js = nc.jetstream()
    durable = f"meta{uuid.uuid4().hex[:8]}"

    async def read() -> list[tuple[str, Any, int]]:
        """The deliveries of a fresh consumer of the same name: the same ack subjects, bar the pending count."""
        await js.add_consumer(name, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.NONE))
        sub = await js.pull_subscribe_bind(durable, name)
        out = []
        for msg in await sub.fetch(len(HEADERS), timeout=5):
            assert msg.reply
            out.append((msg.reply, msg.metadata, nats_patches.stream_sequence(msg.reply)))
        await sub.unsubscribe()
        await js.delete_consumer(name, durable)
        return out

    ours, theirs = await _with_and_without(read)
    assert [m for _, m, _ in ours] == [m for _, m, _ in theirs]
    for reply, meta, seq in ours:
        assert meta == nats_patches.original_metadata(reply) and seq == meta.sequence.stream
    assert [seq for _, _, seq in ours] == [1, 2, 3]


async def test_patch_6_a_context_s_connection_and_api_prefix_reach_the_broker(nc) -> None:
    js = nc.jetstream()
    assert nats_patches.connection_of(js) is nc
    assert nats_patches.api_prefix(js) == "$JS.API"
    assert nats_patches.api_prefix(nc.jetstream(domain="hub")) == "$JS.hub.API"
    answer = await nc.request(f"{nats_patches.api_prefix(js)}.INFO", b"", timeout=5)
    assert msgspec.json.decode(answer.data)["type"] == "io.nats.jetstream.api.v1.account_info_response"


async def test_patch_7_an_ordered_consumer_with_a_callback_loses_its_poller_and_flow_control_still_flows(
    stream,
) -> None:
    """A few MiB through an ordered consumer whose poller is gone: the broker asks for flow control on the way
    (a request left unanswered would stall the consumer), and every message arrives, in order."""
    nc, name, prefix = stream
    js = nc.jetstream()
    count, size = 3000, 2048
    for i in range(count):
        await js.publish(f"{prefix}.bulk", b"%08d" % i + b"x" * size)
    got: list[bytes] = []

    async def take(msg: Msg) -> None:
        got.append(msg.data[:8])

    psub = await js.subscribe(f"{prefix}.bulk", cb=take, ordered_consumer=True)
    nats_patches.stop_flow_control_poller(psub)
    try:
        task = psub._sub._jsi._fctask
        await wait_for(lambda: task.done(), what="the poller cancelled")
        await wait_for(lambda: len(got) == count, timeout=30, what="every message")
        assert got == [b"%08d" % i for i in range(count)]
    finally:
        await psub.unsubscribe()


async def test_with_another_nats_py_the_patches_stay_off_and_the_public_paths_carry_the_traffic(
    stream, monkeypatch, caplog
) -> None:
    nc, name, prefix = stream
    js = nc.jetstream()
    monkeypatch.setattr(nats_patches, "INSTALLED", "9.9.9")
    monkeypatch.setattr(nats_patches, "ACTIVE", False)
    before = (Client.__dict__["_flush_pending"], Client.__dict__["_parse_header_lines"], Msg.Metadata._from_reply)
    with caplog.at_level(logging.WARNING, logger=nats_patches.__name__):
        assert nats_patches.install() is False
    assert "nats-py 9.9.9 is installed" in caplog.text and nats_patches.WRITTEN_FOR in caplog.text
    assert (
        Client.__dict__["_flush_pending"],
        Client.__dict__["_parse_header_lines"],
        Msg.Metadata._from_reply,
    ) == before

    seen: list[bytes] = []

    def keep(msg: Msg) -> None:
        if msg.data == b"3":
            raise ValueError("dropped, as a direct handler's failure is")
        seen.append(msg.data)

    sub = await nats_patches.subscribe(nc, f"{prefix}.off", keep)
    assert not nats_patches.is_direct(sub)
    for i in range(50):
        await nc.publish(f"{prefix}.off", b"%d" % i)
    await wait_for(lambda: len(seen) == 49, what="every message handled by nats-py's own task")
    assert seen == [b"%d" % i for i in range(50) if i != 3]

    durable = f"off{uuid.uuid4().hex[:8]}"
    await js.add_consumer(name, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
    pull = await js.pull_subscribe_bind(durable, name)
    acks = nats_patches.Acks(nc)
    for msg in await pull.fetch(len(HEADERS), timeout=5):
        await acks.ack(msg)  # msg.ack(): written at once

    async def settled() -> bool:
        info = await js.consumer_info(name, durable)
        return info.ack_floor is not None and info.ack_floor.stream_seq == len(HEADERS)

    await wait_for(settled, what="every ack landed")
