"""L9.1: Treadle's Redis client after a Redis restart: pooled connections that died with it are retried once on a
fresh connection, so no read fails; a supervised redis-server comes back by itself after a kill -9."""

from __future__ import annotations

import asyncio
import os
import signal

from redis.exceptions import ConnectionError

from tests.support.helpers import wait_for
from treadle.ops.servers import RedisServer
from treadle.projections.connect import redis_client


async def test_L9_1_pooled_connections_that_died_with_redis_are_retried_once(tmp_path):
    async with RedisServer(tmp_path / "redis") as server:
        redis = redis_client(server.url)
        try:
            await redis.set("k", "v")
            await asyncio.gather(*(redis.get("k") for _ in range(10)))  # ten pooled connections
            server.kill()
            await server.start()  # empty again: persistence is off
            await redis.set("k", "again")  # reads and writes on connections that died with the old server
            assert await asyncio.gather(*(redis.get("k") for _ in range(20))) == [b"again"] * 20
        finally:
            await redis.aclose()


async def test_L9_1_a_supervised_redis_server_is_restarted_after_a_kill_9_and_kill_holds_it_down(tmp_path):
    server = RedisServer(tmp_path / "redis")
    await server.start()
    try:
        server.supervise()
        first = server.pid
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: server.pid not in (None, first), timeout=30, what="redis-server restarted")
        redis = redis_client(server.url)

        async def answers() -> bool:
            try:
                return await redis.ping()
            except ConnectionError:  # spawned, still starting
                return False

        try:
            await wait_for(answers, timeout=30, what="the restarted redis-server answering")
        finally:
            await redis.aclose()
        server.kill()  # a deliberate outage (a test's): left down until start()
        assert server.pid is None
        await server.start()
        assert server.pid is not None
    finally:
        await server.stop()
