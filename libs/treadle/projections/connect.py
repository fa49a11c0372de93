"""The Redis client of every Treadle process. A pooled connection that died with a restarted Redis fails its
next command; that command is retried once on a fresh connection instead of failing a read."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError


def redis_client(url: str) -> Redis:
    return Redis.from_url(url, retry=Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError])
