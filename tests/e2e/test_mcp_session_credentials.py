"""Issue 21, per-session MCP credentials against the real gateway: minted as a provider host mints them (the
same store), a credential acts as its tenant with only its tools; one past its lifetime, idle too long,
revoked at its session's release, or of another tenant's session is refused; and the secret appears in no
worker's log line and no event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest

from tests.support.helpers import recent_worker_lines
from tests.support.mcp_client import ToolFailed, call, mcp_session
from treadle.core.ids import new_id
from treadle.ops.session_credentials import SessionCredentials

pytestmark = pytest.mark.e2e

PROBE = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def _status(url: str, token: str) -> int:
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{url}/mcp", json=PROBE, headers={"Authorization": f"Bearer {token}"})
    return r.status_code


async def _mint(stack_nc, tenant: str, thread: str, tools=("capabilities", "thread_read", "thread_list"), **kw):
    session = new_id("ps", int(datetime.now(UTC).timestamp() * 1000))
    store = SessionCredentials(stack_nc.jetstream())
    return session, await store.mint(tenant=tenant, thread=thread, session_id=session, capabilities=tools, **kw)


async def test_a_session_credential_acts_as_its_tenant_with_only_its_tools_and_is_never_logged(
    api, stack, stack_nc, log
):
    thread = await api.create_thread(title="parent")
    await api.wait_run((await api.send(thread, "hi"))["run_id"])
    _, token = await _mint(stack_nc, api.tenant, thread)
    async with mcp_session(stack.api_url, token) as mcp:
        assert (await call(mcp, "capabilities"))["tenant"] == api.tenant
        read = await call(mcp, "thread_read", thread_id=thread)
        assert [m["role"] for m in read["items"]] == ["user", "assistant"]
        with pytest.raises(ToolFailed) as denied:
            await call(mcp, "thread_start", title="not allowed")
        assert (denied.value.kind, denied.value.code) == ("capability_denied", "forbidden")
    assert [t["id"] for t in (await api.client.list_threads())["items"]] == [thread]  # nothing was made
    assert not any(token in line for line in recent_worker_lines)
    events = await log.read(api.tenant, thread)
    assert events and not any(token.encode() in msgspec.json.encode(e) for e in events)


async def test_expired_idle_revoked_and_unknown_credentials_are_refused(api, stack, stack_nc):
    thread = await api.create_thread()
    long_ago = datetime.now(UTC) - timedelta(hours=9)
    _, expired = await _mint(stack_nc, api.tenant, thread, now=long_ago, idle_seconds=100_000)
    _, idle = await _mint(stack_nc, api.tenant, thread, now=datetime.now(UTC) - timedelta(minutes=31))
    released, revoked = await _mint(stack_nc, api.tenant, thread)
    _, kept = await _mint(stack_nc, api.tenant, thread)
    assert await _status(stack.api_url, revoked) == 200
    assert await SessionCredentials(stack_nc.jetstream()).revoke_session(released)
    for token in (expired, idle, revoked, "trs_never-issued", kept + "x"):
        assert await _status(stack.api_url, token) == 401, token[:8]
    assert await _status(stack.api_url, kept) == 200  # a release revokes its own session's credential only


async def test_another_tenants_session_credential_finds_nothing_here(api, stack, stack_nc, log):
    thread = await api.create_thread(title="mine")
    before = await log.last_seq(api.tenant, thread)
    _, theirs = await _mint(stack_nc, f"{api.tenant}-other", new_id("thr", 1), tools=("thread_read", "thread_list"))
    async with mcp_session(stack.api_url, theirs) as mcp:
        with pytest.raises(ToolFailed) as failed:
            await call(mcp, "thread_read", thread_id=thread)
        assert failed.value.kind == "not_found"
        assert (await call(mcp, "thread_list"))["items"] == []
    assert await log.last_seq(api.tenant, thread) == before


async def test_issue36_a_credential_has_the_tools_its_minting_host_life_allows_now_and_none_after_it(
    api, stack, stack_nc
):
    """Each call reads the minting host's heartbeat record: its current tool setting narrows the credential's
    tools, and a record of another boot (the host restarted) or none (the host is gone) refuses it."""
    thread = await api.create_thread(title="narrowed")
    hosts = await stack_nc.jetstream().key_value("treadle-hosts")
    host_id = f"host-{new_id('x', 1)[-8:].lower()}"

    async def life(boot: str, tools: tuple[str, ...]) -> None:
        record = {
            "host_id": host_id,
            "boot_id": boot,
            "volume": "elsewhere",
            "capacity": 1,
            "live": 1,
            "heartbeat_seconds": 1.0,
            "at": datetime.now(UTC).isoformat(),
            "mcp_tools": list(tools),
        }
        await hosts.put(host_id, msgspec.json.encode(record))

    await life("boot1", ("capabilities", "thread_read", "thread_list"))
    _, token = await _mint(stack_nc, api.tenant, thread, host_id=host_id, boot_id="boot1")
    async with mcp_session(stack.api_url, token) as mcp:
        assert (await call(mcp, "thread_read", thread_id=thread))["items"] == []
        await life("boot1", ("capabilities",))  # the operator narrowed the setting the credential was minted by
        assert [t.name for t in (await mcp.list_tools()).tools] == ["capabilities"]
        with pytest.raises(ToolFailed) as denied:
            await call(mcp, "thread_read", thread_id=thread)
        assert denied.value.kind == "capability_denied"
    await life("boot2", ("capabilities", "thread_read", "thread_list"))  # the host's next life
    assert await _status(stack.api_url, token) == 401
    await hosts.delete(host_id)  # the host is gone
    await life("boot1", ("capabilities",))
    assert await _status(stack.api_url, token) == 200
    await hosts.delete(host_id)
    assert await _status(stack.api_url, token) == 401
