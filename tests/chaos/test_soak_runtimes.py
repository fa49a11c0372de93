"""`make soak` with the real runtimes (issue 17): threads on the real ``codex app-server`` and the real Claude Code
CLI (against the mock model APIs of tests/codex and tests/claude) while a killer sends SIGKILL to random workers,
kill -9 to single runtime processes and to redis-server, and restarts the whole stack gracefully once. Afterwards
every message has exactly one completed run with its whole reply, in order, and `treadle check` passes.
TREADLE_SOAK_SECONDS (default 60) is how long messages are sent."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import nats
import pytest

from tests.chaos.chaos import Killer, Throughput, WorkerOutput, problems, send, treadle_check, verdict
from tests.claude.claude_stack import claude_env
from tests.claude.mock_api import MockMessagesApi
from tests.codex.codex_mock import MockResponses, Text
from tests.codex.codex_support import codex_env
from tests.support.api import make_api
from treadle.cli.stack import Stack
from treadle.eventlog.log import EventLog
from treadle.runtime import broker_urls

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("TREADLE_SOAK_SECONDS", "60"))
THREADS = {"codex": 2, "claude": 2}  # real runtimes are heavy on a 2-core machine
CODEX_REPLY = "codex soak reply"
# What each provider's runs answer: Codex by the scenario registered per message, Claude by echoing it.
REPLIES = {"codex": lambda text: CODEX_REPLY, "claude": lambda text: f"Mock Claude heard: {text}"}


@pytest.mark.timeout(SECONDS + 900)
async def test_L9_3_runs_on_real_runtimes_survive_killed_runtimes_workers_redis_and_a_stack_restart(tmp_path):
    homes = Path.home() / ".cache" / "treadle-test" / "codex-homes" / uuid.uuid4().hex[:12]  # not under /tmp
    homes.mkdir(parents=True)
    codex_api = await MockResponses().start()
    try:
        async with MockMessagesApi() as claude_api:
            with WorkerOutput(tmp_path / "workers.log") as output:
                env = {**codex_env(codex_api, homes), **claude_env(claude_api)}
                async with Stack(tmp_path / "stack", env=env, on_output=output) as stack:
                    await _soak(stack, codex_api, output)
    finally:
        await codex_api.stop()
        shutil.rmtree(homes, ignore_errors=True)


async def _soak(stack: Stack, codex_api: MockResponses, output: WorkerOutput) -> None:
    nc = await nats.connect(**broker_urls.parse(stack.nats_url).connect_options())
    api = await make_api(stack, nc, "soakrt")
    try:
        threads = {
            await api.create_thread(title=f"{p} {i}", provider=p): p for p, n in THREADS.items() for i in range(n)
        }
        sent: dict[str, list[str]] = {t: [] for t in threads}
        log = EventLog(nc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SECONDS
        stop = asyncio.Event()
        loop.call_at(deadline, stop.set)
        killer = Killer(
            stack,
            seed=int(os.environ.get("TREADLE_SOAK_SEED", "17")),
            pause=(6.0, 12.0),
            signals=(signal.SIGKILL, signal.SIGTERM),
            redis_pause=(10.0, 20.0),
            runtimes=("app-server", "/claude"),
            runtime_pause=(6.0, 12.0),
            restart_after=SECONDS / 2,
        )
        throughput = Throughput()

        async def talk(thread: str, provider: str) -> None:
            while loop.time() < deadline:
                text = f"{'#text ' if provider == 'claude' else ''}{thread} message {len(sent[thread])}"
                codex_api.on(text, [Text(CODEX_REPLY)])
                sent_at = time.monotonic()
                run_id = (await send(api, thread, text, mode="queue_after_active"))["run_id"]
                sent[thread].append(text)
                try:
                    await api.wait_run(run_id, timeout=240)
                    throughput.completed(sent_at)
                except TimeoutError:
                    tail = [(e.seq, e.type, e.actor) for e in await log.read(api.tenant, thread)][-12:]
                    raise AssertionError(
                        f"run {run_id} stuck; thread tail: {tail}; {killer.story()}; worker output: {output.path}"
                    ) from None

        await asyncio.gather(killer.run(stop), *(talk(t, p) for t, p in threads.items()))
        throughput.stop()
        await stack.wait_ready(timeout=120)
        story = f"{killer.story()}\nworker output: {output.path}"
        wrong = {t: w for t, p in threads.items() if (w := verdict(await log.read(api.tenant, t), sent[t], REPLIES[p]))}
        assert not wrong, story + "\n" + "\n".join(f"{t}: {w}" for t, w in wrong.items())
        code, report = await treadle_check(stack, "--tenant", api.tenant)
        assert code == 0 and report["ok"], story + "\n" + "\n".join(problems(report))
        print(f"\nsoak (real runtimes): {sum(map(len, sent.values()))} messages: {throughput.summary()}; {story}")
    finally:
        await api.close()
        await nc.close()
