"""Run named worker processes, restart them when they crash, and stop them leaving nothing behind.

Used by `treadle up` and by the e2e/chaos tests. Each child runs in its own process group. A graceful
stop (SIGTERM) goes to the child alone: a worker stops what it spawned itself, in order (a provider host
hands its runtimes' runs over before ending them; a runtime signalled behind its back fails its run).
SIGKILL, and whatever is left once the child has exited, goes to the whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import cycle

from ..runtime.children import die_with_parent

log = logging.getLogger(__name__)

BACKOFF_INITIAL = 0.25
BACKOFF_MAX = 10.0
# A child that stayed up this long is considered healthy: its next crash starts the backoff over.
BACKOFF_RESET_AFTER = 30.0
_LINE_LIMIT = 1 << 20


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by `pid`; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def signal_child(pid: int, sig: int) -> None:
    """SIGKILL to the group led by `pid` (nothing of it may survive); any other signal to `pid` alone, which
    passes it on to its own children as it sees fit."""
    if sig == signal.SIGKILL:
        signal_group(pid, sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


_COLOURS = cycle(["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"])


def _default_printer() -> Callable[[str, str], None]:
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    styles: dict[str, str] = {}
    width = 0

    def on_output(name: str, line: str) -> None:
        nonlocal width
        style = styles.setdefault(name, next(_COLOURS))
        width = max(width, len(name))
        console.print(Text.assemble((name.ljust(width), style), " | ", Text.from_ansi(line)))

    return on_output


@dataclass
class _Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    spawns: int = 0
    backoff: float = BACKOFF_INITIAL
    skip_backoff: bool = False
    halted: bool = False  # killed on purpose and left down (a lost machine) until the next start()
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ProcessSupervisor:
    """Keeps a set of named child processes running until `stop()`.

    `env` given to `add()` is layered over this process's environment. A child that exits for any
    reason other than `stop()` is restarted after an exponential backoff.
    """

    def __init__(
        self,
        on_output: Callable[[str, str], None] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self._on_output = on_output or _default_printer()
        self._cwd = cwd
        self._children: dict[str, _Child] = {}
        self._stopping = False

    def add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        if name in self._children:
            raise ValueError(f"process {name!r} already added")
        self._children[name] = _Child(name, list(argv), dict(env or {}))

    async def start(self) -> None:
        """Spawn every child that is not yet running; returns once all of them have been spawned."""
        self._stopping = False
        for child in self._children.values():
            child.halted = False
            if child.task is None or child.task.done():
                await self._spawn(child)
                child.task = asyncio.create_task(self._supervise(child), name=f"supervise:{child.name}")

    def pid(self, name: str) -> int | None:
        proc = self._children[name].proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def restarts(self, name: str) -> int:
        return max(self._children[name].spawns - 1, 0)

    async def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Signal a child (SIGKILL: its process group) and return once that process has exited.

        The supervisor then restarts it like any crashed child (with backoff).
        """
        proc = self._children[name].proc
        if proc is None or proc.returncode is not None:
            return
        signal_child(proc.pid, sig)
        await asyncio.wait_for(proc.wait(), timeout)

    async def halt(self, name: str, timeout: float = 10.0) -> None:
        """SIGKILL a child's group and keep it down, as if its machine were lost; ``start()`` brings it back."""
        child = self._children[name]
        child.halted = True
        child.wake.set()  # a child waiting out a restart backoff stays down too
        await self.kill(name, signal.SIGKILL, timeout)
        if child.task is not None:
            await asyncio.wait_for(asyncio.shield(child.task), timeout)

    async def restart(self, name: str, timeout: float = 10.0) -> None:
        """Stop a child gracefully (SIGTERM, SIGKILL after `timeout`) and start it again at once."""
        child = self._children[name]
        child.skip_backoff = True
        child.wake.set()
        proc = child.proc
        if proc is not None and proc.returncode is None:
            await self._terminate(proc, timeout)

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every child (itself, not its group), SIGKILL the group of whatever is left after `timeout`."""
        self._stopping = True
        children = list(self._children.values())
        for child in children:
            child.wake.set()
        await asyncio.gather(*(self._terminate(c.proc, timeout) for c in children))
        tasks = [c.task for c in children if c.task is not None]
        if tasks:
            # A child spawned while we were signalling the others got SIGTERM from _spawn.
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for child in children:
                if child.task in pending and child.proc is not None:
                    signal_group(child.proc.pid, signal.SIGKILL)
            await asyncio.gather(*tasks, return_exceptions=True)
        for child in children:
            child.task = None

    async def __aenter__(self) -> ProcessSupervisor:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # __aexit__ will not run: do not leave the children already spawned
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _spawn(self, child: _Child) -> None:
        child.proc = await asyncio.create_subprocess_exec(
            *child.argv,
            env={**os.environ, **child.env},
            cwd=self._cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
            limit=_LINE_LIMIT,
        )
        child.spawns += 1
        log.info("started %s (pid %d)", child.name, child.proc.pid)
        if self._stopping:
            signal_child(child.proc.pid, signal.SIGTERM)

    async def _supervise(self, child: _Child) -> None:
        while True:
            proc, started = child.proc, time.monotonic()
            if proc is not None:
                pump = asyncio.create_task(self._pump(child.name, proc.stdout))
                code = await proc.wait()
                # Anything the child left in its group would outlive it and keep the pipe open.
                signal_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(pump, 2.0)
            if self._stopping or child.halted:
                return
            if child.skip_backoff:
                delay, child.backoff = 0.0, BACKOFF_INITIAL
            else:
                if time.monotonic() - started >= BACKOFF_RESET_AFTER:
                    child.backoff = BACKOFF_INITIAL
                delay = child.backoff
                child.backoff = min(delay * 2, BACKOFF_MAX)
                if proc is not None:
                    log.warning("%s (pid %d) exited with %s; restarting in %.2fs", child.name, proc.pid, code, delay)
            child.wake.clear()
            if delay:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(child.wake.wait(), delay)
            child.skip_backoff = False
            if self._stopping or child.halted:
                return
            try:
                await self._spawn(child)
            except OSError:
                log.exception("could not start %s; retrying", child.name)
                child.proc = None

    async def _pump(self, name: str, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # readline has discarded an over-long line; say so and go on
                raw = b"[line longer than 1 MiB dropped]\n"
            if not raw:
                return
            try:
                self._on_output(name, raw.decode(errors="replace").rstrip("\r\n"))
            except Exception:
                log.exception("on_output callback failed for %s", name)

    @staticmethod
    async def _terminate(proc: asyncio.subprocess.Process | None, timeout: float) -> None:
        if proc is None or proc.returncode is not None:
            return
        signal_child(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            log.warning("pid %d ignored SIGTERM for %.1fs; killing its group", proc.pid, timeout)
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        # The leader is gone, but members of its group that ignored SIGTERM may not be.
        signal_group(proc.pid, signal.SIGKILL)
