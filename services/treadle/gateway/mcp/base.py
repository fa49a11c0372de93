"""What every tool module shares: the ports a call's use case works through (its caller, the gateway's command
bus, policies and reads), typed failures around a call, and the argument types used by more than one tool."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Annotated, TypeVar

import msgspec
from litestar import Request
from mcp.server.mcpserver import Context
from pydantic import Field

from treadle.api.limits import MAX_NAME_CHARS
from treadle.core.credentials import SessionCredential
from treadle.core.errors import DomainError
from treadle.ops.tokens import Principal
from treadle.usecases.messages import MessageLimits
from treadle.usecases.ports import CommandBus, PolicyBook, ThreadReads

from ..deps import HttpRequest, app_state, message_limits, principal
from ..errors import ApiError
from ..reads import GatewayReads
from .errors import invalid, tool_error

CREDENTIAL_KEY = "treadle.session_credential"  # set by the mount for a provider session's credential
MAX_WAIT_SECONDS = 120.0
SCRIPT = "the scripted provider's script for this run (tests and demos; other providers ignore it)"
RequestId = Annotated[
    str | None, Field(default=None, min_length=1, max_length=200, description="makes the call idempotent")
]
ThreadId = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, description="thr_… id")]
T = TypeVar("T")


def request_of(ctx: Context) -> HttpRequest:
    """The Litestar request of this tool call's POST (the SDK hands tools the ASGI request it came in on)."""
    return Request(ctx.request_context.request.scope)  # type: ignore[union-attr]


def credential_of(request: HttpRequest) -> SessionCredential | None:
    """The provider session's credential the call was made with; None for a user's token."""
    return request.scope.get(CREDENTIAL_KEY)  # type: ignore[return-value]


async def guarded(tool: str, call: Awaitable[T]) -> T:
    try:
        return await call
    except ApiError as exc:
        raise tool_error(tool, exc) from None
    except DomainError as exc:  # a use case's refusal
        raise tool_error(tool, ApiError(exc.status, exc.code, exc.message, exc.details)) from None
    except msgspec.ValidationError as exc:
        raise invalid(tool, str(exc)) from None


@dataclass(frozen=True)
class Ports:
    """What a tool's use case works through, for this call: its caller and the gateway's ports."""

    who: Principal
    commands: CommandBus
    policies: PolicyBook
    reads: ThreadReads
    limits: MessageLimits
    session_thread: str | None  # a provider session's own thread; None for a user's token


async def ports(ctx: Context) -> Ports:
    """The caller (resolved at the mount's door) and the ports of the request the call came in on."""
    request = request_of(ctx)
    state = app_state(request)
    credential = credential_of(request)
    return Ports(
        who=await principal(request),
        commands=state.commands,
        policies=state.policies,
        reads=GatewayReads(request),
        limits=message_limits(request),
        session_thread=credential.thread if credential is not None else None,
    )


def key(client_request_id: str | None, part: str) -> str | None:
    """One call that makes several commands gives each its own key, derived from the caller's."""
    return None if client_request_id is None else f"mcp:{client_request_id}:{part}"
