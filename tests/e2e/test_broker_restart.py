"""The broker itself restarts mid-run: every worker reconnects and the run still completes exactly once."""

from __future__ import annotations

import pytest

from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.core.state import fold

pytestmark = pytest.mark.e2e

REPLY = "".join(f"part {i:02d}. " for i in range(30))
SCRIPT = {"steps": [{"type": "text", "text": REPLY, "chunk": 10, "delay_ms": 40}]}


async def test_a_nats_restart_mid_run_loses_and_duplicates_nothing(api, stack, log):
    thread = await api.create_thread(title="broker restart")
    sent = await api.send(thread, "keep going", script=SCRIPT)
    run_id = sent["run_id"]

    async def streaming():
        return any(isinstance(e.data, ev.MessageDelta) for e in await log.read(api.tenant, thread))

    await wait_for(streaming, timeout=20, what="the first durable delta")
    await stack.nats.stop()
    await stack.nats.start()

    async def ended():
        try:
            events = await log.read(api.tenant, thread)
        except Exception:  # the test's own connection is reconnecting too
            return None
        return [e for e in events if isinstance(e.data, ev.RunEnded) and e.data.run_id == run_id]

    terminal = await wait_for(ended, timeout=90, what="run terminal after the broker restarted")
    assert [e.type for e in terminal] == ["run.completed"]
    events = await log.read(api.tenant, thread)
    assert len({e.id for e in events}) == len(events)
    state = fold(events)
    run = state.run(run_id)
    final = [m for m in state.messages if m.role == "assistant" and m.attempt_id == run.attempt.id]
    assert [(m.text, m.status) for m in final] == [(REPLY, "completed")]
    assert (await api.wait_run(run_id, timeout=30))["status"] == "completed"
