"""kill -9 each worker kind in the middle of a run: the run completes exactly once, nothing is lost or
duplicated, and the projection still equals a replay of the log."""

from __future__ import annotations

import collections

import pytest

from tests.support.helpers import wait_for
from treadle.cli.stack import WORKERS
from treadle.core import events as ev
from treadle.core.state import fold
from treadle.projections.store import encode_state

pytestmark = pytest.mark.e2e

REPLY = "".join(f"chunk {i:02d}. " for i in range(40))
SCRIPT = {"steps": [{"type": "text", "text": REPLY, "chunk": 10, "delay_ms": 40}]}  # about 1.6 s of streaming


@pytest.mark.parametrize("worker", list(WORKERS))
async def test_kill_9_of_a_worker_mid_run_completes_the_run_exactly_once(worker, api, stack, log):
    thread = await api.create_thread(title=f"kill {worker}")
    sent = await api.send(thread, "stream something long", script=SCRIPT)
    run_id = sent["run_id"]

    async def streaming():
        return any(
            isinstance(e.data, ev.MessageDelta) and e.data.run_id == run_id for e in await log.read(api.tenant, thread)
        )

    await wait_for(streaming, timeout=20, what="the first durable delta")
    restarts = stack.processes.restarts(worker)
    await stack.processes.kill(worker)
    await wait_for(lambda: stack.processes.restarts(worker) > restarts, timeout=20, what=f"{worker} restarted")

    async def ended():
        return [
            e for e in await log.read(api.tenant, thread) if isinstance(e.data, ev.RunEnded) and e.data.run_id == run_id
        ]

    terminal = await wait_for(ended, timeout=60, what=f"run {run_id} terminal after killing {worker}")
    events = await log.read(api.tenant, thread)
    assert [e.type for e in terminal] == ["run.completed"]
    assert len({e.id for e in events}) == len(events), "an event was appended twice"
    users = [e for e in events if isinstance(e.data, ev.RunQueued)]
    assert len(users) == 1 and users[0].data.text == "stream something long"
    assert [m.text for m in fold(events).messages if m.role == "user"] == ["stream something long"]

    state = fold(events)
    run = state.run(run_id)
    final = [m for m in state.messages if m.role == "assistant" and m.attempt_id == run.attempt.id]
    assert [(m.text, m.status) for m in final] == [(REPLY, "completed")]
    assert run.checkpoint_id is not None and state.checkpoint(run.ordinal).run_id == run_id
    if worker == "provider-host":  # L9.3: the lost turn is retried on a resumed provider thread
        assert [a.status for a in run.attempts] == ["lost", "completed"]
        assert run.attempt.reason == "provider_recovery"
        assert len({a.provider_thread_id for a in run.attempts}) == 1
    else:
        assert [a.status for a in run.attempts] == ["completed"]
    counts = collections.Counter(m.id for m in state.messages)
    assert max(counts.values()) == 1

    await stack.wait_ready(names=[worker])
    replay = encode_state(state)

    async def projected():
        r = await api.request("GET", f"/v1/threads/{thread}")
        return r.status_code == 200 and r.content == replay

    await wait_for(projected, timeout=30, what="projection equals the replayed log")
    assert (await api.run(run_id))["status"] == "completed"
