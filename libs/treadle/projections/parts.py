"""Reads of one thread that fetch from Redis only what they answer with, each costing the same on the
thousandth run as on the first (reading the whole document cost 200–560 ms at 2,000 runs: bench/long_thread.py).

A question with an answer stored whole (``questions``: a run, the latest run, a run's diff, the queue, a
lineage node, what the delegation tools poll) is one HMGET of the thread's hash with its ``seq`` and ``v``.
The thread's last runs (``recent``) go by the thread's places (``places``) in a few round trips and are one
snapshot: when the projector wrote in between (another seq), the read starts again. When the thread is not
(wholly) there in this view version, a read raises ``Missing`` and the caller folds the log. Every answer is
the one the view functions shape from the whole document, byte for byte (tests/integration/test_projection_parts.py).
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
    RunCheckpoints,
    RunView,
    Thread,
    ThreadHead,
    ThreadView,
    recent_ordinals,
)
from . import document, places, questions

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
_run = msgspec.json.Decoder(RunView)
_run_of_view = msgspec.json.Decoder(Run)  # the run of a stored RunView (its other fields are left out)
_run_checkpoints = msgspec.json.Decoder(RunCheckpoints)
_queue = msgspec.json.Decoder(QueueView)
_handoffs = msgspec.json.Decoder(list[ContextHandoff])

# The thread's seq and view version, and the answer of its newest run (``questions``; false: no run yet).
_LATEST_RUN = f"""
local got = redis.call('HMGET', KEYS[1], 'seq', 'v', '{questions.LATEST_RUN}')
local answer = false
if got[3] then answer = redis.call('HGET', KEYS[1], '{questions.RUN}' .. got[3]) end
return {{got[1], got[2], answer}}
"""


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

    async def get(self, fields: list[str], where: list[str] | None = None) -> tuple[list, list]:
        """Document fields and places, in one round trip."""
        head = ["seq", "v"]
        if not where:
            return self._checked(cast("list[bytes | None]", await self._redis.hmget(self._keys[0], head + fields))), []
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self._keys[0], head + fields)
            pipe.hmget(self._keys[1], head + where)
            doc, at = await pipe.execute()
        return self._checked(doc), self._checked(at)

    async def latest_run(self) -> RunView | None:
        """The answer of the thread's newest run, read in one script (``LATEST_RUN``)."""
        got = cast("list[bytes | None]", await self._redis.eval(_LATEST_RUN, 1, self._keys[0]))
        got += [None] * (3 - len(got))  # a nil at the end of a Lua array shortens the reply
        (raw,) = self._checked(got)
        return _run.decode(raw) if raw is not None else None

    async def items(self, name: str, positions: list[int]) -> list:
        """Items of the list ``name`` at ``positions``, decoded to their views."""
        if not positions:
            return []
        raw, _ = await self.get([f"l:{name}:{i}" for i in positions])
        if any(r is None for r in raw):
            raise Missing
        return [_DECODERS[name].decode(r) for r in raw]

    async def thread(
        self, *fields: str, where: list[str] | None = None, answers: bool = False
    ) -> tuple[Thread, list, list]:
        """The thread with other document fields (Missing when one is not there; with ``answers``, None when an
        answer or item the thread may not have is not there) and places (None: no such)."""
        got, at = await self.get(["f:thread", *fields], where)
        if (
            got[0] is None
            or (not answers and any(g is None for g in got))
            or (thread := _thread.decode(got[0])) is None
        ):
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
    """``/v1/runs/{id}``: the run, its messages and its checkpoint, stored whole (``questions``): one HMGET."""
    (raw,), _ = await snap.get([questions.RUN + run_id])
    return _run.decode(raw) if raw is not None else None


async def latest_run(snap: Snapshot) -> RunView | None:
    """The thread's newest run as ``run`` answers it (what a wait for "the latest run" reads); None: no run yet.
    One script reads the newest run's id and its answer together, so the two never reflect two sequences."""
    return await snap.latest_run()


async def change(snap: Snapshot, run_id: str) -> RunChange | None:
    """``/v1/runs/{id}/diff``: the run, its checkpoint and the one it started from (``questions``): one HMGET."""
    thread, (run_raw, compared), _ = await snap.thread(questions.RUN + run_id, questions.CHANGE + run_id, answers=True)
    if run_raw is None or compared is None:
        return None
    checkpoints = _run_checkpoints.decode(compared)
    return RunChange(thread, _run_of_view.decode(run_raw), checkpoints.new, checkpoints.old)


async def queue(snap: Snapshot) -> QueueView:
    """``/v1/threads/{id}/queue``: the queued runs with their messages' text, stored whole: one HMGET."""
    (raw,), _ = await snap.get([questions.QUEUE])
    if raw is None:
        raise Missing
    return _queue.decode(raw)


async def head(snap: Snapshot) -> ThreadHead:
    """What a lineage node shows of a thread: no run but their count, every handoff: one HMGET."""
    thread, (lineage, transfers, runs, handoffs), _ = await snap.thread(
        "f:lineage", "f:transfers", "n:runs", questions.HANDOFFS
    )
    return ThreadHead(
        thread=thread,
        lineage=_lineage.decode(lineage),
        runs=int(runs),
        transfers=_transfers.decode(transfers),
        handoffs=_handoffs.decode(handoffs),
    )


# What the delegation tools read of a parent and a child thread (``task_status`` polls them): small views holding
# only those fields, which the tools read as they would the whole documents.


async def active_run(snap: Snapshot) -> ThreadView:
    """A delegation's parent: its active run's id."""
    thread, (active,), _ = await snap.thread("f:active_run_id")
    return ThreadView(thread=thread, seq=snap.sequence, active_run_id=_id.decode(active))


async def first_run(snap: Snapshot) -> ThreadView:
    """A delegated task's child thread: its lineage and its first run (if any yet): one HMGET."""
    thread, (lineage, first), _ = await snap.thread("f:lineage", "l:runs:0", answers=True)
    runs = [_DECODERS["runs"].decode(first)] if first is not None else []
    return ThreadView(thread=thread, seq=snap.sequence, lineage=_lineage.decode(lineage), runs=runs)


async def run_and_transfers(snap: Snapshot, run_id: str) -> ThreadView:
    """A delegation's parent: the delegating run (if the thread has it) and the thread's context transfers."""
    thread, (transfers, run_raw), _ = await snap.thread("f:transfers", questions.RUN + run_id, answers=True)
    runs = [_run_of_view.decode(run_raw)] if run_raw is not None else []
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

    def union(found: list) -> list[int]:
        return sorted({i for raw in found for i in places.positions(raw)})

    return msgspec.structs.replace(
        view,
        runs=kept,
        messages=await snap.items("messages", union(at[:k])),
        activity=await snap.items("activity", union(at[k : 2 * k])),
        checkpoints=await snap.items("checkpoints", union(at[2 * k :])),
        handoffs=await snap.items("handoffs", list(range(counts["handoffs"]))),
    )
