"""One error shape for every failure: ``{"error": {"code", "message", "details"}}``; never a stack trace."""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from treadle.api.constraints import violation
from treadle.core.errors import BadRequest, DomainError

log = logging.getLogger(__name__)
AnyRequest: TypeAlias = Request[Any, Any, Any]


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details, self.headers = status, code, message, details or {}, headers


def body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


RETRYABLE = (429, 503)  # always with Retry-After, as the OpenAPI document says


def on_api_error(request: AnyRequest, exc: ApiError) -> Response[dict[str, Any]]:
    headers = exc.headers or ({"Retry-After": "1"} if exc.status in RETRYABLE else None)
    return Response(body(exc.code, exc.message, exc.details), status_code=exc.status, headers=headers)


def on_domain_error(request: AnyRequest, exc: DomainError) -> Response[dict[str, Any]]:
    """A use case's refusal (``treadle.usecases``): the same shape as the gateway's own."""
    return on_api_error(request, ApiError(exc.status, exc.code, exc.message, exc.details))


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


def on_http_error(request: AnyRequest, exc: HTTPException) -> Response[dict[str, Any]]:
    if isinstance(exc, ValidationException) and (refused := refusal(request, exc)) is not None:
        return on_domain_error(request, refused)
    details = {}
    if isinstance(exc, ValidationException) and exc.extra:
        details = {"problems": exc.extra}
    message = exc.detail if exc.status_code < 500 else "internal error"
    retry = {"Retry-After": "1"} if exc.status_code in RETRYABLE else None
    return Response(
        body(_CODES.get(exc.status_code, "error"), message, details), status_code=exc.status_code, headers=retry
    )


def on_too_deep(request: AnyRequest, exc: RecursionError) -> Response[dict[str, Any]]:
    """JSON nested deeper than the decoder recurses: a typed 400, not a crash of the request."""
    return Response(body("bad_request", "the request body is nested too deeply"), status_code=400)


def on_broker_unavailable(request: AnyRequest, exc: Exception) -> Response[dict[str, Any]]:
    """The broker did not answer (a NATS node lost, a stream electing its leader): a typed, retryable 503,
    not an internal error; a repeat with the same Idempotency-Key is the same request."""
    log.warning("broker unavailable on %s %s: %r", request.method, request.url.path, exc)
    return Response(
        body("unavailable", "the message broker is briefly unavailable; retry"),
        status_code=503,
        headers={"Retry-After": "1"},
    )


def on_store_unavailable(request: AnyRequest, exc: Exception) -> Response[dict[str, Any]]:
    """Redis is down or restarting (the embedded stack restarts it): retryable, like a broker outage."""
    log.warning("projection store unavailable on %s %s: %r", request.method, request.url.path, exc)
    return Response(
        body("unavailable", "the projection store is briefly unavailable; retry"),
        status_code=503,
        headers={"Retry-After": "1"},
    )


def on_unexpected(request: AnyRequest, exc: Exception) -> Response[dict[str, Any]]:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return Response(body("internal", "internal error"), status_code=500)


def refusal(request: AnyRequest, exc: ValidationException) -> BadRequest | None:
    """A body field over its limit (a constraint of its ``treadle.api`` type): the field's own typed 400."""
    cause, handler = exc.__cause__, request.scope.get("route_handler")
    data = handler.parsed_fn_signature.parameters.get("data") if handler is not None else None
    if not isinstance(cause, msgspec.ValidationError) or data is None:
        return None
    body = next((t for t in data.inner_types if t.is_subclass_of(msgspec.Struct)), data) if data.is_optional else data
    found = violation(cause, body.annotation, skip=1)  # the path starts at the handler's ``data``
    return BadRequest(found.message, code=found.code, details=found.details) if found else None
