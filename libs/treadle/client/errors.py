"""The errors of the HTTP API as exceptions: one class per kind of failure, each an :class:`ApiError` carrying the
HTTP status and the API's own ``{"error": {code, message, details}}``. A few codes that callers branch on have a
class of their own below their status's (:class:`QuotaExceeded` is a :class:`RateLimited`, :class:`NotResumable`
a :class:`Conflict`). A gateway that cannot be reached is :class:`Unreachable` (status 0), so callers catch one
exception type and branch on the class or on ``code``.
"""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(Exception):
    """A failure the API reported (or a gateway that did not answer: status 0). ``detail`` is the API's
    ``details`` object; ``retry_after`` the seconds its ``Retry-After`` header asked for (None: none sent)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.status, self.code, self.message, self.details = status, code, message, details or {}
        self.retry_after = retry_after

    @property
    def detail(self) -> dict[str, Any]:
        return self.details

    @property
    def retryable(self) -> bool:
        """Asking again later may succeed: the gateway was unreachable, restarting or overloaded."""
        return self.status in RETRYABLE

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error an answer of status 400 or more stands for, as the class of its code or status."""
        try:
            error = response.json()["error"]
            code, message, details = error.get("code", ""), error.get("message", ""), error.get("details")
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not our shape (a proxy, a crash page): keep the start of the body for the message.
            code, message, details = (
                f"http_{response.status_code}",
                response.text.strip()[:200] or response.reason_phrase,
                None,
            )
        kind = error_class(response.status_code, code)
        return kind(response.status_code, code, message, details, retry_after(response.headers.get("retry-after")))


def retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header in its delta-seconds form (the only one the gateway sends)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(min(int(value.strip()), 3600))


class Unreachable(ApiError):
    """No answer: the gateway is down, restarting, or the connection broke (status 0)."""


class InvalidRequest(ApiError):
    """400: the request is malformed (a bad id, parameter or body)."""


BadRequest = InvalidRequest  # its first name


class Unauthorized(ApiError):
    """401: no token, or one the gateway does not accept."""


class Forbidden(ApiError):
    """403: the tenant may not do this (its policy, another tenant's resource)."""


class NotFound(ApiError):
    """404: no such thread, run, request, handoff, … for this tenant."""


class Conflict(ApiError):
    """409: the resource's state does not allow it now (a run already active, a request already answered)."""


class NotResumable(Conflict):
    """409 ``not_resumable``: the provider callback a runtime request waited on is gone; it cannot be answered."""


class PayloadTooLarge(ApiError):
    """413: the body is bigger than the gateway accepts."""


class Unprocessable(ApiError):
    """422: well-formed but not valid (a field out of range, an unknown mode, an Idempotency-Key reused)."""


class RateLimited(ApiError):
    """429: the token's request rate is used up; ``retry_after`` says when to ask again."""


class QuotaExceeded(RateLimited):
    """429 ``quota_exceeded``: the tenant or thread is at one of its limits (``details``: quota, limit,
    current); asking again helps only once the count goes down."""


class ServerError(ApiError):
    """5xx: the server failed."""


class Unavailable(ServerError):
    """502, 503, 504: the gateway or what it depends on is briefly unavailable; retrying may succeed."""


RETRYABLE = frozenset({0, 502, 503, 504})
_BY_STATUS: dict[int, type[ApiError]] = {
    0: Unreachable,
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: RateLimited,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}
_BY_CODE: dict[tuple[int, str], type[ApiError]] = {
    (429, "quota_exceeded"): QuotaExceeded,
    (409, "not_resumable"): NotResumable,
}


def error_class(status: int, code: str = "") -> type[ApiError]:
    """The :class:`ApiError` subclass of an HTTP status and error code (ApiError itself for a status without one)."""
    return _BY_CODE.get((status, code)) or _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
