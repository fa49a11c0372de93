"""What provider hosts publish about themselves in KV: ``treadle-hosts`` (one heartbeat record per host)
and ``treadle-sessions`` (one record per live session, keyed ``<host>.<session>``).

A heartbeat is a fresh revision of the host's record. Readers judge liveness by whether the revision moves
on *their own* clock (``watcher.py``), so clock skew between machines cannot kill a healthy host; the
bucket's TTL only sweeps records of hosts that are long gone.

A host reads both buckets every heartbeat period (its peers' loads, its watcher): once ``follow`` is called the
reads come from in-memory views kept by one watch per bucket (``runtime.kv_view``), each a complete read of its
bucket whenever it answers, like the read of the bucket it replaces.
"""

from __future__ import annotations

import logging
from datetime import datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from treadle.eventlog.kv_latest import Latest, latest
from treadle.runtime.kv_view import KvView

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
    tenants: dict[str, int] = {}  # live sessions per tenant (fair share across hosts, core/capacity.py)
    busy: dict[str, int] = {}  # sessions with a turn playing, per tenant
    idle: int = 0  # sessions with no turn playing (another host may release one to make room)
    # The MCP tools its sessions' credentials may call now: the gateway checks each call against the minting
    # host's current record (ops/session_credentials.py), so a narrower setting applies to live credentials too
    mcp_tools: tuple[str, ...] = ()


class SessionRecord(msgspec.Struct, kw_only=True):
    """``treadle-sessions`` entry ``<host>.<session>``: enough to report the session after a crash."""

    tenant: str
    thread: str
    provider_thread_id: str
    boot_id: str


class Registry:
    HOSTS, SESSIONS = "treadle-hosts", "treadle-sessions"

    def __init__(self, js: JetStreamContext, hosts: KeyValue, sessions: KeyValue) -> None:
        self._js = js
        self.hosts = hosts
        self.sessions = sessions
        self._views: dict[str, KvView] = {}

    @classmethod
    async def open(cls, js: JetStreamContext) -> Registry:
        return cls(js, await js.key_value(cls.HOSTS), await js.key_value(cls.SESSIONS))

    async def follow(self) -> None:
        """Read the buckets from in-memory views from now on."""
        for bucket in (self.HOSTS, self.SESSIONS):
            if bucket not in self._views:
                self._views[bucket] = view = KvView(self._js, bucket)
                await view.start()

    async def close(self) -> None:
        for view in self._views.values():
            await view.stop()
        self._views = {}

    async def _latest(self, bucket: str, confirmed: bool = True) -> dict[str, Latest]:
        """``confirmed``: as of a moment during the call (one request to the stream), as a judge needs."""
        view = self._views.get(bucket)
        return await view.read(confirmed) if view is not None else await latest(self._js, bucket)

    async def beat(self, record: HostRecord) -> None:
        await self.hosts.put(record.host_id, _encode(record))

    async def host_revisions(self) -> dict[str, int]:
        """Every registered host and the revision of its latest heartbeat."""
        return {host_id: entry.revision for host_id, entry in (await self._latest(self.HOSTS)).items()}

    async def peers(self, host_id: str) -> list[HostRecord]:
        """The latest heartbeat of every other registered host (as the view has them: hints, not judgments)."""
        return [
            msgspec.json.decode(entry.value, type=HostRecord)
            for key, entry in (await self._latest(self.HOSTS, confirmed=False)).items()
            if key != host_id and entry.value
        ]

    async def record_session(self, host_id: str, session_id: str, record: SessionRecord) -> None:
        await self.sessions.put(f"{host_id}.{session_id}", _encode(record))

    async def forget_session(self, host_id: str, session_id: str) -> None:
        await self.sessions.delete(f"{host_id}.{session_id}")

    async def sessions_by_host(self) -> dict[str, dict[str, SessionRecord]]:
        """host id -> session id -> record, for every recorded live session (one complete read of the bucket:
        a restarted host that missed one of its sessions would leave that session's run waiting for ever)."""
        found: dict[str, dict[str, SessionRecord]] = {}
        for key, entry in (await self._latest(self.SESSIONS)).items():
            host_id, _, session_id = key.partition(".")
            if entry.value:
                found.setdefault(host_id, {})[session_id] = msgspec.json.decode(entry.value, type=SessionRecord)
        return found
