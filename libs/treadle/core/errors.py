"""Domain errors: a rejected command, never retryable. Infrastructure errors live at the edges."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A command was rejected by the domain; nothing was appended. ``status`` is the HTTP mapping."""

    code = "rejected"
    status = 400

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details or {}


class BadRequest(DomainError):
    code = "bad_request"
    status = 400


class NotFound(DomainError):
    code = "not_found"
    status = 404


class Conflict(DomainError):
    """The command contradicts the current state (e.g. a run is active); retrying will not help."""

    code = "conflict"
    status = 409


class Unprocessable(DomainError):
    code = "unprocessable"
    status = 422


def check(condition: bool, error: type[DomainError], message: str, **kw: Any) -> None:
    if not condition:
        raise error(message, **kw)


class Forbidden(DomainError):
    """The caller may not do this (its role, or its tenant's policy); asking again will not help."""

    code = "forbidden"
    status = 403


class QuotaExceeded(DomainError):
    """A tenant or thread is at one of its limits; ``details`` says which (quota, limit, current). Retrying
    helps only once the count goes down (a queued run starts, a stream closes)."""

    code = "quota_exceeded"
    status = 429
