"""Numbers from query strings and headers, parsed to their exact grammar before use: ASCII digits only
(``int()`` also takes ``²``, ``٣``, ``+1``, ``1_0`` and spaces; Litestar's int takes ``1e3``) and within
range (a stream sequence is below 2^63, whatever the client sends)."""

from __future__ import annotations

import re

from .errors import ApiError

MAX_SEQ = 2**63 - 1  # JetStream sequences are uint64; the server refuses a start beyond int64
_DIGITS = re.compile(r"[0-9]{1,19}")


def number(
    value: str | None, name: str, *, low: int = 0, high: int = MAX_SEQ, code: str = "invalid_parameter"
) -> int | None:
    """``value`` as an int in low..high, None when absent, else a typed 400 naming the parameter."""
    if value is None:
        return None
    if _DIGITS.fullmatch(value) is None or not low <= int(value) <= high:
        raise ApiError(
            400,
            code,
            f"{name} must be an integer {low}..{high} in ASCII digits",
            {"parameter": name, "low": low, "high": high},
        )
    return int(value)
