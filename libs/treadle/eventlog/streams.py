"""Stream and bucket definitions; ``ensure`` is idempotent and safe to run from every worker at start."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, BucketNotFoundError

from .subjects import EVENTS_ALL, EVENTS_STREAM, PROVIDER_ALL, PROVIDER_STREAM

DAY = 86_400.0

EVENTS = StreamConfig(
    name=EVENTS_STREAM,
    subjects=[EVENTS_ALL],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.FILE,
    discard=DiscardPolicy.OLD,
    max_msg_size=1024 * 1024,
    duplicate_window=120.0,
    allow_direct=True,
    allow_atomic=True,
)

PROVIDER = StreamConfig(
    name=PROVIDER_STREAM,
    subjects=[PROVIDER_ALL],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.FILE,
    max_age=7 * DAY,
    max_msg_size=1024 * 1024,
    duplicate_window=120.0,
    allow_direct=True,
)

BUCKETS = (
    KeyValueConfig(bucket="treadle-hosts", history=1, ttl=30.0),
    KeyValueConfig(bucket="treadle-sessions", history=1),
    KeyValueConfig(bucket="treadle-idempotency", history=1, ttl=DAY),
    KeyValueConfig(bucket="treadle-tokens", history=1),
)


async def ensure(js: JetStreamContext, replicas: int = 1) -> None:
    for config in (EVENTS, PROVIDER):
        config.num_replicas = replicas
        try:
            await js.add_stream(config)
        except BadRequestError:
            await js.update_stream(config)
    for bucket in BUCKETS:
        try:
            await js.key_value(bucket.bucket)
        except BucketNotFoundError:
            bucket.replicas = replicas
            await js.create_key_value(bucket)
