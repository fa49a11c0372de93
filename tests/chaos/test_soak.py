"""`make soak`: continuous runs on many threads while a killer sends SIGKILL to random workers.

Afterwards every message has one run that ended once, completed, with its full reply; no event was appended
twice; every projection equals a replay of its thread's log, read through the API and compared in Redis by
`treadle check`. Length: TREADLE_SOAK_SECONDS (default 60). The machinery is shared with the chaos test
(tests/chaos/chaos.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.chaos.chaos import Killer, Throughput, problems, send, treadle_check, verdict
from tests.support.helpers import wait_for
from treadle.core.state import fold
from treadle.projections.store import encode_state

SECONDS = float(os.environ.get("TREADLE_SOAK_SECONDS", "60"))
THREADS = 8
REPLY = "soak " * 40
SCRIPT = {"steps": [{"type": "text", "text": REPLY, "chunk": 20, "delay_ms": 30}]}


@pytest.mark.timeout(SECONDS + 600)
async def test_runs_survive_random_kill_9_of_workers(api, stack, log):
    threads = [await api.create_thread(title=f"soak {i}") for i in range(THREADS)]
    sent: dict[str, list[str]] = {t: [] for t in threads}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SECONDS
    stop = asyncio.Event()
    loop.call_at(deadline, stop.set)
    killer = Killer(stack, seed=7, pause=(1.0, 3.0), signals=(signal.SIGKILL,))
    throughput = Throughput()

    async def talk(thread: str) -> None:
        while loop.time() < deadline:
            text = f"message {len(sent[thread])}"
            sent_at = time.monotonic()
            run_id = (await send(api, thread, text, script=SCRIPT, mode="queue_after_active"))["run_id"]
            sent[thread].append(text)
            try:
                await api.wait_run(run_id, timeout=120)
                throughput.completed(sent_at)
            except TimeoutError:
                tail = [(e.seq, e.type, e.actor, e.causation_id) for e in await log.read(api.tenant, thread)][-12:]
                raise AssertionError(f"run {run_id} stuck; thread tail: {tail}; {killer.story()}") from None

    await asyncio.gather(killer.run(stop), *(talk(t) for t in threads))
    throughput.stop()
    await stack.wait_ready(timeout=60)

    for thread in threads:
        events = await log.read(api.tenant, thread)
        assert len({e.id for e in events}) == len(events), "an event was appended twice"
        assert not (wrong := verdict(events, sent[thread], REPLY)), f"{thread}: {wrong}; {killer.story()}"
        replay = encode_state(fold(events))

        async def projected(thread=thread, replay=replay):
            r = await api.request("GET", f"/v1/threads/{thread}")
            return r.status_code == 200 and r.content == replay

        await wait_for(projected, timeout=60, what=f"projection of {thread} equals its log")
    code, report = await treadle_check(stack, "--tenant", api.tenant)
    assert code == 0 and report["ok"], "\n".join(problems(report))
    assert sum(map(len, sent.values())) >= THREADS
    print(f"\nsoak: {THREADS} threads under churn: {throughput.summary()}; {killer.story()}")
