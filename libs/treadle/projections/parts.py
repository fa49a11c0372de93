"""Reads of one thread that fetch from Redis only the parts they answer with: a run, its messages and
checkpoint, the queue, what a run's diff compares, a lineage node. Each costs the same on the thousandth run as
on the first (reading the whole document cost 200–560 ms at 2,000 runs: bench/long_thread.py).

A read goes by the thread's places (``places``) in a few round trips, each reading the thread's ``seq`` and
``v`` along, and is one snapshot: when the projector wrote in between (another seq), it starts again; when
the parts are not (wholly) there in this view version, it raises ``Missing`` and the caller reads the whole
document as before. Every answer is shaped by the same view functions as from the whole document, over a
small ``ThreadView`` holding just the items found, so it is the same answer byte for byte.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import msgspec
from redis.asyncio import Redis

from ..views.checkpoints import Checkpoint
from ..views.lineage import ContextHandoff, ContextTransfer, Lineage
from ..views.requests import Activity
from ..views.runs import Message, QueueView, Run
from ..views.thread import (
    RunChange,
    RunView,
    Thread,
    ThreadHead,
    ThreadView,
    queue_view,
    recent_ordinals,
    run_change,
    run_view,
)
from . import document, places

T = TypeVar("T")
TRIES = 3  # snapshots tried before giving up to the whole document (a thread written to on every read)


class Missing(Exception):
    """The thread's parts are not (wholly) stored in this view version: read its whole document instead."""


class _Moved(Exception):
    """The projector wrote the thread between two reads of one snapshot."""


_thread = msgspec.json.Decoder(Thread | None)
_ids = msgspec.json.Decoder(list[str])
_id = msgspec.json.Decoder(str | None)
_lineage = msgspec.json.Decoder(Lineage | None)
_transfers = msgspec.json.Decoder(list[ContextTransfer])
_DECODERS: dict[str, Any] = {
    "runs": msgspec.json.Decoder(Run),
    "messages": msgspec.json.Decoder(Message),
    "checkpoints": msgspec.json.Decoder(Checkpoint),
    "handoffs": msgspec.json.Decoder(ContextHandoff),
    "activity": msgspec.json.Decoder(Activity),
}
_SMALL = [name for name in document.FIELDS if name not in document.LISTS]  # stored whole, each as one field
_view = msgspec.json.Decoder(ThreadView)


class Snapshot:
    """Reads of one thread's document and places that all reflect one stream sequence."""

    def __init__(self, redis: Redis, doc_key: str, places_key: str) -> None:
        self._redis = redis
        self._keys = doc_key, places_key
        self.seq: bytes | None = None

    @property
    def sequence(self) -> int:
        """The stream sequence every read of this snapshot reflects (known once it has read anything)."""
        assert self.seq is not None
        return int(self.seq)

    def _checked(self, got: list[bytes | None]) -> list[bytes | None]:
        seq, version = got[:2]
        if seq is None or version != document.VERSION:
            raise Missing
        if self.seq is None:
            self.seq = seq
        elif seq != self.seq:
            raise _Moved
        return got[2:]

    async def get(self, fields: list[str], where: list[str] | None = None) -> tuple[list[Any], list[Any]]:
        """Document fields and places, in one round trip."""
        head = ["seq", "v"]
        if not where:
            return self._checked(cast("list[bytes | None]", await self._redis.hmget(self._keys[0], head + fields))), []
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self._keys[0], head + fields)
            pipe.hmget(self._keys[1], head + where)
            doc, at = await pipe.execute()
        return self._checked(doc), self._checked(at)

    async def items(self, name: str, positions: list[int]) -> list[Any]:
        """Items of the list ``name`` at ``positions``, decoded to their views."""
        if not positions:
            return []
        raw, _ = await self.get([f"l:{name}:{i}" for i in positions])
        if any(r is None for r in raw):
            raise Missing
        return [_DECODERS[name].decode(r) for r in raw]

    async def thread(self, *fields: str, where: list[str] | None = None) -> tuple[Thread, list[bytes], list[Any]]:
        """The thread with other document fields (Missing when one is not there) and places (None: no such)."""
        got, at = await self.get(["f:thread", *fields], where)
        if any(g is None for g in got) or (thread := _thread.decode(got[0])) is None:
            raise Missing
        return thread, got[1:], at


async def read(redis: Redis, doc_key: str, places_key: str, reader: Callable[[Snapshot], Awaitable[T]]) -> T:
    for _ in range(TRIES):
        try:
            return await reader(Snapshot(redis, doc_key, places_key))
        except _Moved:
            continue
    raise Missing


async def run(snap: Snapshot, run_id: str) -> RunView | None:
    """``/v1/runs/{id}``: the run, its messages and its checkpoint."""
    thread, _, (at, mine) = await snap.thread(where=[f"r:{run_id}", f"rm:{run_id}"])
    if at is None:
        return None
    [found] = await snap.items("runs", [int(at)])
    return await _run_view(snap, thread, found, places.positions(mine))


async def latest_run(snap: Snapshot) -> RunView | None:
    """The thread's newest run as ``run`` answers it (what a wait for "the latest run" reads); None: no run yet."""
    thread, (count,), _ = await snap.thread("n:runs")
    if not int(count):
        return None
    [found] = await snap.items("runs", [int(count) - 1])
    _, (mine,) = await snap.get([], [f"rm:{found.id}"])
    return await _run_view(snap, thread, found, places.positions(mine))


async def _run_view(snap: Snapshot, thread: Thread, found: Run, message_positions: list[int]) -> RunView | None:
    messages = await snap.items("messages", message_positions)
    checkpoints = await _checkpoints(snap, found.checkpoint_id)
    return run_view(ThreadView(thread=thread, runs=[found], messages=messages, checkpoints=checkpoints), found.id)


async def _checkpoints(snap: Snapshot, checkpoint_id: str | None, before_ordinal: int | None = None) -> list[Any]:
    """The checkpoint of this id, after the checkpoints of run ``before_ordinal`` captured before it."""
    if checkpoint_id is None:
        return []
    where = [f"c:{checkpoint_id}"] + ([f"co:{before_ordinal}"] if before_ordinal is not None else [])
    _, (at, *earlier) = await snap.get([], where)
    if at is None:
        return []
    at = int(at)
    candidates = [i for i in places.positions(earlier[0]) if i < at] if earlier else []
    return await snap.items("checkpoints", [*candidates, at])


async def change(snap: Snapshot, run_id: str) -> RunChange | None:
    """``/v1/runs/{id}/diff``: the run, its checkpoint and the one it started from."""
    thread, _, (at,) = await snap.thread(where=[f"r:{run_id}"])
    if at is None:
        return None
    [found] = await snap.items("runs", [int(at)])
    checkpoints = await _checkpoints(snap, found.checkpoint_id, found.ordinal - 1)
    return run_change(ThreadView(thread=thread, runs=[found], checkpoints=checkpoints), run_id)


async def queue(snap: Snapshot) -> QueueView:
    """``/v1/threads/{id}/queue``: the queued runs with their messages' text."""
    thread, (queued, active), _ = await snap.thread("f:queue", "f:active_run_id")
    ids = _ids.decode(queued)
    at: list[Any] = (await snap.get([], [f"r:{i}" for i in ids]))[1] if ids else []
    runs = await snap.items("runs", [int(a) for a in at if a is not None])
    message_ids = [r.message_id for r in runs]
    at = (await snap.get([], [f"m:{i}" for i in message_ids]))[1] if message_ids else []
    messages = await snap.items("messages", sorted({int(a) for a in at if a is not None}))
    active_run_id = _id.decode(active)
    return queue_view(ThreadView(thread=thread, queue=ids, active_run_id=active_run_id, runs=runs, messages=messages))


async def head(snap: Snapshot) -> ThreadHead:
    """What a lineage node shows of a thread: no run but their count, every handoff."""
    thread, (lineage, transfers, runs, handoffs), _ = await snap.thread(
        "f:lineage", "f:transfers", "n:runs", "n:handoffs"
    )
    return ThreadHead(
        thread=thread,
        lineage=_lineage.decode(lineage),
        runs=int(runs),
        transfers=_transfers.decode(transfers),
        handoffs=await snap.items("handoffs", list(range(int(handoffs)))),
    )


# What the delegation tools read of a parent and a child thread (``task_status`` polls them): small views holding
# only those fields, which the tools read as they would the whole documents.


async def active_run(snap: Snapshot) -> ThreadView:
    """A delegation's parent: its active run's id."""
    thread, (active,), _ = await snap.thread("f:active_run_id")
    return ThreadView(thread=thread, seq=snap.sequence, active_run_id=_id.decode(active))


async def first_run(snap: Snapshot) -> ThreadView:
    """A delegated task's child thread: its lineage and its first run (if any yet)."""
    thread, (lineage, count), _ = await snap.thread("f:lineage", "n:runs")
    runs = await snap.items("runs", [0]) if int(count) else []
    return ThreadView(thread=thread, seq=snap.sequence, lineage=_lineage.decode(lineage), runs=runs)


async def run_and_transfers(snap: Snapshot, run_id: str) -> ThreadView:
    """A delegation's parent: the delegating run (if the thread has it) and the thread's context transfers."""
    thread, (transfers,), (at,) = await snap.thread("f:transfers", where=[f"r:{run_id}"])
    runs = await snap.items("runs", [int(at)]) if at is not None else []
    return ThreadView(thread=thread, seq=snap.sequence, transfers=_transfers.decode(transfers), runs=runs)


async def recent(snap: Snapshot, runs: int) -> ThreadView:
    """``/v1/threads/{id}?runs=N`` (``views.thread.recent``): the small fields and the handoffs whole, the last
    ``runs`` runs with the messages, activity and checkpoints their places name."""
    got, _ = await snap.get([f"f:{name}" for name in _SMALL] + [f"n:{name}" for name in document.LISTS])
    if any(g is None for g in got):
        raise Missing
    small, counts = got[: len(_SMALL)], dict(zip(document.LISTS, map(int, cast("list[bytes]", got[len(_SMALL) :]))))
    view = _view.decode(b"{" + b",".join(b'"%s":%s' % (n.encode(), v) for n, v in zip(_SMALL, small)) + b"}")
    kept = await snap.items("runs", list(range(max(0, counts["runs"] - runs), counts["runs"])))
    ordinals = sorted(recent_ordinals(kept))
    where = [f"rm:{r.id}" for r in kept] + [f"ra:{r.id}" for r in kept] + [f"co:{o}" for o in ordinals]
    _, at = await snap.get([], where)
    k = len(kept)

    def union(found: list[Any]) -> list[int]:
        return sorted({i for raw in found for i in places.positions(raw)})

    return msgspec.structs.replace(
        view,
        runs=kept,
        messages=await snap.items("messages", union(at[:k])),
        activity=await snap.items("activity", union(at[k : 2 * k])),
        checkpoints=await snap.items("checkpoints", union(at[2 * k :])),
        handoffs=await snap.items("handoffs", list(range(counts["handoffs"]))),
    )
