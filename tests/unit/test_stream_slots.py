"""Issue 16, item 4: SSE streams per token and per tenant; a slot is given back however its stream ends."""

from __future__ import annotations

import gc

import pytest

from treadle.gateway.errors import ApiError
from treadle.gateway.stream_slots import StreamSlots


async def _chunks(n: int):
    for i in range(n):
        yield b"%d" % i


def test_a_stream_over_the_token_or_tenant_limit_is_a_typed_429():
    slots = StreamSlots(per_token=2, per_tenant=3)
    slots.open("tok-a", "acme")
    slots.open("tok-a", "acme")
    with pytest.raises(ApiError) as refused:
        slots.open("tok-a", "acme")
    assert (refused.value.status, refused.value.code) == (429, "quota_exceeded")
    assert refused.value.details == {"quota": "streams_per_token", "limit": 2, "current": 2}
    assert refused.value.headers == {"Retry-After": "1"}
    slots.open("tok-b", "acme")
    with pytest.raises(ApiError) as refused:
        slots.open("tok-c", "acme")
    assert refused.value.details["quota"] == "streams_per_tenant"
    assert slots.open_count(token_id="tok-a") == 2 and slots.open_count(tenant="acme") == 3


async def test_a_slot_is_given_back_at_the_end_at_close_and_when_dropped_unstarted():
    slots = StreamSlots(per_token=1, per_tenant=0)
    slots.open("t", "acme")
    assert [c async for c in slots.held("t", "acme", _chunks(2))] == [b"0", b"1"]
    assert slots.open_count(token_id="t") == 0
    slots.open("t", "acme")
    stream = slots.held("t", "acme", _chunks(5))
    assert await stream.__anext__() == b"0"
    await stream.aclose()  # the client went away mid-stream
    assert slots.open_count(token_id="t") == 0
    slots.open("t", "acme")
    stream = slots.held("t", "acme", _chunks(5))
    del stream  # never read: the response failed before its first byte
    gc.collect()
    assert slots.open_count(token_id="t") == 0
    slots.open("t", "acme")  # the slot is free again
