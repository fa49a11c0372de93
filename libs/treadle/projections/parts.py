"""Reads of one thread that fetch from Redis only what they answer with, each costing the same on the
thousandth run as on the first (reading the whole document cost 200–560 ms at 2,000 runs: bench/long_thread.py).

Every read is one call to Redis, so it reflects one stream sequence however busy the projector is: a question
with an answer stored whole (``questions``: a run, the latest run, a run's diff, the queue, a lineage node,
what the delegation tools poll) is one HMGET of the thread's hash with its ``seq`` and ``v``; the thread's last
runs (``recent``) are one script that follows the thread's places (``places``) to their items. When the thread
is not (wholly) there in this view version, a read raises ``Missing`` and the caller folds the log. Every
answer is the one the view functions shape from the whole document, byte for byte
(tests/integration/test_projection_parts.py).
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
from ..views.thread import RunChange, RunCheckpoints, RunView, Thread, ThreadHead, ThreadView
from . import document, questions

T = TypeVar("T")


class Missing(Exception):
    """The thread is not (wholly) stored in this view version: fold its log instead."""


_thread = msgspec.json.Decoder(Thread | None)
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

# The thread's last ARGV[1] runs (``views.thread.recent``), read at once: the document's seq and v, the places'
# seq and v, then the fields ARGV[2..] (the small ones), then per list — runs, messages, activity, checkpoints,
# handoffs — its items in order. A run's id and ordinal are the first two fields of its JSON (``views.runs.Run``).
# The messages and activity are those the runs' places name; the checkpoints those of their ordinals and of the
# ordinal before the first (where its diff starts). false where a field or an item is missing.
_RECENT = """
local doc, places = KEYS[1], KEYS[2]
local function split(raw, into)
  if raw then for p in string.gmatch(raw, '%d+') do into[tonumber(p)] = true end end
end
local function items(name, set)
  local sorted = {}
  for p in pairs(set) do sorted[#sorted + 1] = p end
  table.sort(sorted)
  local out = {}
  for i, p in ipairs(sorted) do out[i] = redis.call('HGET', doc, 'l:' .. name .. ':' .. p) or false end
  return out
end
local head = redis.call('HMGET', doc, 'seq', 'v', unpack(ARGV, 2))
local at = redis.call('HMGET', places, 'seq', 'v')
local n = tonumber(redis.call('HGET', doc, 'n:runs') or '0')
local handoffs = tonumber(redis.call('HGET', doc, 'n:handoffs') or '0')
local runs, messages, activity, ordinals, all_handoffs = {}, {}, {}, {}, {}
for i = math.max(0, n - tonumber(ARGV[1])), n - 1 do
  local raw = redis.call('HGET', doc, 'l:runs:' .. i) or false
  runs[#runs + 1] = raw
  if raw then
    local id, ordinal = string.match(raw, '^{"id":"([^"]*)","ordinal":(%d+)')
    if not id then return redis.error_reply('a stored run does not start with its id and ordinal') end
    if #runs == 1 then ordinals[tonumber(ordinal) - 1] = true end
    ordinals[tonumber(ordinal)] = true
    split(redis.call('HGET', places, 'rm:' .. id), messages)
    split(redis.call('HGET', places, 'ra:' .. id), activity)
  end
end
if n == 0 then ordinals[0] = true end
local checkpoints = {}
for o in pairs(ordinals) do split(redis.call('HGET', places, 'co:' .. o), checkpoints) end
for i = 0, handoffs - 1 do all_handoffs[i] = true end
return {head, at, runs, items('messages', messages), items('activity', activity), items('checkpoints', checkpoints),
  items('handoffs', all_handoffs)}
"""


class Snapshot:
    """Reads of one thread's hash (``questions``, ``document``), each one call that reflects one sequence."""

    def __init__(self, redis: Redis, doc_key: str, places_key: str) -> None:
        self._redis = redis
        self._keys = doc_key, places_key
        self.seq: bytes | None = None

    @property
    def sequence(self) -> int:
        """The stream sequence the read reflects (known once it has read)."""
        assert self.seq is not None
        return int(self.seq)

    def _checked(self, got: list[bytes | None]) -> list[bytes | None]:
        seq, version = got[:2]
        if seq is None or version != document.VERSION or (self.seq is not None and seq != self.seq):
            raise Missing
        self.seq = seq
        return got[2:]

    async def get(self, fields: list[str]) -> list[bytes | None]:
        """Fields of the thread's hash (None where one is not there)."""
        return self._checked(cast("list[bytes | None]", await self._redis.hmget(self._keys[0], ["seq", "v", *fields])))

    async def thread(self, *fields: str, answers: bool = False) -> tuple[Thread, list]:
        """The thread with other fields of its hash: Missing when one is not there, unless ``answers`` (then
        None where an answer or item the thread may not have is not there)."""
        got = await self.get(["f:thread", *fields])
        if (
            got[0] is None
            or (not answers and any(g is None for g in got))
            or (thread := _thread.decode(got[0])) is None
        ):
            raise Missing
        return thread, got[1:]

    async def script(self, source: str, *args: int | str) -> list:
        """A read script over the thread's hash and places (its reply as Redis gives it)."""
        return cast("list", await self._redis.eval(source, 2, *self._keys, *args))


async def read(redis: Redis, doc_key: str, places_key: str, reader: Callable[[Snapshot], Awaitable[T]]) -> T:
    return await reader(Snapshot(redis, doc_key, places_key))


async def run(snap: Snapshot, run_id: str) -> RunView | None:
    """``/v1/runs/{id}``: the run, its messages and its checkpoint, stored whole (``questions``): one HMGET."""
    (raw,) = await snap.get([questions.RUN + run_id])
    return _run.decode(raw) if raw is not None else None


async def latest_run(snap: Snapshot) -> RunView | None:
    """The thread's newest run as ``run`` answers it (what a wait for "the latest run" reads); None: no run yet.
    One script reads the newest run's id and its answer together."""
    got = await snap.script(_LATEST_RUN)
    got += [None] * (3 - len(got))  # a nil at the end of a Lua array shortens the reply
    (raw,) = snap._checked(got)
    return _run.decode(raw) if raw is not None else None


async def change(snap: Snapshot, run_id: str) -> RunChange | None:
    """``/v1/runs/{id}/diff``: the run, its checkpoint and the one it started from (``questions``): one HMGET."""
    thread, (run_raw, compared) = await snap.thread(questions.RUN + run_id, questions.CHANGE + run_id, answers=True)
    if run_raw is None or compared is None:
        return None
    checkpoints = _run_checkpoints.decode(compared)
    return RunChange(thread, _run_of_view.decode(run_raw), checkpoints.new, checkpoints.old)


async def queue(snap: Snapshot) -> QueueView:
    """``/v1/threads/{id}/queue``: the queued runs with their messages' text, stored whole: one HMGET."""
    (raw,) = await snap.get([questions.QUEUE])
    if raw is None:
        raise Missing
    return _queue.decode(raw)


async def head(snap: Snapshot) -> ThreadHead:
    """What a lineage node shows of a thread: no run but their count, every handoff: one HMGET."""
    thread, (lineage, transfers, runs, handoffs) = await snap.thread(
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
    thread, (active,) = await snap.thread("f:active_run_id")
    return ThreadView(thread=thread, seq=snap.sequence, active_run_id=_id.decode(active))


async def first_run(snap: Snapshot) -> ThreadView:
    """A delegated task's child thread: its lineage and its first run (if any yet): one HMGET."""
    thread, (lineage, first) = await snap.thread("f:lineage", "l:runs:0", answers=True)
    if lineage is None:
        raise Missing
    runs = [_DECODERS["runs"].decode(first)] if first is not None else []
    return ThreadView(thread=thread, seq=snap.sequence, lineage=_lineage.decode(lineage), runs=runs)


async def run_and_transfers(snap: Snapshot, run_id: str) -> ThreadView:
    """A delegation's parent: the delegating run (if the thread has it) and the thread's context transfers."""
    thread, (transfers, run_raw) = await snap.thread("f:transfers", questions.RUN + run_id, answers=True)
    if transfers is None:
        raise Missing
    runs = [_run_of_view.decode(run_raw)] if run_raw is not None else []
    return ThreadView(thread=thread, seq=snap.sequence, transfers=_transfers.decode(transfers), runs=runs)


async def recent(snap: Snapshot, runs: int) -> ThreadView:
    """``/v1/threads/{id}?runs=N`` (``views.thread.recent``): the small fields and the handoffs whole, the last
    ``runs`` runs with the messages, activity and checkpoints their places name: one script (``_RECENT``)."""
    head, at, *lists = await snap.script(_RECENT, runs, *[f"f:{name}" for name in _SMALL])
    small = snap._checked(head)
    if at[:2] != head[:2] or any(g is None for g in small) or any(i is None for items in lists for i in items):
        raise Missing  # the places are not the document's, or a part is not there
    view = _view.decode(b"{" + b",".join(b'"%s":%s' % (n.encode(), v) for n, v in zip(_SMALL, small)) + b"}")
    kept, messages, activity, checkpoints, handoffs = (
        [_DECODERS[name].decode(i) for i in items]
        for name, items in zip(("runs", "messages", "activity", "checkpoints", "handoffs"), lists)
    )
    return msgspec.structs.replace(
        view, runs=kept, messages=messages, activity=activity, checkpoints=checkpoints, handoffs=handoffs
    )
