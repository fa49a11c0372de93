"""Stream and bucket definitions; ``ensure`` is idempotent and safe to run from every worker at start.

Every stream and bucket gets the same replica count (``TREADLE_STREAM_REPLICAS``: 1 on a single server, 3 on
a cluster), so no part of the state is lost with one node; ``ensure`` also raises (or lowers) the replicas of
what an earlier deployment created, and turns direct gets of the buckets in ``DIRECT`` on or off to match.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, ObjectStoreConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, BucketNotFoundError, NoStreamResponseError, ServiceUnavailableError

from .subjects import EVENTS_ALL, EVENTS_STREAM, PROVIDER_ALL, PROVIDER_STREAM

DAY = 86_400.0
T = TypeVar("T")

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

# Who created what (tokens, broker credentials): ops/audit.py writes it, and creates it when missing.
AUDIT_STREAM = "TREADLE_AUDIT"
AUDIT = StreamConfig(
    name=AUDIT_STREAM,
    subjects=["treadle.audit.>"],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.FILE,
    max_msg_size=64 * 1024,
)

# What consumers gave up on, with why (ops/dead_letters.py; `treadle dead-letters`)
DEAD_LETTERS_STREAM = "TREADLE_DEAD_LETTERS"
DEAD_LETTERS = StreamConfig(
    name=DEAD_LETTERS_STREAM,
    subjects=["treadle.dlq.*"],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.FILE,
    max_msg_size=1024 * 1024,
    max_age=30 * DAY,
    duplicate_window=120.0,
)

BUCKETS = (
    KeyValueConfig(bucket="treadle-hosts", history=1, ttl=30.0),
    KeyValueConfig(bucket="treadle-sessions", history=1),
    KeyValueConfig(bucket="treadle-idempotency", history=1, ttl=DAY),
    KeyValueConfig(bucket="treadle-tokens", history=1),
    KeyValueConfig(bucket="treadle-policies", history=1),  # tenant policies (ops/policies.py)
    KeyValueConfig(bucket="treadle-keys", history=1),  # secrets the replicas share (ops/keys.py)
    KeyValueConfig(bucket="treadle-web-sessions", history=1, ttl=12 * 3600.0),  # console sign-ins (gateway/sessions.py)
    KeyValueConfig(bucket="treadle-mcp-credentials", history=1, ttl=DAY),  # per-session MCP credentials (ops)
    # Workspace volumes' heartbeats (checkpoint services) and operators' drain marks (runtime/volumes.py)
    KeyValueConfig(bucket="treadle-volumes", history=1, ttl=10.0),
    KeyValueConfig(bucket="treadle-volume-drains", history=1),
    KeyValueConfig(bucket="treadle-schedules", history=1),  # tenants' schedules and their firings (ops/schedules.py)
    KeyValueConfig(bucket="treadle-webhooks", history=1),  # webhook endpoints (webhooks/store.py)
    KeyValueConfig(bucket="treadle-webhook-deliveries", history=1, ttl=7 * DAY),  # their delivery records
)

# Workspace checkpoints off the node (git packs and manifests; checkpoints/archive.py, durable.py).
CHECKPOINTS_BUCKET = "treadle-checkpoints"
CHECKPOINTS = ObjectStoreConfig(
    bucket=CHECKPOINTS_BUCKET, storage=StorageType.FILE, description="workspace checkpoints (git packs)"
)

# Buckets read with a direct get where that reads what was last written: at one replica only. A direct get is
# cheaper for the server than the stream API (no JSON, no advisory), but any replica of a replicated stream
# may answer it, one that has not stored the last put yet included; there the leader answers (as before).
DIRECT = frozenset({"treadle-policies"})


def direct_gets(bucket: str, replicas: int) -> bool:
    return bucket in DIRECT and replicas == 1


async def ensure(js: JetStreamContext, replicas: int = 1, timeout: float = 60.0) -> None:
    """Create or update every stream and bucket. On a cluster that is still electing its leaders (or one
    busy creating what the other workers asked for at the same moment) an API request can time out or
    find nobody to answer: each step is retried until ``timeout``, and each is safe to repeat."""
    deadline = asyncio.get_running_loop().time() + timeout
    for config in (EVENTS, PROVIDER, AUDIT, DEAD_LETTERS):
        await _until_done(
            deadline, functools.partial(ensure_stream, js, dataclasses.replace(config, num_replicas=replicas))
        )
    for bucket in BUCKETS:
        await _until_done(deadline, functools.partial(_ensure_bucket, js, bucket, replicas))
    await _until_done(deadline, functools.partial(_ensure_objects, js, replicas))


async def settled(step: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """``step()``, again while it times out or finds nobody to answer: on a cluster that just lost a node,
    what that node led (a stream, a consumer, the meta layer) is unavailable until the others elect a leader
    (seconds). The step must be safe to repeat."""
    return await _until_done(asyncio.get_running_loop().time() + timeout, step)


async def _until_done(deadline: float, step: Callable[[], Awaitable[T]]) -> T:
    delay = 0.1
    while True:
        try:
            return await step()
        except (NatsTimeout, NoRespondersError, NoStreamResponseError, ServiceUnavailableError):
            if asyncio.get_running_loop().time() + delay > deadline:
                raise
            await asyncio.sleep(delay)  # backoff while the cluster settles, not synchronisation
            delay = min(delay * 2, 2.0)


async def _ensure_bucket(js: JetStreamContext, bucket: KeyValueConfig, replicas: int) -> None:
    direct = direct_gets(bucket.bucket, replicas)
    try:
        await js.key_value(bucket.bucket)
    except BucketNotFoundError:
        await js.create_key_value(dataclasses.replace(bucket, replicas=replicas, direct=direct))
    else:
        await _ensure_replicas(js, f"KV_{bucket.bucket}", replicas, direct)


async def _ensure_objects(js: JetStreamContext, replicas: int) -> None:
    """The checkpoint archive's Object Store bucket (checkpoints/archive.py), at the same replica count."""
    try:
        await js.object_store(CHECKPOINTS_BUCKET)
    except BucketNotFoundError:
        await js.create_object_store(CHECKPOINTS_BUCKET, dataclasses.replace(CHECKPOINTS, replicas=replicas))
    else:
        await _ensure_replicas(js, f"OBJ_{CHECKPOINTS_BUCKET}", replicas, direct=True)


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError:  # it exists with another configuration: bring it to this one
        await js.update_stream(config)


async def _ensure_replicas(js: JetStreamContext, stream: str, replicas: int, direct: bool) -> None:
    info = await js.stream_info(stream)
    config = info.config
    if config.num_replicas != replicas:
        config = dataclasses.replace(config, num_replicas=replicas)
    if bool(config.allow_direct) != direct:
        config = dataclasses.replace(config, allow_direct=direct)
    if config is not info.config:
        await js.update_stream(config)
