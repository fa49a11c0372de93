"""Issue 36, finding 1, as it was found: ``kill -9`` of the provider host (restarted by the stack) left its
sessions' MCP credentials answering for as long as their idle time allowed. The restarted life revokes every
credential of its earlier lives: the one of a session it reports stopped and the one minted just before the
crash that no session record names."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import msgspec
import pytest
from nats.js.errors import KeyNotFoundError

from tests.support.helpers import wait_for
from treadle.core.ids import new_id
from treadle.ops.session_credentials import BUCKET, SessionCredentials
from treadle.ops.tokens import digest
from treadle.provider_host.registry import Registry, SessionRecord

pytestmark = pytest.mark.e2e

HOST = "host-1"  # the stack's provider host
PROBE = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def test_L9_3_a_killed_hosts_session_credentials_do_not_outlive_its_life(api, stack, stack_nc):
    thread = await api.create_thread(title="crash")
    js = stack_nc.jetstream()
    boot = msgspec.json.decode((await (await js.key_value("treadle-hosts")).get(HOST)).value)["boot_id"]
    store, registry = SessionCredentials(js), await Registry.open(js)
    tokens = []
    for recorded in (True, False):  # as the host mints them: a recorded session, and one not yet recorded
        session = new_id("ps", int(datetime.now(UTC).timestamp() * 1000))
        life = {"host_id": HOST, "boot_id": boot}
        tokens.append(
            await store.mint(
                tenant=api.tenant, thread=thread, session_id=session, capabilities=("capabilities",), **life
            )
        )
        if recorded:
            record = SessionRecord(tenant=api.tenant, thread=thread, provider_thread_id="pth_crash", boot_id=boot)
            await registry.record_session(HOST, session, record)

    async with httpx.AsyncClient(base_url=stack.api_url) as http:

        async def status(token: str) -> int:
            answer = await http.post("/mcp", json=PROBE, headers={"Authorization": f"Bearer {token}"})
            return answer.status_code

        assert [await status(t) for t in tokens] == [200, 200]
        restarts = stack.processes.restarts("provider-host")
        await stack.processes.kill("provider-host")
        await wait_for(lambda: stack.processes.restarts("provider-host") > restarts, timeout=30, what="restarted")
        kv = await js.key_value(BUCKET)

        async def deleted(token: str) -> bool:
            try:
                return not (await kv.get(f"c.{digest(token)}")).value
            except KeyNotFoundError:
                return True

        for token in tokens:
            await wait_for(lambda t=token: deleted(t), timeout=60, what="the earlier life's credential deleted")
        assert [await status(t) for t in tokens] == [401, 401]
