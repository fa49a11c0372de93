"""Replicated workers over real processes: two replicas each of coordinator, supervisor and projector share
the thread partitions by lease (runtime/leases.py). Work spreads over both; when one replica of each kind is
killed mid-flow (and kept down), the survivors take their partitions over and every message still gets
exactly one completed run, in order, read through the projections."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from treadle.cli.stack import REPLICATED, Stack
from treadle.core import events as ev
from treadle.core.state import fold
from treadle.eventlog.log import EventLog
from treadle.projections.check import check_log
from treadle.runtime.leases import LeaseTable
from treadle.runtime.partitions import for_machine, partition_of

pytestmark = pytest.mark.e2e

TTL = 3.0
ENV = {"TREADLE_LEASE_TTL": str(TTL)}
P = for_machine(replicas=2)  # what the embedded stack of two replicas chose on this machine
REPLY = "".join(f"part {i:02d}. " for i in range(30))
QUEUE = "queue_after_active"  # follow-ups wait for the active run (L3.6), rather than steer it
STREAMING = {"steps": [{"type": "text", "text": REPLY, "chunk": 10, "delay_ms": 50}]}  # about 1.5 s


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("replicas"), env=ENV, replicas=2, on_output=quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def nc(stack):
    conn = await nats.connect(stack.nats_url)
    yield conn
    await conn.close()


@pytest.fixture
async def api(stack, nc, request):
    client = await make_api(stack, nc, f"replicas{len(request.node.name)}{id(request) % 10_000}")
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def table(nc):
    async with LeaseTable(nc) as t:
        yield t


def leases(table: LeaseTable) -> dict[str, dict[int, str]]:
    """kind -> partition -> holding replica, as recorded in KV."""
    return {kind: table.holders(kind) for kind in REPLICATED}


def spread(held: dict[int, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for holder in held.values():
        counts[holder] = counts.get(holder, 0) + 1
    return counts


async def test_L3_6_two_replicas_of_each_worker_share_the_partitions_and_every_run_completes(stack, nc, table, api):
    def even():
        held = leases(table)
        return all(len(held[k]) == P and spread(held[k]) == {k: P // 2, f"{k}-2": P // 2} for k in REPLICATED) and held

    held = await wait_for(even, timeout=30, what="partitions split evenly between the replicas")

    threads = [await api.create_thread(title=f"spread {i}") for i in range(16)]
    sent = {t: [await api.send(t, f"first of {t}"), await api.send(t, f"second of {t}", mode=QUEUE)] for t in threads}
    for t in threads:
        for s in sent[t]:
            await api.wait_run(s["run_id"], timeout=60)
    # the work went to both replicas of every kind: each served threads of its partitions
    for kind in REPLICATED:
        serving = {held[kind][partition_of(t, P)] for t in threads}
        assert serving == {kind, f"{kind}-2"}, f"{kind}: only {serving} served the threads"
    report = await check_log(nc, api.tenant)
    assert report.problems == [] and report.terminal_runs == report.runs == 2 * len(threads)


async def test_L3_6_killed_replicas_of_each_worker_are_taken_over_and_every_message_runs_once_in_order(
    stack, nc, table, api
):
    log = EventLog(nc)
    threads = [await api.create_thread(title=f"takeover {i}") for i in range(12)]
    texts = {t: [f"one {t}", f"two {t}", f"three {t}"] for t in threads}
    runs: dict[str, list[str]] = {}
    for t in threads:
        first = await api.send(t, texts[t][0], script=STREAMING)
        runs[t] = [first["run_id"]] + [(await api.send(t, text, mode=QUEUE))["run_id"] for text in texts[t][1:]]
    held = leases(table)
    victims = {
        t
        for t in threads
        if held["coordinator"][partition_of(t, P)] == "coordinator-2"
        or held["supervisor"][partition_of(t, P)] == "supervisor-2"
    }
    assert victims, "no thread landed on the replicas about to be killed"

    async def streaming():
        deltas = 0
        for t in victims:
            deltas += any(isinstance(e.data, ev.MessageDelta) for e in await log.read(api.tenant, t))
        return deltas >= 2

    await wait_for(streaming, timeout=30, what="runs streaming on the victims' partitions")

    killed = time.monotonic()
    await asyncio.gather(*(stack.processes.halt(f"{kind}-2") for kind in REPLICATED))

    def taken_over():
        now = leases(table)
        return all(spread(now[k]) == {k: P} for k in REPLICATED) and now

    await wait_for(taken_over, timeout=30, what="the survivors hold every partition")
    took = time.monotonic() - killed
    print(f"\npartitions of the killed replicas taken over {took:.2f}s after the kill (lease TTL {TTL}s)")

    for t in threads:
        for run_id in runs[t]:
            await api.wait_run(run_id, timeout=90)  # read through the projections: the projector took over too
    for t in threads:
        events = await log.read(api.tenant, t)
        assert len({e.id for e in events}) == len(events), f"{t}: an event was appended twice"
        queued = [e.data for e in events if isinstance(e.data, ev.RunQueued)]
        assert [q.text for q in queued] == texts[t] and [q.run_id for q in queued] == runs[t]
        ended = [e.data for e in events if isinstance(e.data, ev.RunEnded)]
        assert [(e.run_id, type(e).__name__) for e in ended] == [(r, "RunCompleted") for r in runs[t]], (
            f"{t}: runs ended out of order or more than once"
        )
        state = fold(events)
        assert [m.text for m in state.messages if m.role == "user"] == texts[t]
        first = state.run(runs[t][0])
        assert [m.text for m in state.messages if m.role == "assistant" and m.attempt_id == first.attempt.id] == [REPLY]
    report = await check_log(nc, api.tenant)
    assert report.problems == [], report.problems
    assert report.terminal_runs == report.runs == 3 * len(threads)
