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
from typing import Any, NamedTuple, TypeVar, cast

import msgspec
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from ..views.checkpoints import Checkpoint
from ..views.lineage import ContextHandoff, ContextTransfer, Lineage
from ..views.requests import Activity
from ..views.runs import Message, QueueView, Run
from ..views.thread import RunChange, RunView, Thread, ThreadHead, ThreadView, run_change, run_view
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
_queue = msgspec.json.Decoder(QueueView)

# A run and what its answer names (``questions``, in the places' hash), read at once: the run of id ARGV[1]
# (the newest run when ARGV[1] is empty), with the thread's seq, v, f:thread and the fields ARGV[2..], the
# places' seq and v, then the run's item, its messages' items, its checkpoint's and the one its diff starts
# from (false: not there, or no such run).
_RUN = f"""
local doc, places = KEYS[1], KEYS[2]
local id = ARGV[1]
if id == '' then id = redis.call('HGET', places, '{questions.LATEST_RUN}') or '' end
local head = redis.call('HMGET', doc, 'seq', 'v', 'f:thread', unpack(ARGV, 2))
local where = redis.call('HMGET', places, 'seq', 'v')
local at = id ~= '' and redis.call('HGET', places, '{questions.RUN}' .. id)
if not at then return {{head, where, false, {{}}, false, false}} end
local run, messages, new, old = string.match(at, '^(%d+);([%d,]*);(%d*);(%d*)$')
local function item(name, p)
  if not p or p == '' then return false end
  return redis.call('HGET', doc, 'l:' .. name .. ':' .. p) or false
end
local found = {{}}
for p in string.gmatch(messages or '', '%d+') do found[#found + 1] = item('messages', p) end
return {{head, where, item('runs', run), found, item('checkpoints', new), item('checkpoints', old)}}
"""

# A lineage node's head (``views.thread.ThreadHead``): the thread's seq, v, f:thread, f:lineage, f:transfers,
# n:runs, then every handoff's item.
_HEAD = """
local doc = KEYS[1]
local head = redis.call('HMGET', doc, 'seq', 'v', 'f:thread', 'f:lineage', 'f:transfers', 'n:runs')
local handoffs = {}
for i = 0, tonumber(redis.call('HGET', doc, 'n:handoffs') or '0') - 1 do
  handoffs[#handoffs + 1] = redis.call('HGET', doc, 'l:handoffs:' .. i) or false
end
return {head, handoffs}
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


_SCRIPTS: dict[str, AsyncScript] = {}  # by source: the script objects know their SHA


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

    async def get(self, fields: list[str], answers: bool = False) -> list[bytes | None]:
        """Fields of the thread's hash, or with ``answers`` of its places' hash (None where one is not there)."""
        key = self._keys[1] if answers else self._keys[0]
        return self._checked(cast("list[bytes | None]", await self._redis.hmget(key, ["seq", "v", *fields])))

    async def thread(self, *fields: str, answers: bool = False) -> tuple[Thread, list[bytes | None]]:
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

    async def script(self, source: str, *args: int | str) -> list[Any]:
        """A read script over the thread's hash and places (its reply as Redis gives it), sent by its SHA (the
        client loads it again when Redis has lost it)."""
        script = _SCRIPTS.get(source)
        if script is None:
            script = _SCRIPTS[source] = AsyncScript(self._redis, source)
        return cast("list[Any]", await script(keys=list(self._keys), args=list(args), client=self._redis))


async def read(redis: Redis, doc_key: str, places_key: str, reader: Callable[[Snapshot], Awaitable[T]]) -> T:
    return await reader(Snapshot(redis, doc_key, places_key))


class _Found(NamedTuple):
    thread: Thread
    fields: list[bytes | None]  # the fields asked along, as stored
    run: Run | None
    messages: list[Message]
    checkpoints: list[Checkpoint]  # the one its diff starts from (if any), then its own (if any)


async def _run(snap: Snapshot, run_id: str, *fields: str) -> _Found:
    """A run (the newest with ``run_id`` empty) with what its answer names, and ``fields``, in one script."""
    head, where, run, messages, new, old = await snap.script(_RUN, run_id, *fields)
    head += [None] * (3 + len(fields) - len(head))  # a nil at the end of a Lua array shortens the reply
    if where[:2] != head[:2]:
        raise Missing  # the places are not the document's
    thread_raw, *got = snap._checked(head)
    if thread_raw is None or (thread := _thread.decode(thread_raw)) is None:
        raise Missing
    if run is None:
        return _Found(thread, got, None, [], [])
    if any(m is None for m in messages):
        raise Missing  # a part is not there
    checkpoints = [_DECODERS["checkpoints"].decode(c) for c in (old, new) if c is not None]
    return _Found(
        thread, got, _DECODERS["runs"].decode(run), [_DECODERS["messages"].decode(m) for m in messages], checkpoints
    )


def _run_view(found: _Found) -> RunView | None:
    if found.run is None:
        return None
    view = ThreadView(thread=found.thread, runs=[found.run], messages=found.messages, checkpoints=found.checkpoints)
    return run_view(view, found.run.id)


async def run(snap: Snapshot, run_id: str) -> RunView | None:
    """``/v1/runs/{id}``: the run, its messages and its checkpoint, where its answer (``questions``) says."""
    return _run_view(await _run(snap, run_id)) if run_id else None


async def latest_run(snap: Snapshot) -> RunView | None:
    """The thread's newest run as ``run`` answers it (what a wait for "the latest run" reads); None: no run yet."""
    return _run_view(await _run(snap, ""))


async def change(snap: Snapshot, run_id: str) -> RunChange | None:
    """``/v1/runs/{id}/diff``: the run, its checkpoint and the one it started from."""
    if not run_id:
        return None
    found = await _run(snap, run_id)
    if found.run is None:
        return None
    return run_change(ThreadView(thread=found.thread, runs=[found.run], checkpoints=found.checkpoints), run_id)


async def queue(snap: Snapshot) -> QueueView:
    """``/v1/threads/{id}/queue``: the queued runs with their messages' text, stored whole: one HMGET."""
    (raw,) = await snap.get([questions.QUEUE], answers=True)
    if raw is None:
        raise Missing
    return _queue.decode(raw)


async def head(snap: Snapshot) -> ThreadHead:
    """What a lineage node shows of a thread: no run but their count, every handoff: one script."""
    got, handoffs = await snap.script(_HEAD)
    thread, lineage, transfers, runs = snap._checked(got + [None] * (6 - len(got)))
    if thread is None or lineage is None or transfers is None or runs is None or None in handoffs:
        raise Missing
    if (t := _thread.decode(thread)) is None:
        raise Missing
    return ThreadHead(
        thread=t,
        lineage=_lineage.decode(lineage),
        runs=int(runs),
        transfers=_transfers.decode(transfers),
        handoffs=[_DECODERS["handoffs"].decode(h) for h in handoffs],
    )


# What the delegation tools read of a parent and a child thread (``task_status`` polls them): small views holding
# only those fields, which the tools read as they would the whole documents.


async def active_run(snap: Snapshot) -> ThreadView:
    """A delegation's parent: its active run's id."""
    thread, (active,) = await snap.thread("f:active_run_id")  # thread() raises Missing on a None
    return ThreadView(thread=thread, seq=snap.sequence, active_run_id=_id.decode(cast("bytes", active)))


async def first_run(snap: Snapshot) -> ThreadView:
    """A delegated task's child thread: its lineage and its first run (if any yet): one HMGET."""
    thread, (lineage, first) = await snap.thread("f:lineage", "l:runs:0", answers=True)
    if lineage is None:
        raise Missing
    runs = [_DECODERS["runs"].decode(first)] if first is not None else []
    return ThreadView(thread=thread, seq=snap.sequence, lineage=_lineage.decode(lineage), runs=runs)


async def run_and_transfers(snap: Snapshot, run_id: str) -> ThreadView:
    """A delegation's parent: the delegating run (if the thread has it) and the thread's context transfers."""
    found = await _run(snap, run_id or "none", "f:transfers")
    (transfers,) = found.fields
    if transfers is None:
        raise Missing
    runs = [found.run] if found.run is not None else []
    return ThreadView(thread=found.thread, seq=snap.sequence, transfers=_transfers.decode(transfers), runs=runs)


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
