"""One error shape for every failure: ``{"error": {"code", "message", "details"}}``; never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details, self.headers = status, code, message, details or {}, headers


def body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


RETRYABLE = (429, 503)  # always with Retry-After, as the OpenAPI document says


def on_api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    headers = exc.headers or ({"Retry-After": "1"} if exc.status in RETRYABLE else None)
    return Response(body(exc.code, exc.message, exc.details), status_code=exc.status, headers=headers)


_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    429: "rate_limited",
    500: "internal",  # the codes the OpenAPI document lists for these statuses (gateway.openapi.BASE)
    503: "unavailable",
}


def on_http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    details = {}
    if isinstance(exc, ValidationException) and exc.extra:
        details = {"problems": exc.extra}
    message = exc.detail if exc.status_code < 500 else "internal error"
    retry = {"Retry-After": "1"} if exc.status_code in RETRYABLE else None
    return Response(
        body(_CODES.get(exc.status_code, "error"), message, details), status_code=exc.status_code, headers=retry
    )


def on_too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    """JSON nested deeper than the decoder recurses: a typed 400, not a crash of the request."""
    return Response(body("bad_request", "the request body is nested too deeply"), status_code=400)


def on_broker_unavailable(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The broker did not answer (a NATS node lost, a stream electing its leader): a typed, retryable 503,
    not an internal error; a repeat with the same Idempotency-Key is the same request."""
    log.warning("broker unavailable on %s %s: %r", request.method, request.url.path, exc)
    return Response(
        body("unavailable", "the message broker is briefly unavailable; retry"),
        status_code=503,
        headers={"Retry-After": "1"},
    )


def on_store_unavailable(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Redis is down or restarting (the embedded stack restarts it): retryable, like a broker outage."""
    log.warning("projection store unavailable on %s %s: %r", request.method, request.url.path, exc)
    return Response(
        body("unavailable", "the projection store is briefly unavailable; retry"),
        status_code=503,
        headers={"Retry-After": "1"},
    )


def on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return Response(body("internal", "internal error"), status_code=500)
