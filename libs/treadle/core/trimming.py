"""What a runtime reports is bounded before it is stored. A provider event is one broker message, and the
thread event made from it another: a command's output, a file a tool writes or a model's reply can be larger
than the broker takes, and an event the broker refuses would be retried for ever and hold its run. Such an
event keeps its shape; its longest strings are cut (saying how much was cut) and its longest lists and
objects shortened, until it fits."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)

_encode = msgspec.json.Encoder().encode
MAX_EVENT_BYTES = 256 * 1024  # a body this size, in its envelope, is far inside the broker's 1 MiB
MAX_DEPTH = 16  # deeper values are dropped: nothing a runtime reports nests this far on purpose
FIRST_ITEMS = 1_024
LAST_CHARS = 256  # above every id's length (64): ids are never cut


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters not stored]"


def _trimmed(value: Any, chars: int, items: int, depth: int) -> Any:
    if isinstance(value, str):
        return cut(value, chars)
    if depth >= MAX_DEPTH and isinstance(value, (list, dict)):
        return None
    if isinstance(value, list):
        return [_trimmed(v, chars, items, depth + 1) for v in value[:items]]
    if isinstance(value, dict):
        return {k: _trimmed(v, chars, items, depth + 1) for k, v in list(value.items())[:items]}
    return value


def within(body: T, budget: int) -> T:
    """``body`` itself when its JSON fits in ``budget`` bytes, else a copy cut down until it does (or until
    nothing is left to cut: every string at a few characters, every list and object at one item)."""
    if len(_encode(body)) <= budget:
        return body
    plain, kind = msgspec.to_builtins(body), type(body)
    chars, items = budget, FIRST_ITEMS
    while True:
        smaller = msgspec.convert(_trimmed(plain, chars, items, 0), kind)
        if len(_encode(smaller)) <= budget or chars <= LAST_CHARS:
            return smaller
        chars, items = chars // 2, max(1, items // 2)
