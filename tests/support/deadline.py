"""A deadline for every async test that pytest-timeout cannot give.

pytest-timeout's SIGALRM handler runs inside uvloop's signal callback, where the exception it raises never
reaches the test: a hung async test hangs the whole suite. Here the test runs as a task of its own; past its
deadline (the `timeout` marker or ini value) the report lists where every task of the loop is waiting, and
the test is cancelled and fails.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from treadle.runtime.cancelling import cancel_and_wait

CANCEL_SECONDS = 10.0  # how long a timed-out test may take to unwind before it is left behind


def seconds_for(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0] if marker and marker.args else item.config.getini("timeout"))


def bounded(test: Callable[..., Awaitable[Any]], seconds: float) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(test)
    async def within_deadline(**kwargs: Any) -> Any:
        task = asyncio.ensure_future(test(**kwargs))
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if done:
            return task.result()
        where = waiting_tasks()
        try:
            await asyncio.wait_for(cancel_and_wait([task]), CANCEL_SECONDS)
        except TimeoutError:
            where += "\n(the test did not end when cancelled)"
        pytest.fail(f"the test did not end within {seconds:g} s; the loop's tasks were waiting at:\n{where}")

    return within_deadline


def waiting_tasks() -> str:
    """Every task of the running loop with the chain of awaits it is suspended in (a task's own stack shows
    only its outermost coroutine)."""
    lines = []
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        lines.append(f"{task.get_name()}:")
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return "\n".join(lines)
