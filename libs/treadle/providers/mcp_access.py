"""Issue 21: how a real runtime reaches the orchestrator's MCP server with its session's credential. The secret
travels only in the runtime's environment (the sandbox's allow-listed one): Codex reads it through
``bearer_token_env_var``, Claude Code expands ``${VAR}`` in the server's headers, so it is on no command line
(the host's ``ps``) and in no config file."""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

TOKEN_ENV = "ORCHESTRATOR_MCP_TOKEN"  # not TREADLE_: the sandbox refuses Treadle's own settings
SERVER = "treadle"


class McpAccess(msgspec.Struct, kw_only=True, frozen=True):
    url: str
    token: str
    tools: tuple[str, ...]

    def __repr__(self) -> str:  # never the secret, in a log line or a traceback
        return f"McpAccess(url={self.url!r}, tools={len(self.tools)})"

    __str__ = __repr__


def egress_url(access: McpAccess | None) -> str | None:
    """The sandbox's one egress target besides the model API (that host and port only), when there is access."""
    return access.url if access is not None else None


def runtime_env(access: McpAccess | None) -> dict[str, str]:
    return {TOKEN_ENV: access.token} if access is not None else {}


def codex_args(access: McpAccess | None) -> list[str]:
    """``codex app-server`` config overrides: a Streamable HTTP server with its bearer token in a variable."""
    if access is None:
        return []
    return [
        "-c",
        f"mcp_servers.{SERVER}.url={json.dumps(access.url)}",
        "-c",
        f"mcp_servers.{SERVER}.bearer_token_env_var={json.dumps(TOKEN_ENV)}",
        # The credential's capabilities are the policy: Codex's own per-call prompt would only be declined
        # ("user rejected MCP tool call"), as the app-server asks no client that can answer it.
        "-c",
        f'mcp_servers.{SERVER}.default_tools_approval_mode="approve"',
    ]


def acp_server(access: McpAccess, token_in: Literal["header", "env"]) -> dict[str, Any]:
    """ACP's ``McpServer`` of the http kind, for ``session/new`` and ``session/load``. ``header``: the token is the
    header's value, as ACP specifies (it travels on the agent's stdin; an agent that keeps MCP clients in its own
    process, like codex-acp, never shows it). ``env``: the header names the variable, which the agent expands
    (claude-agent-acp hands its servers to Claude Code on the command line, where a value would show)."""
    value = f"${{{TOKEN_ENV}}}" if token_in == "env" else access.token
    headers = [{"name": "Authorization", "value": f"Bearer {value}"}]
    return {"type": "http", "name": SERVER, "url": access.url, "headers": headers}


def claude_servers(access: McpAccess | None) -> dict[str, dict[str, Any]]:
    """``ClaudeAgentOptions.mcp_servers``: an http server whose Authorization header names the variable."""
    if access is None:
        return {}
    headers = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
    return {SERVER: {"type": "http", "url": access.url, "headers": headers}}


def claude_allowed_tools(access: McpAccess | None) -> list[str]:
    return [f"mcp__{SERVER}__{tool}" for tool in access.tools] if access is not None else []
