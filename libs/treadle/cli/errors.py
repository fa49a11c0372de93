"""Failures the CLI expects, and the one line each becomes."""

from __future__ import annotations

import json

from ..client.http import ApiError
from .render import short


class UsageError(Exception):
    """A mistake the user can fix; shown as one line."""


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        if exc.status == 0:
            return f"{exc.message} (is `treadle up` running? --api / TREADLE_API_URL)"
        text = f"{exc.message} ({exc.code}, HTTP {exc.status})"
        problems = exc.details.get("problems") if isinstance(exc.details, dict) else None
        if problems:
            text += ": " + "; ".join(short(json.dumps(p) if not isinstance(p, str) else p, 120) for p in problems)
        return text
    if isinstance(exc, TimeoutError):
        return f"timed out{': ' + str(exc) if str(exc) else ''}"
    return str(exc)
