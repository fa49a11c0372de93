"""Moving threads off a workspace volume that is gone (``treadle volumes forget``, issue 35).

Each thread whose home is the volume gets a ``thread.moved`` to a volume placed as a new thread would be
(``core.placement``, never the forgotten one), naming the checkpoint its workspace is restored from: its newest
root checkpoint with files. The workspace is hydrated on the new home from the checkpoint archive before the move
is recorded (prepared empty when the thread has no such checkpoint), so the thread's next run finds its files.
Appends are fenced on the thread's last event (another writer first: read again, decide again), so a forget run
twice moves each thread once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
from nats.aio.client import Client as NATS

from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.hydrate import Hydrate
from treadle.core import events as ev
from treadle.core import placement
from treadle.core.checkpoints.model import Checkpoint
from treadle.core.state import ThreadState, fold
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.runtime.volumes import Volumes

HOMES = "treadle.evt.*.*.thread.>"  # thread.created and thread.moved (and the thread's other own events)
TRIES = 5


class Moved(msgspec.Struct, kw_only=True):
    tenant: str
    thread: str
    to_volume: str
    checkpoint_id: str | None


class NoVolumeLeft(Exception):
    """No other live volume can take the threads."""


class StillLive(Exception):
    """The volume still announces itself: its threads are not lost, and moving them would fork their workspace."""


async def homes(log: EventLog) -> dict[tuple[str, str], str]:
    """Every thread's home volume, as its ``thread.created`` and ``thread.moved`` events say."""
    found: dict[tuple[str, str], str] = {}
    for env in await log.read_subject(HOMES):
        if isinstance(env.data, ev.ThreadCreated):
            found[(env.tenant, env.thread)] = env.data.volume
        elif isinstance(env.data, ev.ThreadMoved):
            found[(env.tenant, env.thread)] = env.data.to_volume
    return found


def restore_point(state: ThreadState) -> Checkpoint | None:
    """The checkpoint a moved workspace is restored from: the newest root checkpoint with files."""
    usable = [c for c in state.checkpoints if c.scope == "root" and c.commit is not None and not c.stale]
    return max(usable, key=lambda c: c.ordinal) if usable else None


async def forget(nc: NATS, volume: str, reason: str = "forgotten", actor: str = "operator") -> list[Moved]:
    """Move every thread living on ``volume`` to a placed live volume; what was moved, in thread order. ``actor``:
    who decided it (the operator's command, or the coordinator's watch of lost volumes)."""
    log, volumes, checkpoints = EventLog(nc), Volumes(nc.jetstream(), cache_seconds=0), CheckpointClient(nc)
    snapshot = await volumes.snapshot()
    if any(v.name == volume and v.checkpoints for v in snapshot.volumes):
        raise StillLive(f"volume {volume} still announces a checkpoint service; stop its node before forgetting it")
    moved: list[Moved] = []
    for (tenant, thread), home in sorted((await homes(log)).items()):
        if home != volume:
            continue
        for _ in range(TRIES):
            state = fold(await log.read(tenant, thread))
            if state.thread is None or state.thread.volume != volume:
                break  # moved meanwhile (a forget run twice)
            others = [v for v in snapshot.volumes if v.name != volume]
            to = placement.place(others, snapshot.tenant_threads(tenant))
            if to is None:
                raise NoVolumeLeft(f"no live volume other than {volume} can take its threads")
            point = restore_point(state)
            workspace, point_id = state.thread.workspace, point.id if point else None
            if point is None:
                await checkpoints.prepare(tenant, thread, workspace, volume=to)
            else:
                made = Hydrate(
                    tenant=tenant, thread=thread, workspace=workspace, checkpoint_id=point.id, commit=point.commit
                )
                await checkpoints.hydrate(made, volume=to)
            event = ev.Envelope(
                id=f"evt_{uuid.uuid4().hex}",
                type=ev.ThreadMoved.TYPE,
                tenant=tenant,
                thread=thread,
                at=datetime.now(UTC),
                command_id=f"forget-{volume}-{thread}",
                actor=actor,
                data=ev.ThreadMoved(from_volume=volume, to_volume=to, reason=reason, checkpoint_id=point_id),
            )
            try:
                await log.append(tenant, thread, state.seq, [event])
            except Conflict:
                continue  # the thread moved on: read it again
            volumes.placed(to, tenant)
            snapshot = await volumes.snapshot()
            moved.append(Moved(tenant=tenant, thread=thread, to_volume=to, checkpoint_id=point_id))
            break
    return moved
