"""Python SDK of the Treadle HTTP API v1: :class:`AsyncTreadle` (asyncio) and :class:`Treadle` (sync), one
method per operation of the OpenAPI document, named after its operation id. Without a URL and token they
read ``TREADLE_API_URL`` and ``TREADLE_TOKEN``. Installs without the server:
it imports only httpx, msgspec, the read views (:mod:`treadle.views`) and itself.

:class:`TreadleClient` is the first, dict-answering async client, kept for its callers."""

from .aio import AsyncPage, AsyncTreadle
from .calls import OPERATIONS, TERMINAL, RetryPolicy
from .errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    NotResumable,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    Unprocessable,
    Unreachable,
)
from .events import Follow, follow, parse_sse
from .http import TreadleClient
from .results import (
    Acknowledged,
    CheckpointPoint,
    Diff,
    FileStat,
    Forked,
    Implemented,
    MessageAccepted,
    Page,
    Policy,
    ThreadCreated,
)
from .settings import API_URL_ENV, TOKEN_ENV, ClientConfigError
from .sse import SseEvent
from .sync import SyncPage, Treadle

__all__ = [
    "API_URL_ENV",
    "OPERATIONS",
    "TOKEN_ENV",
    "ClientConfigError",
    "TERMINAL",
    "Acknowledged",
    "ApiError",
    "AsyncPage",
    "AsyncTreadle",
    "BadRequest",
    "CheckpointPoint",
    "Conflict",
    "Diff",
    "FileStat",
    "Follow",
    "Forbidden",
    "Forked",
    "Implemented",
    "InvalidRequest",
    "MessageAccepted",
    "NotFound",
    "NotResumable",
    "Page",
    "PayloadTooLarge",
    "Policy",
    "QuotaExceeded",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "SseEvent",
    "SyncPage",
    "ThreadCreated",
    "Treadle",
    "TreadleClient",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "Unreachable",
    "follow",
    "parse_sse",
]
