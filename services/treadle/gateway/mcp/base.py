"""What every tool module shares: the request a call came in on, the credential it carries, typed failures
around a call, and the argument types used by more than one tool."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

import msgspec
from litestar import Request
from mcp.server.mcpserver import Context
from pydantic import Field

from treadle.core.credentials import SessionCredential

from ..errors import ApiError
from .errors import invalid, tool_error

CREDENTIAL_KEY = "treadle.session_credential"  # set by the mount for a provider session's credential
MAX_WAIT_SECONDS = 120.0
SCRIPT = "the scripted provider's script for this run (tests and demos; other providers ignore it)"
RequestId = Annotated[
    str | None, Field(default=None, min_length=1, max_length=200, description="makes the call idempotent")
]
ThreadId = Annotated[str, Field(min_length=1, max_length=64, description="thr_… id")]
T = TypeVar("T")


def request_of(ctx: Context) -> Request[Any, Any, Any]:
    """The Litestar request of this tool call's POST (the SDK hands tools the ASGI request it came in on)."""
    return Request(ctx.request_context.request.scope)  # type: ignore[union-attr]


def credential_of(request: Request[Any, Any, Any]) -> SessionCredential | None:
    """The provider session's credential the call was made with; None for a user's token."""
    return request.scope.get(CREDENTIAL_KEY)  # type: ignore[return-value]


async def guarded(tool: str, call: Awaitable[T]) -> T:
    try:
        return await call
    except ApiError as exc:
        raise tool_error(tool, exc) from None
    except msgspec.ValidationError as exc:
        raise invalid(tool, str(exc)) from None


def builtins(value: Any) -> dict[str, Any]:
    """A route's answer as the JSON object a tool returns (every route called here answers an object)."""
    if hasattr(value, "content") and isinstance(value.content, bytes):  # a route's Response of stored JSON
        decoded: dict[str, Any] = msgspec.json.decode(value.content)
    else:
        decoded = msgspec.to_builtins(value)
    return decoded


def key(client_request_id: str | None, part: str) -> str | None:
    """One call that makes several commands gives each its own key, derived from the caller's."""
    return None if client_request_id is None else f"mcp:{client_request_id}:{part}"
