"""Issue 24: a wait costs the same on a thread's 10,000th run as on its first. The waits of the SDKs (typed async
and sync, and the dict client) and of the MCP ``thread_wait`` tool read the run, or a one-item page for the
thread's sequence, never the whole thread document, which costs the thread's length (208 ms at 10,000 runs:
bench/run.py scenario F); so do the delegation tools and the console's read of the last runs (``?runs=``). The
whole document is the one read that asks Redis for HGETALL (``ProjectionStore.doc``): none is asked, on a thread
the projector is writing (every read of only what it answers with is one Redis call, which it cannot move
under) nor on a thread at rest."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import HANG, script, text
from treadle.client import AsyncTreadle, Treadle


async def _whole_reads(redis: Redis) -> int:
    return int((await redis.info("commandstats")).get("cmdstat_hgetall", {}).get("calls", 0))


async def _every_wait(api, mcp, sdk: AsyncTreadle, sync: Treadle, thread: str, run: str) -> list[str]:
    """The status each kind of wait answers with."""
    waited = await asyncio.gather(
        call(mcp, "thread_wait", thread_id=thread, run_id=run, timeout_seconds=30),
        call(mcp, "thread_wait", thread_id=thread, timeout_seconds=30),
        sdk.wait_run(run, timeout=30),
        asyncio.to_thread(sync.wait_run, run, 30),
        api.client.wait_run(run, 30),
    )
    mcp_run, mcp_latest, typed, synced, plain = waited
    return [mcp_run["run"]["status"], mcp_latest["run"]["status"], typed.status, synced.status, plain["status"]]


async def test_waits_on_a_playing_and_an_ended_run_read_no_whole_thread_document(api, stack):
    redis = Redis.from_url(stack.redis_url)
    try:
        async with (
            mcp_session(api.client.base_url, api.token) as mcp,
            AsyncTreadle(api.client.base_url, api.token) as sdk,
        ):
            with Treadle(api.client.base_url, api.token) as sync:
                thread = await api.create_thread(title="waits")
                run = (await api.send(thread, "hang until interrupted", script=script(HANG)))["run_id"]
                await api.wait_running(run)
                task = await call(
                    mcp, "delegate_task", parent_thread_id=thread, task="sum it", mode="wait", script=script(text("42"))
                )
                assert task["finalised"] and task["result"]["summary"] == "42"
                # Each wait reads the run again on each event, the same read as on an ended run, below.
                before = await _whole_reads(redis)
                playing = asyncio.create_task(_every_wait(api, mcp, sdk, sync, thread, run))
                await api.post(f"/v1/runs/{run}/interrupt", expect=202)
                assert await playing == ["interrupted"] * 5
                assert await _whole_reads(redis) == before
                await api.wait_thread(thread, lambda doc: doc["active_run_id"] is None, "the thread at rest")

                before = await _whole_reads(redis)
                assert await _every_wait(api, mcp, sdk, sync, thread, run) == ["interrupted"] * 5
                assert (await call(mcp, "task_status", task_id=task["task_id"]))["done"]
                transfers = await call(mcp, "thread_transfers", thread_id=task["task_id"])
                assert transfers["lineage"]["parent_thread_id"] == thread and transfers["seq"] > 0
                with pytest.raises(ToolFailed) as idle:  # its parent's active run, read alone: there is none
                    await call(mcp, "delegate_task", parent_thread_id=thread, task="again")
                assert idle.value.code == "parent_not_active"
                assert [r.id for r in (await sdk.get_thread(thread, runs=1)).runs] == [run]  # what the console reads
                assert await _whole_reads(redis) == before
    finally:
        await redis.aclose()
