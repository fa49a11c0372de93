"""An MCP client of the gateway's ``/mcp`` for the tests: the official SDK's client over real HTTP, with a bearer
token; ``call`` answers a tool's structured result or raises :class:`ToolFailed` with its typed error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class ToolFailed(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error)
        self.error = error
        self.code, self.kind = error.get("code"), error.get("kind")


@asynccontextmanager
async def mcp_session(base_url: str, token: str) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(part, "text", "") for part in result.content)
    if result.is_error:
        try:
            raise ToolFailed(json.loads(text)["error"])
        except (ValueError, KeyError):
            raise ToolFailed({"code": "untyped", "kind": None, "message": text}) from None
    if result.structured_content is not None:  # a non-object result comes wrapped as {"result": …}
        content = result.structured_content
        return content["result"] if set(content) == {"result"} else content
    return json.loads(text)
