"""The gateway's access log: one INFO line per HTTP request once its response ended (health probes and scrapes
that succeed at DEBUG), with its method, route template (never the raw path: ids stay out of what is
aggregated), status, duration, tenant and request id.

The request id is the client's ``X-Request-Id`` when it is a plain token (at most 128 of ``A-Za-z0-9._:-``),
else a new one; it is bound for every log line the request causes and answered in the ``X-Request-Id`` header,
so a client's report and the server's lines meet. The tenant is what authentication found (``note_tenant``,
called by the gateway's principal dependency and the MCP mount's door), empty for a request that had none."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from . import logs

log = logging.getLogger("treadle.access")
# An ASGI scope key holding this request's notes: a dict, shared by the copies of the scope a mount makes, so
# what a mounted app notes reaches the line. Set by server code only, never from a request.
NOTES_KEY = "treadle.access"
REQUEST_ID_HEADER = b"x-request-id"
# what orchestrators and scrapers ask every few seconds: at DEBUG, so they do not drown the requests of people
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
_TOKEN = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id(offered: bytes | None) -> str:
    """The client's id when it is a plain token; anything else (spaces, newlines, too long) gets a new one."""
    if offered is not None:
        text = offered.decode("latin-1")
        if _TOKEN.fullmatch(text):
            return text
    return uuid.uuid4().hex


def note_tenant(scope: Any, tenant: str) -> None:
    """The request's tenant, for its access line (nothing when the access log is off)."""
    notes = scope.get(NOTES_KEY)
    if isinstance(notes, dict):
        notes["tenant"] = tenant


def access_log(app: Any) -> Any:  # ASGI in, ASGI out (as runtime/metrics.http_metrics)
    async def middleware(
        scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        offered = next((v for k, v in scope.get("headers", ()) if k.lower() == REQUEST_ID_HEADER), None)
        rid = request_id(offered)
        status = 500
        started = time.perf_counter()
        notes: dict[str, str] = {}
        scope[NOTES_KEY] = notes

        def sending(message: Any) -> Awaitable[None]:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers") or () if k.lower() != REQUEST_ID_HEADER]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, rid.encode())]}
            return send(message)

        with logs.bound(request=rid):
            try:
                await app(scope, receive, sending)
            finally:
                paths = sorted(getattr(scope.get("route_handler"), "paths", ()) or ())
                route = paths[0] if paths else "unmatched"
                method = str(scope.get("method", ""))
                millis = round((time.perf_counter() - started) * 1000, 2)
                tenant = notes.get("tenant", "")
                level = logging.DEBUG if route in PROBES and status < 400 else logging.INFO
                with logs.bound(tenant=tenant or None):
                    log.log(
                        level,
                        "%s %s %d %.2f ms",
                        method,
                        route,
                        status,
                        millis,
                        extra=logs.fields(method=method, route=route, status=status, duration_ms=millis),
                    )

    return middleware
