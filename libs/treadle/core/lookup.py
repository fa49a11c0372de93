"""Position indexes over a thread's append-only lists, so a lookup by id costs the same on the thousandth run
as on the first (a reverse scan found the newest entity fast, but an id not there, a new command's dedup
check, or an old run's messages scanned the whole list on every event: bench/run.py scenario F).

The state's lists only grow by ``append``; an index catches up with what was appended since it last looked
and checks what it returns (``key(item) == value``), so a list replaced or shortened (a test, a copy) is
indexed again instead of answered wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Index(Generic[T]):
    """``key(item)`` → position of the newest item with that key."""

    __slots__ = ("_key", "_seen", "_at", "_items")

    def __init__(self, key: Callable[[T], Any]) -> None:
        self._key = key
        self._seen = 0
        self._at: dict[Any, int] = {}
        self._items: list[T] | None = None

    def _catch_up(self, items: list[T]) -> None:
        if items is not self._items or len(items) < self._seen:
            self._items, self._seen, self._at = items, 0, {}
        key, at = self._key, self._at
        for i in range(self._seen, len(items)):
            at[key(items[i])] = i
        self._seen = len(items)

    def position(self, items: list[T], value: Any) -> int | None:
        self._catch_up(items)
        i = self._at.get(value)
        if i is None or self._key(items[i]) == value:
            return i
        self._items = None  # changed in place: index again
        return self.position(items, value)

    def find(self, items: list[T], value: Any) -> T | None:
        i = self.position(items, value)
        return None if i is None else items[i]


class Groups(Generic[T]):
    """``key(item)`` → positions of every item with that key, in list order."""

    __slots__ = ("_key", "_seen", "_at", "_items")

    def __init__(self, key: Callable[[T], Any]) -> None:
        self._key = key
        self._seen = 0
        self._at: dict[Any, list[int]] = {}
        self._items: list[T] | None = None

    def of(self, items: list[T], value: Any) -> list[T]:
        return [items[i] for i in self.positions(items, value)]

    def positions(self, items: list[T], value: Any) -> list[int]:
        if items is not self._items or len(items) < self._seen:
            self._items, self._seen, self._at = items, 0, {}
        key, at = self._key, self._at
        for i in range(self._seen, len(items)):
            at.setdefault(key(items[i]), []).append(i)
        self._seen = len(items)
        out = at.get(value, [])
        if any(key(items[i]) != value for i in out):
            self._items = None
            return self.positions(items, value)
        return out
