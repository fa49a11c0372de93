"""Issue 21 with the real ``codex`` binary on a real stack: the provider host mints a session's MCP credential
when it opens the session and deletes it when the idle reaper releases the session; the secret is in the
app-server's environment (as the digest KV keeps), never on its command line."""

from __future__ import annotations

import hashlib

import nats
import psutil
import pytest
from nats.js.errors import KeyNotFoundError

from tests.codex.codex_mock import Stall, Text
from tests.codex.codex_support import TENANT, codex_env
from tests.support.helpers import wait_for
from tests.support.provider_http import api_client, tenant_token
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port
from treadle.ops.session_credentials import BUCKET
from treadle.providers.mcp_access import TOKEN_ENV

IDLE = "2"  # the idle reaper's time: a session is released this long after its run ends


@pytest.fixture(scope="module")
async def mcp_stack(tmp_path_factory, mock, homes_root):
    port = free_port()  # the stack's own gateway: a sandboxed runtime reaches its MCP URL (no lower port binds)
    env = {
        **codex_env(mock, homes_root),
        "TREADLE_PROVIDER_HOST_MCP_URL": f"http://127.0.0.1:{port}/mcp",
        "TREADLE_PROVIDER_HOST_IDLE_SECONDS": IDLE,
    }
    stack_dir = tmp_path_factory.mktemp("codex-mcp-stack")
    async with Stack(stack_dir, gateway_port=port, env=env, on_output=lambda *_: None) as s:
        yield s


def _runtime_env_tokens() -> list[tuple[str, list[str]]]:
    """(the MCP token, the command line) of every live process whose environment holds one."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            token = proc.environ().get(TOKEN_ENV)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if token:
            found.append((token, proc.info["cmdline"] or []))
    return found


async def test_the_host_mints_a_sessions_credential_at_open_and_deletes_it_at_release(mcp_stack, mock):
    mock.on("think for a while", [Text("Thinking"), Stall()])
    nc = await nats.connect(mcp_stack.nats_url)
    try:
        await _open_and_release(nc, mcp_stack, mock)
    finally:
        await nc.close()


async def _open_and_release(nc, mcp_stack, mock) -> None:
    kv = await nc.jetstream().key_value(BUCKET)
    async with api_client(mcp_stack, await tenant_token(mcp_stack, TENANT)) as client:
        thread = (await client.create_thread(title="codex mcp", provider="codex"))["thread_id"]
        sent = await client.send(thread, "think for a while")
        await wait_for(lambda: mock.stalled, timeout=60, what="the codex turn mid-stream")
        session = (await client.get_thread(thread))["sessions"][-1]["id"]
        digest = (await kv.get(f"s.{session}")).value.decode()
        held = [(t, argv) for t, argv in _runtime_env_tokens() if hashlib.sha256(t.encode()).hexdigest() == digest]
        assert held, "no runtime process holds the session's credential"
        assert all(t not in " ".join(argv) for t, argv in held)  # on no command line
        await kv.get(f"c.{digest}")  # the record is stored under the digest, the secret nowhere

        interrupted = await client.request("POST", f"/v1/runs/{sent['run_id']}/interrupt", json={})
        assert interrupted.status_code == 202, interrupted.text
        await client.wait_run(sent["run_id"], timeout=60)

        async def released() -> bool:
            try:
                await kv.get(f"s.{session}")
                return False
            except KeyNotFoundError:
                return True

        await wait_for(released, timeout=30, interval=0.1, what="the credential deleted when the session is released")
        with pytest.raises(KeyNotFoundError):
            await kv.get(f"c.{digest}")
