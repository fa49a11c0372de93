"""Arguments that did not come as a request body (an MCP tool's, a builder's) checked as one would be: the same
constraints, the same typed refusals."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from treadle.api.constraints import violation
from treadle.core.errors import BadRequest

T = TypeVar("T")


def parse(kind: type[T], data: dict[str, Any]) -> T:
    """``data`` as a ``kind``, or the ``BadRequest`` naming the field over its limit (``bad_request`` otherwise)."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        found = violation(exc, kind)
        raise (
            BadRequest(found.message, code=found.code, details=found.details) if found else BadRequest(str(exc))
        ) from None
