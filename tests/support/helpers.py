"""Test helpers. `wait_for` is the only sanctioned way to wait for something to happen."""

from __future__ import annotations

import asyncio
import collections
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any


async def wait_for(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    what: str | None = None,
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy, and return that.

    Raises TimeoutError naming the predicate (or `what`) and its last result. Exceptions raised by
    the predicate propagate: a predicate that may fail transiently must catch them itself.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempts = 0
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        attempts += 1
        if result:
            return result
        if loop.time() >= deadline:
            name = what or getattr(predicate, "__qualname__", repr(predicate))
            raise TimeoutError(f"{name} still false after {timeout}s ({attempts} checks); last value: {result!r}")
        await asyncio.sleep(interval)


def quiet(name: str, line: str) -> None:
    """A Stack's ``on_output``: worker output only when it matters (or TREADLE_TEST_VERBOSE is set); the latest
    lines are kept for a failed test's report."""
    if not any(noise in line for noise in _NOISE):
        recent_worker_lines.append(f"{name} | {line}")
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


def checkpoint_git(state_dir: str | os.PathLike[str], tenant: str, thread: str, *args: str) -> str:
    """git on the checkpoints of a thread's own workspace (``threads/<thread>``): they live in the checkpoint
    service's git dir, never in the workspace's ``.git`` (which the agent writes)."""
    import subprocess
    from pathlib import Path

    from treadle.checkpoints.repo import checkpoint_gitdir

    gitdir = checkpoint_gitdir(Path(state_dir) / "shadow", tenant, thread, Path("threads") / thread)
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "--git-dir", str(gitdir), *args], capture_output=True, text=True, check=True
    ).stdout


# The e2e stacks' latest worker lines (noise left out), cleared as each test starts: a failed test's report shows
# them (tests/e2e/conftest.py).
recent_worker_lines: collections.deque[str] = collections.deque(maxlen=150)
_NOISE = ("treadle.runtime.leases", "uvicorn.access")
