"""Python client of the Treadle HTTP API v1."""

from .errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    Unprocessable,
    Unreachable,
)
from .events import Follow, SseEvent, follow, parse_sse
from .http import TERMINAL, TreadleClient

__all__ = [
    "TERMINAL",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Follow",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ServerError",
    "SseEvent",
    "TreadleClient",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "Unreachable",
    "follow",
    "parse_sse",
]
