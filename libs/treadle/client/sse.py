"""The Server-Sent Events the gateway speaks, parsed line by line without I/O (the async and the sync client
feed it), and the bookkeeping of a stream that resumes by itself: the last durable id seen and the backoff."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FIRST_DELAY, MAX_DELAY = 0.1, 2.0


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event. ``id`` is the stream sequence of a durable event, None for live deltas."""

    id: int | None
    event: str
    data: bytes

    @property
    def seq(self) -> int | None:
        return self.id

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """The subset of the SSE wire format the gateway speaks: id, event and (multi-line) data fields, comments."""

    def __init__(self) -> None:
        self._id: int | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        """The event a line completes (a blank line ends one), else None."""
        if line == "":
            done = SseEvent(self._id, self._event or "message", "\n".join(self._data).encode()) if self._data else None
            # Only durable events carry an id, so it must not leak into the live delta that follows.
            self._id, self._event, self._data = None, "", []
            return done
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = int(value) if value.isdigit() else None
        return None


def stream_headers(last_id: int | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if last_id:
        headers["Last-Event-ID"] = str(last_id)
    return headers


class Resume:
    """Where a resuming stream stands: ``last_id``, the id of the last durable event handed out (what the next
    connection asks after), and how long to wait before reconnecting."""

    def __init__(self, after: int | None, *, live: bool) -> None:
        self.last_id, self.live, self.delay = after or 0, live, FIRST_DELAY

    def accept(self, event: SseEvent) -> bool:
        """Whether to hand ``event`` out: durable events once each (a reconnect replays none twice), live
        deltas only when asked for."""
        self.delay = FIRST_DELAY  # the connection works again
        if event.id is None:
            return self.live
        if event.id <= self.last_id:
            return False
        self.last_id = event.id
        return True

    def backoff(self) -> float:
        """Seconds to wait before the next reconnect (doubling up to MAX_DELAY)."""
        delay, self.delay = self.delay, min(self.delay * 2, MAX_DELAY)
        return delay
