"""Life of a run: interrupting it (L8), waiting for it to end, and the acknowledgement of a command on a thread."""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from treadle.api import Acknowledged
from treadle.core.commands import Body
from treadle.core.errors import NotFound
from treadle.core.run.commands import InterruptRun
from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.usecases.ids import checked, owner
from treadle.usecases.ports import Caller, CommandBus, ThreadReads
from treadle.views.thread import RunView


async def acknowledged(
    who: Caller, commands: CommandBus, verb: str, thread: str, body: Body, key: str | None
) -> Acknowledged:
    """One command on a thread, answered with its acknowledgement (not its outcome)."""
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb=verb, thread=thread, body=body, idempotency_key=key
    )
    return Acknowledged(
        thread_id=thread, run_id=accepted.run_id, disposition=accepted.disposition or "", seq=accepted.seq
    )


async def interrupt(
    who: Caller,
    commands: CommandBus,
    reads: ThreadReads,
    entity_id: str,
    prefix: Literal["run", "node"],
    key: str | None,
    *,
    allow_destructive: bool = True,
) -> Acknowledged:
    """Ask a run (or the run of a root-turn node) to stop: acknowledged now, interrupted when the provider says."""
    thread = await owner(reads, who.tenant, entity_id, prefix, f"{prefix}_not_found")
    if prefix == "run":
        body = InterruptRun(run_id=entity_id, allow_destructive=allow_destructive)
    else:
        body = InterruptRun(node_id=entity_id, allow_destructive=allow_destructive)
    return await acknowledged(who, commands, "interrupt", thread, body, key)


async def wait(
    who: Caller, reads: ThreadReads, thread: str, run_id: str | None, timeout: float
) -> tuple[RunView | None, int, bool]:
    """(the run, the sequence it reflects, whether it has ended) once it has ended or ``timeout`` passed; the
    thread's latest run without ``run_id``. The run alone is read each time (the projection, polled): a poll
    costs the same however long the thread is. A wait that times out changes nothing."""
    thread = checked(thread, "thr")
    wanted = checked(run_id, "run") if run_id is not None else None
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        run, seq = await reads.run(who.tenant, thread, wanted)
        if wanted is not None and run is None:
            raise NotFound(f"run {wanted} not found", code="run_not_found")
        ended = run is None or run.status in TERMINAL_RUN_STATUSES
        if ended or time.monotonic() >= deadline:
            return run, seq, ended
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.25)
