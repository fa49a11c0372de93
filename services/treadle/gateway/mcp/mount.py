"""The ``/mcp`` mount: bearer authentication at the door (a refused token never reaches the MCP session), then
the SDK's Streamable HTTP transport in stateless JSON mode, so any gateway replica answers any call (no MCP
session lives in one process) and a call is one POST and one JSON answer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import msgspec
from litestar import Litestar, Request
from litestar.handlers import asgi
from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from treadle.ops.session_credentials import is_session_credential
from treadle.ops.tokens import Principal

from ..deps import PRINCIPAL_KEY, HttpRequest, app_state, principal
from ..errors import ApiError, body
from ..limits import session_credentials
from .base import CREDENTIAL_KEY
from .tools import server

_manager: StreamableHTTPSessionManager | None = None
AGENT_USER = "agent"  # who the commands of a provider session's agent are recorded as
CHALLENGE = {"WWW-Authenticate": "Bearer"}


@contextlib.asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    """One session manager per app run (the SDK's manager runs once), holding the task group of the calls."""
    global _manager
    manager = StreamableHTTPSessionManager(app=server()._lowlevel_server, json_response=True, stateless=True)
    async with manager.run():
        _manager = manager
        try:
            yield
        finally:
            _manager = None


async def _refuse(send: Send, exc: ApiError) -> None:
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()]
    start: HTTPResponseStartEvent = {"type": "http.response.start", "status": exc.status, "headers": headers}
    content = msgspec.json.encode(body(exc.code, exc.message, exc.details))
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": content, "more_body": False}
    await send(start)
    await send(end)


async def _authenticate(request: HttpRequest) -> None:
    """A user's token (its tenant, any tool) or a provider session's credential (its tenant, its tools), which
    the routes the tools call then see as the request's principal."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and is_session_credential(token):
        store = session_credentials(app_state(request))
        credential = await store.resolve(token) if store is not None else None
        if credential is None:
            raise ApiError(401, "unauthorized", "unknown, expired or revoked credential", headers=CHALLENGE)
        request.scope[PRINCIPAL_KEY] = Principal(tenant=credential.tenant, user=AGENT_USER)  # type: ignore[literal-required]
        request.scope[CREDENTIAL_KEY] = credential  # type: ignore[literal-required]
        return
    await principal(request)


@asgi("/mcp", is_mount=True, copy_scope=True)
async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    try:
        await _authenticate(Request(scope))
    except ApiError as exc:
        await _refuse(send, exc)
        return
    if _manager is None:
        await _refuse(send, ApiError(503, "unavailable", "the MCP server is starting; retry"))
        return
    await _manager.handle_request(scope, receive, send)  # type: ignore[arg-type]  # Litestar's and Starlette's ASGI types are one protocol


ROUTES = [mcp_endpoint]
