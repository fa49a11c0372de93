"""What a provider-backed handoff summary (L5.5) costs: the round trip from the supervisor's side (not a test;
numbers for the issue note). The local summariser is pure string work on the folded graph (microseconds).

    scripts/loopback-only.sh .venv/bin/python bench/summariser_overhead.py [--n 30] [--provider scripted|claude]

A nats-server and one provider host in this process; ``ProviderSummariser.apply`` asks the host for one
summary (a throwaway provider thread in a scratch workspace, one turn). ``--provider claude`` runs the real Claude Code CLI against the mock Messages API of
``tests/claude/mock_api.py`` (a CLI start per summary).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.claude.mock_api

import nats  # noqa: E402

from treadle.core import events as ev  # noqa: E402
from treadle.eventlog import streams  # noqa: E402
from treadle.ops.servers import NatsServer  # noqa: E402
from treadle.provider_host.service import ProviderHost  # noqa: E402
from treadle.providers.hosts import HostClient  # noqa: E402
from treadle.runtime.settings import ProviderHostSettings, Shared  # noqa: E402
from treadle.supervisor.summariser import ProviderSummariser  # noqa: E402

HEADING = "# Context: summary of this conversation so far (runs 1-8):"
MATERIAL = (
    HEADING
    + "\n\n"
    + "\n\n".join(
        f"## Run {n} (completed, on scripted)\nUser asked: step {n} of the parser\nAssistant replied: done {n}. "
        + "lorem ipsum " * 40
        for n in range(1, 9)
    )
)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def main(n: int, provider: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        server = NatsServer(state / "nats")
        await server.start()
        nc = await nats.connect(server.url)
        await streams.ensure(nc.jetstream())
        mock = None
        if provider == "claude":
            import os

            from tests.claude.mock_api import MockMessagesApi

            mock = await MockMessagesApi().__aenter__()
            os.environ.update(
                TREADLE_CLAUDE_BASE_URL=mock.url,
                TREADLE_CLAUDE_API_KEY="sk-ant-mock-000",
                TREADLE_CLAUDE_MAX_RETRIES="0",
            )
        host = ProviderHost(nc, Shared(state_dir=state, nats_url=server.url), ProviderHostSettings(host_id="bench"))
        await host.start()
        script = {"steps": [{"type": "text", "text": "The parser is done in eight steps; nothing is open."}]}
        summariser = ProviderSummariser(HostClient(nc, 5.0), provider, script=script, timeout=120)
        handoff = ev.HandoffCreated(
            handoff_id="hoff_1", run_id="run_1", strategy="full_thread_summary", to_provider="b", text=MATERIAL[:4000]
        )
        provided = []
        try:
            for _ in range(n):
                started = time.perf_counter()
                [out] = await summariser.apply("bench", "local", [handoff], {"hoff_1": MATERIAL}, 4000)
                provided.append((time.perf_counter() - started) * 1000)
                assert isinstance(out, ev.HandoffCreated) and out.summariser == f"provider:{provider}", out
        finally:
            await host.stop()
            await nc.close()
            await server.stop()
            if mock is not None:
                await mock.__aexit__(None, None, None)
    return {
        "provider": provider,
        "n": n,
        "provider_summary_ms": {
            "p50": round(statistics.median(provided), 1),
            "p95": round(pct(provided, 0.95), 1),
            "first": round(provided[0], 1),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--provider", default="scripted", choices=["scripted", "claude"])
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.n, args.provider)), indent=2))
