"""Thread-keyed work is spread over a fixed number of partitions (docs/concepts.md "Scaling out").

The broker, not Python, assigns the partition: a subject mapping of the service account (``auth.conf``)
appends ``{{partition(N, 2)}}`` of the thread-id token to every event and provider-event subject, so
``treadle.evt.<tenant>.<thread>.<aggregate>.<event>`` is stored as ``….<event>.<p>``. Appending (rather than
inserting) the token keeps every existing reader whole: the OCC fence and the per-thread reads filter on
``treadle.evt.<tenant>.<thread>.>``, which still covers the stored subject, and tenant credentials on
``treadle.evt.<tenant>.>`` are unchanged. A consumer of one partition filters on the last token.

The partition count is a property of the broker config (``TREADLE_PARTITIONS`` when ``auth.conf`` is
first rendered: ``treadle broker init`` or ``treadle up``; kept beside it from then on). Unset, a deployment's
broker gets ``DEFAULT_PARTITIONS`` and the embedded stack's one broker a count for the machine (:func:`for_machine`). Workers never configure it: they ask the broker
(:func:`discover`), which answers through a mapping of a probe subject onto a literal carrying the count, so
the two can never disagree.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

DEFAULT_PARTITIONS = 8
PROBE = "treadle.partitions.probe"
_PROBE_REPLY = PROBE + ".*"


class PartitionsNotConfigured(RuntimeError):
    """The broker has no partition mappings (a nats-server not started from Treadle's config)."""


def configured_count() -> int:
    """The partition count for a broker config being rendered (``TREADLE_PARTITIONS``, default 8)."""
    raw = os.environ.get("TREADLE_PARTITIONS", "")
    count = int(raw) if raw.strip() else DEFAULT_PARTITIONS
    if not 1 <= count <= 1024:
        raise ValueError(f"TREADLE_PARTITIONS must be between 1 and 1024, not {count}")
    return count


def for_machine(replicas: int = 1, cpus: int | None = None) -> int:
    """The partition count of the embedded stack (``treadle up``: one broker and the workers on this machine):
    one per core up to ``DEFAULT_PARTITIONS``, rounded up to a multiple of the worker replicas (each then holds as
    many). Partitions spread
    thread-keyed work over replicas; beyond the cores they buy no parallelism, and each costs a durable consumer
    per worker kind (four) whose state nats-server keeps writing. A deployment's broker keeps the default: its
    replicas scale out later, and the count cannot change in place."""
    cores = cpus if cpus is not None else os.cpu_count() or 1
    count = max(1, min(DEFAULT_PARTITIONS, cores))
    return -(-count // replicas) * replicas  # a multiple of the replicas: each holds as many


class PartitionsChanged(ValueError):
    """``TREADLE_PARTITIONS`` differs from the count a broker's streams were first partitioned with."""


def pinned_count(pin: Path, default: int = DEFAULT_PARTITIONS) -> int:
    """The partition count of a broker whose config is rendered from the directory holding ``pin``: the one
    it was first rendered with, kept in ``pin``. A different count would send each thread's events to another
    partition than its unacknowledged ones, and a later render by a process without the setting (issuing a
    tenant credential) would silently fall back to the default: so a set count that differs is refused.
    ``default`` applies to the first render only, without the setting."""
    asked = configured_count() if os.environ.get("TREADLE_PARTITIONS", "").strip() else None
    if pin.is_file():
        count = int(pin.read_text())
        if asked is not None and asked != count:
            raise PartitionsChanged(
                f"TREADLE_PARTITIONS={asked}, but this broker's events are partitioned {count} ways ({pin}); "
                "the count of a deployment cannot change in place"
            )
        return count
    count = asked or default
    pin.parent.mkdir(parents=True, exist_ok=True)
    pin.write_text(f"{count}\n")
    return count


def nats_mappings(count: int | None = None) -> dict[str, str]:
    """The subject mappings of the service account (``accounts.TREADLE.mappings`` in the nats-server config:
    mappings apply to the account whose clients publish, and the workers live in ``TREADLE``). The sources
    match the unpartitioned subjects only (exactly their token count), so an already partitioned subject is
    never mapped again."""
    n = configured_count() if count is None else count
    token = f"{{{{partition({n},2)}}}}"
    return {
        "treadle.evt.*.*.*.*": "treadle.evt.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}." + token,
        "treadle.prov.*.*.*": "treadle.prov.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}." + token,
        PROBE: f"{PROBE}.{n}",
    }


def partition_of(thread: str, count: int) -> int:
    """The partition nats-server assigns ``thread`` (FNV-1a 32 of the token, modulo ``count``), for tests and
    tools; the workers take it from the stored subject."""
    h = 0x811C9DC5
    for byte in thread.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % count


def events_filter(partition: int) -> str:
    return f"treadle.evt.*.*.*.*.{partition}"


def event_types_filters(types: tuple[str, ...] | list[str], partition: int) -> list[str]:
    return [f"treadle.evt.*.*.{t}.{partition}" for t in types]


def provider_filter(partition: int) -> str:
    return f"treadle.prov.*.*.*.{partition}"


async def discover(nc: NATS, timeout: float = 5.0) -> int:
    """The broker's partition count. Raises :class:`PartitionsNotConfigured` when the probe comes back
    unmapped (or not at all)."""
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_probe(msg: Msg) -> None:
        if not answer.done():
            answer.set_result(msg.subject)

    sub = await nc.subscribe(PROBE, cb=on_probe)
    mapped = await nc.subscribe(_PROBE_REPLY, cb=on_probe)
    try:
        await nc.publish(PROBE, b"")
        try:
            subject = await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise PartitionsNotConfigured("the partition probe did not come back from the broker") from None
    finally:
        await sub.unsubscribe()
        await mapped.unsubscribe()
    count = subject.rsplit(".", 1)[-1]
    if subject == PROBE or not count.isdigit() or int(count) < 1:
        raise PartitionsNotConfigured(
            "nats-server has no partition mappings: start it with the config Treadle renders "
            "(treadle.runtime.partitions.nats_mappings)"
        )
    return int(count)
