"""Cancelling tasks so that they end: a task can swallow one cancellation and carry on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

# How long a cancelled task may take to end before it is cancelled again.
AGAIN_SECONDS = 0.5


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel ``tasks`` and return once every one has ended, cancelling again those still running after
    ``AGAIN_SECONDS``. In Python 3.11 ``asyncio.wait_for`` (which nats-py's requests use) returns its result
    instead of raising when the cancellation races the result's arrival, so one ``cancel()`` can be lost."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=AGAIN_SECONDS)
