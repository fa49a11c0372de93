"""Redis read models. Each thread's document (its view's changed parts, see ``document``) and the answers
kept per question (``questions``) are written together with the stream sequence they reflect, the view
version, the thread's tenant-list entry and its run index in one Lua call, and only if it is newer: a
redelivered or replayed event can never move a projection backwards.
Readers get views (``treadle.views``), never the domain's state.

Keys share the ``{tenant}`` hash tag, so one tenant's keys live in one cluster slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

import msgspec
from hiredis import pack_command as _pack
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import NoScriptError, RedisError, ResponseError

from treadle.core import events as ev
from treadle.core.state import ThreadState, fold

from ..views import VIEW_VERSION, of_state
from ..views.thread import ThreadView
from . import document, parts, places, questions
from .changes import Changes

# ARGV: seq, thread id, created (ms), summary, whole (1: every part, 0: changed parts only), view version, base
# (the seq the changes are on top of), n, n run ids to index, m, m elements of place field/value pairs
# (``places`` and ``questions``: they share the places' hash; an empty value deletes its field), then
# field/value pairs of the document. Changed parts on top of anything but the document at
# their base (Redis was flushed, another writer wrote since, or the places are missing or out of step with the
# document: written before places existed) would make a document with holes or stale parts: that write is
# refused with -1 and the caller sends the whole document. A document of another view version counts as
# nothing: a whole write replaces it. A whole write replaces the places too; document and places always carry
# the same seq.
_WRITE = """
local cur = redis.call('HGET', KEYS[1], 'seq')
if cur and redis.call('HGET', KEYS[1], 'v') ~= ARGV[6] then
  if ARGV[5] == '0' then return -1 end
  redis.call('DEL', KEYS[1])
  cur = false
end
if cur and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end
if ARGV[5] == '0' then
  if not cur or tonumber(cur) ~= tonumber(ARGV[7]) or redis.call('HGET', KEYS[5], 'seq') ~= cur then return -1 end
else
  redis.call('DEL', KEYS[5])
end
local n = tonumber(ARGV[8])
for i = 9, 8 + n do redis.call('HSET', KEYS[4], ARGV[i], ARGV[2]) end
local function hset(key, from, to)
  local i = from
  while i <= to do
    local j = math.min(i + 999, to)
    redis.call('HSET', key, unpack(ARGV, i, j))
    i = j + 1
  end
end
local m = tonumber(ARGV[9 + n])
local gone = {}
for i = 10 + n, 9 + n + m, 2 do
  if ARGV[i + 1] == '' then gone[#gone + 1] = ARGV[i] end
end
hset(KEYS[5], 10 + n, 9 + n + m)
if #gone > 0 then redis.call('HDEL', KEYS[5], unpack(gone)) end
hset(KEYS[1], 10 + n + m, #ARGV)
redis.call('HSET', KEYS[1], 'seq', ARGV[1])
redis.call('HSET', KEYS[5], 'seq', ARGV[1], 'v', ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return 1
"""

# A deleted thread (its tombstone, ARGV[1] its seq, ARGV[2] its id, ARGV[3] the view version): its document and
# places go, leaving a marker of the seq alone (so a stale or concurrent write of an older fold is refused by
# _WRITE as not newer, and readers find no document), and so do its list entry, summary and every index entry
# naming it (a scan: deletions are rare, and a tombstone alone no longer knows its runs).
_ERASE = """
local cur = redis.call('HGET', KEYS[1], 'seq')
if cur and redis.call('HGET', KEYS[1], 'deleted') and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[5])
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'v', ARGV[3], 'deleted', '1')
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local cursor = '0'
repeat
  local r = redis.call('HSCAN', KEYS[4], cursor, 'COUNT', 1000)
  cursor = r[1]
  for i = 1, #r[2], 2 do
    if r[2][i + 1] == ARGV[2] then redis.call('HDEL', KEYS[4], r[2][i]) end
  end
until cursor == '0'
return 1
"""

# A page of the tenant's threads, newest first, read at once: after the thread ARGV[2] (found by rank, so
# threads created meanwhile shift nothing; by its score ARGV[3] if it were gone), ARGV[1] of them, each as
# id, score, summary ('' when its summary is missing).
_THREADS_PAGE = """
local n = tonumber(ARGV[1])
local ids
if ARGV[2] == '' then
  ids = redis.call('ZREVRANGE', KEYS[1], 0, n - 1, 'WITHSCORES')
else
  local r = redis.call('ZREVRANK', KEYS[1], ARGV[2])
  if r then
    ids = redis.call('ZREVRANGE', KEYS[1], r + 1, r + n, 'WITHSCORES')
  else
    ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], '(' .. ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', 0, n)
  end
end
local out = {}
for i = 1, #ids, 2 do
  out[#out + 1] = ids[i]
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], ids[i]) or ''
end
return out
"""


T = TypeVar("T")


class Slice(msgspec.Struct, frozen=True):
    """Stored items of one of a thread's lists, read in one call with the list's length and the sequence."""

    seq: int
    total: int
    items: list[bytes]


# Versioned: projections of another view version are rebuilt from the log as a whole when a projector starts.
EPOCH_KEY = f"treadle:projections:epoch:v{VIEW_VERSION}"
_encoder = msgspec.json.Encoder()
_view_decoder = msgspec.json.Decoder(ThreadView)


async def _exchange(conn: Connection, wire: bytes, count: int) -> list[Any]:
    """Send ``count`` packed commands and read every reply before raising the first error (NoScriptError: the
    scripts were flushed), so the connection goes back to the pool in step; cut short, it is dropped instead."""
    await conn.send_packed_command(wire, check_health=False)
    replies: list[Any] = []
    try:
        for _ in range(count):
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


def _keys(tenant: str, thread: str) -> list[str]:
    return [
        f"treadle:{{{tenant}}}:thread:{thread}",
        f"treadle:{{{tenant}}}:threads",
        f"treadle:{{{tenant}}}:summaries",
        f"treadle:{{{tenant}}}:runs",
        f"treadle:{{{tenant}}}:places:{thread}",
    ]


keys = _keys  # document, tenant list, summaries, index, places: what `treadle check` reads back


summary = of_state.summary  # the thread's list item, stored beside the document


indexed = ev.indexed  # the ids an event makes addressable alone: its trait ``indexes``


def all_indexed(state: ThreadState) -> list[str]:
    ids = [r.id for r in state.runs] + [n.id for r in state.runs for n in r.nodes]
    return ids + [q.id for q in state.requests] + [p.id for p in state.plans] + [h.id for h in state.handoffs]


def encode_state(state: ThreadState) -> bytes:
    """The document of a folded state (the JSON of its view), as the store holds it."""
    return document.encode(state)


Item = tuple[ThreadState, list[str], Changes | None]  # state, new ids to index, changes (None: all)


class ProjectionStore:
    """Writes that overlap in time share one pipeline: each partition of a projector writes its own batches,
    and while one pipeline is at Redis the others queue up for the next (with 8 partitions, one pipeline per
    partition batch made many small ones: bench/run.py scenario B)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._script = redis.register_script(_WRITE)  # only for its sha: sent with EVALSHA below
        self._threads_page = redis.register_script(_THREADS_PAGE)
        self._erase = redis.register_script(_ERASE)
        self._queued: list[tuple[list[Item], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[Any] | None = None

    async def write(self, items: Iterable[Item]) -> None:
        """Write each item; stale writes are dropped by the script, and changes refused for lack of a base are
        resent whole. Returns once Redis has them, together with whatever other writes were queued."""
        items = list(items)
        for state, _, _ in items:
            if state.thread is not None and state.thread.deleted:
                await self.erase(state.thread.tenant, state.thread.id, state.seq)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append(
            ([item for item in items if item[0].thread is not None and not item[0].thread.deleted], done)
        )
        if self._writer is None or self._writer.done():
            # A task of its own, not the caller's: a writer cancelled (its partition stopped) must not strand
            # the writes of the others queued behind it.
            self._writer = asyncio.create_task(self._write_queued(), name="projection-writes")
        await done

    async def _write_queued(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                await self._write_now([item for items, _ in batch for item in items])
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)

    async def _write_now(self, items: list[Item]) -> None:
        results = await self._pipeline(items)
        again: list[Item] = [(state, all_indexed(state), None) for (state, _, _), r in zip(items, results) if r == -1]
        if again:
            await self._pipeline(again)

    async def _pipeline(self, items: list[Item]) -> list[Any]:
        if not items:
            return []
        try:
            return await self._send(items)
        except NoScriptError:  # Redis restarted or flushed its scripts: nothing was written
            await self._redis.script_load(_WRITE)
            return await self._send(items)

    async def _send(self, items: list[Item]) -> list[Any]:
        """One EVALSHA per item, packed here and sent as one write on one pooled connection: redis-py's pipeline
        packs argument by argument in Python (a changed part is two arguments, ~45 per item), which cost the
        projector more than folding (bench/run.py scenario B). EVALSHA on its own: a registered script would
        make every write ask SCRIPT EXISTS first, one more round trip."""
        wire = b"".join([self._command(item) for item in items])
        pool = self._redis.connection_pool
        conn = cast("Connection", await pool.get_connection())  # type: ignore[no-untyped-call]
        try:
            # a connection that died with a restarted Redis is retried once on a fresh one (connect.redis_client),
            # as a pipeline would: a write sent again is refused as not newer where it had landed
            return cast(
                "list[Any]",
                await conn.retry.call_with_retry(
                    lambda: _exchange(conn, wire, len(items)), lambda _: conn.disconnect(nowait=True)
                ),
            )
        finally:
            await pool.release(conn)

    def _command(self, item: Item) -> bytes:
        state, run_ids, changes = item
        t = state.thread
        assert t is not None
        created = int(t.created_at.timestamp() * 1000)
        whole = changes is None or changes.everything
        # the places and the answers share their hash (its seq and v): what a read by id follows
        where = [*places.fields(state, changes), *questions.fields(state, changes)]
        return cast(
            "bytes",
            _pack(
                (  # type: ignore[arg-type]  # the stub types a tuple of one
                    "EVALSHA",
                    self._script.sha,
                    5,
                    *_keys(t.tenant, t.id),
                    state.seq,
                    t.id,
                    created,
                    _encoder.encode(summary(state)),
                    int(whole),
                    VIEW_VERSION,
                    changes.base if changes is not None else 0,
                    len(run_ids),
                    *run_ids,
                    len(where),
                    *where,
                    *document.fields(state, changes),
                )
            ),
        )

    async def erase(self, tenant: str, thread: str, seq: int) -> None:
        """Forget a deleted thread's projection (``_ERASE``); ``seq``: its tombstone's."""
        await self._erase(keys=_keys(tenant, thread), args=[seq, thread, VIEW_VERSION])

    # The client (connect.redis_client) does not decode responses: Redis replies are bytes, which its types cannot tell.

    async def doc(self, tenant: str, thread: str) -> bytes | None:
        return document.assemble(cast("dict[bytes, bytes]", await self._redis.hgetall(_keys(tenant, thread)[0])))

    async def doc_at(self, tenant: str, thread: str) -> tuple[int, bytes] | None:
        """The document with the sequence it reflects, from one read; None as ``doc``."""
        stored = cast("dict[bytes, bytes]", await self._redis.hgetall(_keys(tenant, thread)[0]))
        doc = document.assemble(stored)
        return None if doc is None else (int(stored[b"seq"]), doc)

    async def read(self, tenant: str, thread: str, reader: Callable[[parts.Snapshot], Awaitable[T]]) -> T:
        """``reader`` over one snapshot of the thread's stored parts (``parts``), fetching only what it reads;
        ``parts.Missing`` when they are not (wholly) there in this view version."""
        k = _keys(tenant, thread)
        return await parts.read(self._redis, k[0], k[4], reader)

    async def seq(self, tenant: str, thread: str) -> int:
        """The stream sequence the thread's projection reflects (0: not projected)."""
        raw = await self._redis.hget(_keys(tenant, thread)[0], "seq")
        return int(raw) if raw else 0

    async def view(self, tenant: str, thread: str) -> ThreadView | None:
        raw = await self.doc(tenant, thread)
        return _view_decoder.decode(raw) if raw else None

    async def refold(self, events: list[ev.Envelope]) -> bytes | None:
        """Fold a thread's events (its whole log), write its document whole and return it; None when the
        events hold no thread. For a reader that found the document missing or of another view version."""
        state = fold(events)
        if state.thread is None or state.thread.deleted:
            if state.thread is not None:
                await self.write([(state, [], None)])  # erased, in case the projector has not yet
            return None
        await self.write([(state, all_indexed(state), None)])
        return encode_state(state)

    async def thread_of(self, tenant: str, entity_id: str) -> str | None:
        """The thread a run, node, request or plan of this tenant belongs to."""
        raw = cast("bytes | None", await self._redis.hget(_keys(tenant, "")[3], entity_id))
        return raw.decode() if raw else None

    async def threads(
        self, tenant: str, limit: int, after: tuple[int, str] | None = None
    ) -> list[tuple[int, str, bytes]]:
        """Up to ``limit`` of the tenant's threads, newest first, after the thread ``after`` (created at, in
        ms; id): each as (created at, id, its summary; b"" when the summary is missing)."""
        keys = _keys(tenant, "")
        score, after_id = after or (0, "")
        flat = cast("list[bytes]", await self._threads_page(keys=keys[1:3], args=[limit, after_id, score]))
        return [(int(float(flat[i + 1])), flat[i].decode(), flat[i + 2]) for i in range(0, len(flat), 3)]

    async def slice(self, tenant: str, thread: str, name: str, start: int, count: int) -> Slice | None:
        """Items ``start``..``start+count`` of the thread's list ``name`` (one of ``document.LISTS``) as stored,
        without reading the rest of the document; None when the thread is not (wholly) projected in this view
        version (the caller folds it from the log)."""
        names = [b"seq", b"v", f"n:{name}".encode()] + [f"l:{name}:{i}".encode() for i in range(start, start + count)]
        got = cast("list[bytes | None]", await self._redis.hmget(_keys(tenant, thread)[0], names))
        seq, version, total = got[:3]
        if seq is None or version != document.VERSION or total is None:
            return None
        items = got[3 : 3 + max(0, min(count, int(total) - start))]
        if any(item is None for item in items):
            return None
        return Slice(int(seq), int(total), cast("list[bytes]", items))

    async def part(self, tenant: str, thread: str, name: str) -> tuple[int, bytes] | None:
        """The sequence and the stored JSON of the thread document's top-level field ``name``; None as ``slice``."""
        seq, version, value = cast(
            "list[bytes | None]", await self._redis.hmget(_keys(tenant, thread)[0], [b"seq", b"v", f"f:{name}"])
        )
        if seq is None or version != document.VERSION or value is None:
            return None
        return int(seq), value

    async def reachable(self, timeout: float) -> bool:
        """Redis answers a PING within ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                return bool(await self._redis.ping())
        except (RedisError, TimeoutError, OSError):
            return False

    async def epoch(self) -> bytes | None:
        return cast("bytes | None", await self._redis.get(EPOCH_KEY))

    async def set_epoch(self, value: str) -> None:
        await self._redis.set(EPOCH_KEY, value)
