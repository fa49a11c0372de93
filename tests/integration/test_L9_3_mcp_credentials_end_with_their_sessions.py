"""Issue 36: a provider session's MCP credential ends on every path its session is reported stopped, not only at
its own end: a host found lost by another host's watcher, a session of an earlier life reported at the host's
start, and a credential that an earlier life minted and never recorded (a crash between the mint and the
record), swept at the host's start. Real hosts on a real broker, as in test_L9_provider_hosts."""

from __future__ import annotations

from datetime import UTC, datetime

from nats.js.errors import KeyNotFoundError

from tests.integration.test_L9_provider_hosts import LOOPS_PER_HOST, TENANT, Hosts, tick
from tests.support.helpers import wait_for
from treadle.ops.session_credentials import BUCKET, SessionCredentials
from treadle.ops.tokens import digest
from treadle.provider_host.registry import HostRecord, Registry, SessionRecord
from treadle.runtime.clock import ManualClock

TOOLS = ("capabilities", "thread_read")


async def _stored(env: Hosts, token: str) -> bool:
    """The credential's record is still in the bucket (not only refused at the door)."""
    kv = await env.nc.jetstream().key_value(BUCKET)
    try:
        return bool((await kv.get(f"c.{digest(token)}")).value)
    except KeyNotFoundError:
        return False


async def test_L9_3_a_lost_hosts_session_credentials_are_revoked_by_the_watcher_that_reports_it(tmp_path):
    dying, watching = ManualClock(), ManualClock()
    async with Hosts(tmp_path) as env:
        lost = await env.host("h1", dying, heartbeat_seconds=1, host_expiry_seconds=5)
        placed = await env.place("t1")
        store = SessionCredentials(env.nc.jetstream())
        token = await store.mint(
            tenant=TENANT,
            thread="t1",
            session_id=placed.session_id,
            capabilities=TOOLS,
            host_id="h1",
            boot_id=lost.boot_id,
        )
        assert await store.resolve(token) is not None
        await env.host("h2", watching, heartbeat_seconds=1, host_expiry_seconds=5)
        for _ in range(6):  # h1's clock stands still: h2 reports its session lost
            await tick(watching, 1, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(placed.session_id), what="h1's session reported stopped")
        assert env.stopped(placed.session_id) == ["host_lost"]
        assert not await _stored(env, token) and await store.resolve(token) is None


async def test_L9_3_a_restarted_host_revokes_every_credential_of_its_earlier_lives(tmp_path):
    async with Hosts(tmp_path) as env:
        js = env.nc.jetstream()
        store, registry = SessionCredentials(js), await Registry.open(js)
        earlier = SessionRecord(tenant=TENANT, thread="t1", provider_thread_id="pth_t1", boot_id="boot-before")
        # The crashed life, as it was: its heartbeat, one recorded session, one minted but not yet recorded
        await registry.beat(_life("h1", "boot-before"))
        await registry.record_session("h1", "ps_recorded", earlier)
        life = {"host_id": "h1", "boot_id": "boot-before"}
        recorded = await store.mint(tenant=TENANT, thread="t1", session_id="ps_recorded", capabilities=TOOLS, **life)
        unrecorded = await store.mint(tenant=TENANT, thread="t2", session_id="ps_unrec", capabilities=TOOLS, **life)
        # Another host's live credential and one minted outside any host (before host lives were named)
        await registry.beat(_life("h2", "boot-h2"))
        others = await store.mint(
            tenant=TENANT, thread="t3", session_id="ps_h2", capabilities=TOOLS, host_id="h2", boot_id="boot-h2"
        )
        unnamed = await store.mint(tenant=TENANT, thread="t4", session_id="ps_unnamed", capabilities=TOOLS)
        await registry.record_session("h1", "ps_unnamed", earlier)
        assert all([await store.resolve(t) for t in (recorded, unrecorded, others, unnamed)])

        await env.host("h1", ManualClock(), heartbeat_seconds=1)  # the host's next life
        await wait_for(lambda: env.stopped("ps_recorded"), what="the earlier life's session reported stopped")
        for token in (recorded, unrecorded, unnamed):
            assert not await _stored(env, token) and await store.resolve(token) is None
        assert await store.resolve(others) is not None  # another host's credentials are its own business


def _life(host_id: str, boot_id: str) -> HostRecord:
    """A host life's heartbeat record, as the host writes it."""
    return HostRecord(
        host_id=host_id,
        boot_id=boot_id,
        volume="local",
        capacity=10,
        live=1,
        heartbeat_seconds=1,
        at=datetime.now(UTC),
        mcp_tools=TOOLS,
    )
