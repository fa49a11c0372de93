"""A stream's keepalive timer is armed once and moved, not armed for every wait: when it falls due for a wait
that began after it was armed, it moves to a whole KEEPALIVE after that wait began instead of waking it early."""

from __future__ import annotations

import asyncio

import pytest

from treadle.gateway import sse


async def test_a_timer_armed_for_an_earlier_wait_does_not_end_a_later_wait_early(monkeypatch):
    monkeypatch.setattr(sse, "KEEPALIVE", 3600.0)
    inbox = sse._Inbox()
    first = asyncio.ensure_future(inbox.wait())
    await asyncio.sleep(0)
    inbox.receiver("live")(object())  # a delivery ends the first wait; the timer stays armed
    await first
    inbox.items.clear()

    second = asyncio.ensure_future(inbox.wait())
    await asyncio.sleep(0)
    inbox._due()  # the timer of the first wait falls due during the second
    await asyncio.sleep(0)
    try:
        assert not second.done()
        assert inbox._timer is not None  # moved: to the second wait's start + KEEPALIVE (the loop keeps ms)
        assert inbox._timer.when() == pytest.approx(inbox._idle_since + 3600.0, abs=0.002)
    finally:
        second.cancel()
        inbox.close()
