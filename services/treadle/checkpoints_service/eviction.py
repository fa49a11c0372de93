"""The checkpoint service's eviction of idle workspaces (issue 35): a node's disk holds the active threads.

Every ``evict_interval_seconds`` the threads' own workspaces on this volume (``<tenant>/threads/<thread>``) that
this process has not served for ``evict_idle_seconds`` are looked at one by one: the thread's events decide
(core/eviction.py: home here, no run playing or queued, no live session, no event for that long), then the disk
(checkpoints/eviction.py: exactly its last durable checkpoint). The volume's heartbeat is sent again after a
sweep that evicted something, so placement sees the workspaces it no longer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from nats.aio.client import Client as NATS

from treadle.checkpoints import eviction
from treadle.checkpoints.git import Workspaces
from treadle.core import eviction as rules
from treadle.core.ids import is_token
from treadle.core.state import fold
from treadle.eventlog.log import EventLog
from treadle.runtime.volumes import Announcer

log = logging.getLogger(__name__)


class IdleEviction:
    def __init__(
        self,
        nc: NATS,
        workspaces: Workspaces,
        volume: str,
        idle_seconds: float,
        interval_seconds: float,
        announcer: Announcer | None = None,
    ) -> None:
        self._log = EventLog(nc)
        self._ws, self._volume = workspaces, volume
        self._idle, self._interval = idle_seconds, interval_seconds
        self._announcer = announcer
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ckpt-eviction")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)  # the sweep's period, not a synchronisation
            try:
                await self.sweep()
            except Exception:
                log.exception("eviction sweep failed; the next one tries again")

    async def sweep(self) -> list[eviction.Evicted]:
        """Look at every idle workspace of this volume once; what was evicted."""
        evicted: list[eviction.Evicted] = []
        for tenant, thread in await asyncio.to_thread(self._candidates):
            idle = self._ws.idle_for(tenant, rules.own_workspace(thread))
            if idle is not None and idle < self._idle:
                continue  # served lately: its events need not be read

            async def still_needed(tenant: str = tenant, thread: str = thread) -> str | None:
                state = fold(await self._log.read(tenant, thread))
                return rules.refusal(state, self._volume, datetime.now(UTC), self._idle)

            try:
                done = await eviction.evict(self._ws, tenant, thread, still_needed)
            except Exception as exc:  # this workspace stays; the others are still looked at
                log.warning("eviction of %s/%s failed: %r", tenant, thread, exc)
                continue
            if isinstance(done, str):
                log.debug("%s/%s stays: %s", tenant, thread, done)
                continue
            log.info("evicted %s/%s at %s (%d bytes, %d files)", tenant, thread, done.commit, done.bytes, done.files)
            evicted.append(done)
        if evicted and self._announcer is not None:
            await self._announcer.beat()  # the workspaces it holds, now
        return evicted

    def _candidates(self) -> list[tuple[str, str]]:
        """(tenant, thread) of every thread's own workspace on this disk; leftovers of a crashed eviction go."""
        found = []
        root = self._ws._root
        with contextlib.suppress(FileNotFoundError):
            for tenant in os.scandir(root):
                if not is_token(tenant.name) or not tenant.is_dir(follow_symlinks=False):
                    continue
                threads = os.path.join(tenant.path, "threads")
                gitdirs = self._ws._shadow_root / tenant.name / "workspaces"
                for gone in eviction.leftovers(Path(threads)) + eviction.leftovers(gitdirs):
                    shutil.rmtree(gone, ignore_errors=True)
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    for entry in os.scandir(threads):
                        if is_token(entry.name) and entry.is_dir(follow_symlinks=False):
                            found.append((tenant.name, entry.name))
        return sorted(found)
