"""Headers every gateway response carries, whatever answered it (a route, an error handler, the limiter, the
MCP mount, a 404): ``X-Content-Type-Options: nosniff``, so a browser never runs a JSON body or a stored text
it was served as something else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

NOSNIFF = (b"x-content-type-options", b"nosniff")


def nosniff(app: Any) -> Any:  # ASGI in, ASGI out (as runtime/metrics.http_metrics)
    async def wrapped(
        scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        def sending(message: Any) -> Awaitable[None]:  # send's own awaitable: nothing added per SSE frame
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or ())
                if not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF]}
            return send(message)

        await app(scope, receive, sending)

    return wrapped
