"""The cyclic garbage collector of a long-running asyncio server."""

from __future__ import annotations

import gc

# Net new container objects between young collections (CPython's default: 700). A young collection walks every
# young object still alive: the coroutines, futures and timers of each request and stream in flight.
YOUNG_COLLECTION_EVERY = 20_000


def settle() -> None:
    """Once the process has started: what exists then (modules, the app and its schemas, the connections) lives
    as long as the process, so it is frozen out of every later collection; and young collections run less often,
    since nearly everything a request makes is freed by reference counting, not by the collector."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])
