"""Issue 21: when a session's MCP credential stops being valid (pure), and how a runtime is given it: only
through its environment, never on a command line or in a repr."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from treadle.core.credentials import MintingHost, SessionCredential, in_force, needs_touch, refusal
from treadle.providers.mcp_access import (
    TOKEN_ENV,
    McpAccess,
    claude_allowed_tools,
    claude_servers,
    codex_args,
    runtime_env,
)
from treadle.sandbox.launcher import sandbox_env

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
SECRET = "trs_secret-value"
ACCESS = McpAccess(url="http://127.0.0.1:8700/mcp", token=SECRET, tools=("thread_read", "thread_wait"))


def _credential(**kw) -> SessionCredential:
    base = {"tenant": "t", "thread": "thr_x", "session_id": "ps_x", "capabilities": ("thread_read",)} | kw
    return SessionCredential(**base, issued_at=T0, last_used_at=T0)


def test_a_credential_is_refused_when_idle_or_past_its_lifetime_whatever_its_use():
    c = _credential(idle_seconds=60, lifetime_seconds=3600)
    assert refusal(c, T0 + timedelta(seconds=59)) is None
    assert refusal(c, T0 + timedelta(seconds=60)) == "idle"
    used = _credential(idle_seconds=60, lifetime_seconds=3600)
    used = msgspec.structs.replace(used, last_used_at=T0 + timedelta(minutes=59, seconds=30))
    assert refusal(used, T0 + timedelta(minutes=59, seconds=59)) is None
    assert refusal(used, T0 + timedelta(hours=1)) == "expired"
    assert not needs_touch(c, T0 + timedelta(seconds=10)) and needs_touch(c, T0 + timedelta(seconds=15))


def test_the_secret_reaches_a_runtime_only_through_its_sandbox_environment():
    argv = codex_args(ACCESS)
    assert argv == [
        "-c",
        'mcp_servers.treadle.url="http://127.0.0.1:8700/mcp"',
        "-c",
        f'mcp_servers.treadle.bearer_token_env_var="{TOKEN_ENV}"',
        "-c",
        'mcp_servers.treadle.default_tools_approval_mode="approve"',
    ]
    servers = claude_servers(ACCESS)
    assert servers["treadle"]["type"] == "http"
    assert servers["treadle"]["headers"] == {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
    assert claude_allowed_tools(ACCESS) == ["mcp__treadle__thread_read", "mcp__treadle__thread_wait"]
    assert SECRET not in " ".join(argv) + repr(servers) + repr(ACCESS) + str(ACCESS)
    env = sandbox_env("/home/t", runtime_env(ACCESS), host={"TREADLE_NATS_URL": "nats://x", "LANG": "C"})
    assert env[TOKEN_ENV] == SECRET and not any(k.startswith("TREADLE_") for k in env)
    assert codex_args(None) == [] and claude_servers(None) == {} and runtime_env(None) == {}


def test_issue36_a_credential_is_in_force_only_for_its_minting_host_life_and_its_current_tools():
    minted = _credential(host_id="h1", boot_id="b1", capabilities=("thread_read", "thread_start"))
    assert in_force(minted, MintingHost(boot_id="b1", mcp_tools=("thread_read", "thread_start"))) == minted
    narrowed = in_force(minted, MintingHost(boot_id="b1", mcp_tools=("thread_read", "capabilities")))
    assert narrowed is not None and narrowed.capabilities == ("thread_read",)  # never widened either
    assert in_force(minted, MintingHost(boot_id="b2", mcp_tools=("thread_read",))) is None  # the host restarted
    assert in_force(minted, None) is None  # the host is gone
    unnamed = _credential()
    assert in_force(unnamed, None) == unnamed  # minted outside a host: its own limits only
