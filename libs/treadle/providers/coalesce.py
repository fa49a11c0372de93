"""Text coalescing: raw deltas go live at once; durable deltas are at most one per message per
``interval`` seconds or ``max_bytes`` of text (docs/concepts.md principle 7).

A message's first text is durable at once: a message takes its place in the thread with its first durable
event, so holding its beginning back would let whatever happened after it (a reply that completed within the
interval, a steer) be listed before it."""

from __future__ import annotations

import time
from collections.abc import Callable

INTERVAL = 0.25
MAX_BYTES = 4096


class Coalescer:
    def __init__(
        self, interval: float = INTERVAL, max_bytes: int = MAX_BYTES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval
        self._max_bytes = max_bytes
        self._clock = clock
        self._parts: list[str] = []
        self._size = 0
        self._last = float("-inf")  # nothing flushed yet: the first text goes at once

    @property
    def pending(self) -> bool:
        return bool(self._parts)

    def due_in(self) -> float:
        """Seconds until buffered text may be flushed on time alone."""
        return max(0.0, self._last + self._interval - self._clock())

    def add(self, text: str) -> str | None:
        """Buffer ``text``; return what to flush now, if the size or time budget says so."""
        self._parts.append(text)
        self._size += len(text.encode())
        if self._size >= self._max_bytes or self._clock() - self._last >= self._interval:
            return self.flush()
        return None

    def flush(self) -> str | None:
        if not self._parts:
            return None
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._last = self._clock()
        return text
