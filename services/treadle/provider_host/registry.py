"""What provider hosts publish about themselves in KV: ``treadle-hosts`` (one heartbeat record per host)
and ``treadle-sessions`` (one record per live session, keyed ``<host>.<session>``).

A heartbeat is a fresh revision of the host's record. Readers judge liveness by whether the revision moves
on *their own* clock (``watcher.py``), so clock skew between machines cannot kill a healthy host; the
bucket's TTL only sweeps records of hosts that are long gone.
"""

from __future__ import annotations

import logging
from datetime import datetime

import msgspec
from nats.js.errors import NotFoundError, NoKeysError
from nats.js.kv import KeyValue

log = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode


class HostRecord(msgspec.Struct, kw_only=True):
    """``treadle-hosts`` entry ``<host>``."""

    host_id: str
    boot_id: str
    volume: str  # the workspace volume the host mounts: it serves only threads on that volume
    capacity: int  # live sessions it accepts
    live: int  # live sessions it holds now
    heartbeat_seconds: float
    at: datetime  # informative only (the beating host's wall clock)
    tenants: dict[str, int] = {}  # live sessions per tenant (fair share across hosts, domain/capacity.py)
    busy: dict[str, int] = {}  # sessions with a turn playing, per tenant
    idle: int = 0  # sessions with no turn playing (another host may release one to make room)


class SessionRecord(msgspec.Struct, kw_only=True):
    """``treadle-sessions`` entry ``<host>.<session>``: enough to report the session after a crash."""

    tenant: str
    thread: str
    provider_thread_id: str
    boot_id: str


class Registry:
    def __init__(self, hosts: KeyValue, sessions: KeyValue) -> None:
        self.hosts = hosts
        self.sessions = sessions

    async def beat(self, record: HostRecord) -> None:
        await self.hosts.put(record.host_id, _encode(record))

    async def host_revisions(self) -> dict[str, int]:
        """Every registered host and the revision of its latest heartbeat."""
        revisions: dict[str, int] = {}
        for key in await _keys(self.hosts):
            try:
                entry = await self.hosts.get(key)
            except NotFoundError:  # expired or deleted between the listing and the read
                continue
            revisions[key] = entry.revision or 0
        return revisions

    async def host(self, host_id: str) -> HostRecord | None:
        try:
            entry = await self.hosts.get(host_id)
        except NotFoundError:
            return None
        return msgspec.json.decode(entry.value, type=HostRecord) if entry.value else None

    async def peers(self, host_id: str) -> list[HostRecord]:
        """The latest heartbeat of every other registered host."""
        found = []
        for key in await _keys(self.hosts):
            if key != host_id and (record := await self.host(key)) is not None:
                found.append(record)
        return found

    async def record_session(self, host_id: str, session_id: str, record: SessionRecord) -> None:
        await self.sessions.put(f"{host_id}.{session_id}", _encode(record))

    async def forget_session(self, host_id: str, session_id: str) -> None:
        await self.sessions.delete(f"{host_id}.{session_id}")

    async def sessions_by_host(self) -> dict[str, dict[str, SessionRecord]]:
        """host id -> session id -> record, for every recorded live session. One pass over the bucket's
        latest values: a read per key made a restarted host's recovery grow with its idle sessions."""
        found: dict[str, dict[str, SessionRecord]] = {}
        watcher = await self.sessions.watchall(ignore_deletes=True)
        try:
            async for entry in watcher:
                if entry is None:  # the current values are all delivered
                    break
                host_id, _, session_id = entry.key.partition(".")  # nats-py ignores key filters: group here
                if entry.value:
                    found.setdefault(host_id, {})[session_id] = msgspec.json.decode(entry.value, type=SessionRecord)
        finally:
            await watcher.stop()
        return found


async def _keys(kv: KeyValue) -> list[str]:
    try:
        return await kv.keys()
    except NoKeysError:
        return []
