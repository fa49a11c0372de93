"""The durable pull consumer of a tenant consumer credential, created and repositioned by the operator with
the service user: a credential cannot create consumers itself (a create request may name a subject for the
server to deliver to, which no subject permission can see; see :mod:`treadle.ops.broker_auth`).

The consumer is named after the credential, filtered on ``treadle.evt.<tenant>.>`` or on one event type,
and has no ``deliver_subject``: it is a pull consumer, so messages go only where a pull request asks, which
for a credential is always back into its own account.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from ..eventlog.subjects import EVENTS_STREAM
from .tenant_events import filter_type, filters_for, filters_of

ACK_WAIT = 30.0  # seconds a fetched, unacked event waits before it is delivered again
MAX_ACK_PENDING = 1024


def config(consumer: str, tenant: str, *, from_seq: int | None = None, type_: str | None = None) -> ConsumerConfig:
    if from_seq is not None and from_seq < 1:
        raise ValueError(f"from_seq must be a stream sequence (1 or more), not {from_seq}")
    filters = filters_for(tenant, [type_] if type_ else None)
    return ConsumerConfig(
        name=consumer,
        durable_name=consumer,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=filters if len(filters) > 1 else None,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT,
        max_ack_pending=MAX_ACK_PENDING,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE if from_seq else DeliverPolicy.ALL,
        opt_start_seq=from_seq or None,
    )


async def create(
    js: JetStreamContext, consumer: str, tenant: str, *, from_seq: int | None = None, type_: str | None = None
) -> ConsumerConfig:
    """The credential's consumer, from the start of the stream or from ``from_seq``."""
    wanted = config(consumer, tenant, from_seq=from_seq, type_=type_)
    await js.add_consumer(EVENTS_STREAM, wanted)
    return wanted


async def reset(
    js: JetStreamContext,
    consumer: str,
    tenant: str,
    *,
    from_seq: int | None = None,
    type_: str | None = None,
    keep_type: bool = True,
) -> ConsumerConfig:
    """Recreate the credential's consumer at ``from_seq`` (default: after what it had acked, so nothing is
    lost) with ``type_`` (default: the type it had, unless ``keep_type`` is False). A start position
    cannot be changed in place, hence delete and create. A missing consumer is created."""
    try:
        old = await js.consumer_info(EVENTS_STREAM, consumer)
    except NotFoundError:
        old = None
    if old is not None:
        if from_seq is None:
            floor = old.ack_floor.stream_seq if old.ack_floor else 0
            start = old.config.opt_start_seq or 1
            from_seq = max(floor + 1, start)
        if type_ is None and keep_type:
            type_ = filter_type(filters_of(old.config))
    wanted = config(consumer, tenant, from_seq=from_seq, type_=type_)  # bad input fails before the delete
    if old is not None:
        await js.delete_consumer(EVENTS_STREAM, consumer)
    await js.add_consumer(EVENTS_STREAM, wanted)
    return wanted
