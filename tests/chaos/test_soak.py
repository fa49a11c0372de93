"""`make soak`: continuous runs on many threads while a killer sends SIGKILL to random workers.

Afterwards every run has ended exactly once, completed, with its full reply; no event was appended twice;
and every projection equals a replay of its thread's log. Length: TREADLE_SOAK_SECONDS (default 60).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from helpers import wait_for
from treadle.cli.stack import WORKERS
from treadle.domain import events as ev
from treadle.domain.thread import fold
from treadle.projections.store import encode_state

SECONDS = float(os.environ.get("TREADLE_SOAK_SECONDS", "60"))
THREADS = 8
REPLY = "soak " * 40
SCRIPT = {"steps": [{"type": "text", "text": REPLY, "chunk": 20, "delay_ms": 30}]}


@pytest.mark.timeout(SECONDS + 600)
async def test_runs_survive_random_kill_9_of_workers(api, stack, log):
    threads = [await api.create_thread(title=f"soak {i}") for i in range(THREADS)]
    runs: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SECONDS

    async def talk(thread: str) -> None:
        n = 0
        while loop.time() < deadline:
            sent = await api.send(thread, f"message {n}", script=SCRIPT, mode="queue_after_active")
            runs[sent["run_id"]] = thread
            n += 1
            try:
                await api.wait_run(sent["run_id"], timeout=120)
            except TimeoutError:
                tail = [(e.seq, e.type, e.actor, e.causation_id) for e in await log.read(api.tenant, thread)][-12:]
                raise AssertionError(f"run {sent['run_id']} stuck; thread tail: {tail}") from None

    async def killer() -> None:
        rng = random.Random(7)
        while loop.time() < deadline:
            await asyncio.sleep(rng.uniform(1.0, 3.0))  # the kill rhythm is the scenario, not a wait
            await stack.processes.kill(rng.choice(list(WORKERS)))

    await asyncio.gather(killer(), *(talk(t) for t in threads))
    await stack.wait_ready(timeout=60)

    for thread in threads:
        events = await log.read(api.tenant, thread)
        assert len({e.id for e in events}) == len(events), "an event was appended twice"
        state = fold(events)
        ended = [e.data.run_id for e in events if isinstance(e.data, ev.RunEnded)]
        assert sorted(ended) == sorted(r.id for r in state.runs), "a run ended twice or never"
        for run in state.runs:
            assert run.status == "completed", (run.id, run.status, run.error)
            final = [m for m in state.messages if m.role == "assistant" and m.attempt_id == run.attempt.id]
            assert [m.text for m in final] == [REPLY]
        replay = encode_state(state)

        async def projected(thread=thread, replay=replay):
            r = await api.request("GET", f"/v1/threads/{thread}")
            return r.status_code == 200 and r.content == replay
        await wait_for(projected, timeout=60, what=f"projection of {thread} equals its log")
    assert len(runs) >= THREADS
