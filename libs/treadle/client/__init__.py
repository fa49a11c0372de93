"""Python client of the Treadle HTTP API v1."""

from .http import TERMINAL, ApiError, Follow, SseEvent, TreadleClient, follow, parse_sse

__all__ = ["TERMINAL", "ApiError", "Follow", "SseEvent", "TreadleClient", "follow", "parse_sse"]
