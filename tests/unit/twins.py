"""Coordinator and supervisor on the in-memory twins of their ports (treadle.memory): no broker, git or provider
host. The tests hand the workers what their consumers would deliver, in log order, and read the log."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS

from treadle.coordinator.service import RUN_ENDED, Coordinator
from treadle.core import provider_events as pe
from treadle.core.commands import Accepted, Body, Command, Reply
from treadle.core.policy import TenantPolicy
from treadle.core.state import ThreadState, fold
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.eventlog import subjects
from treadle.eventlog.errors import LogError
from treadle.memory import MemoryCheckpoints, MemoryEventLog, MemoryHosts, MemoryVolumes, StoredMessage
from treadle.runtime.consumer import Retryable
from treadle.runtime.settings import CoordinatorSettings, Shared, SupervisorSettings
from treadle.supervisor.service import PARTITION_WAKE_EVENTS, Supervisor

TENANT = "acme"
T0 = datetime(2026, 12, 2, tzinfo=UTC)
_reply = msgspec.json.Decoder(Reply)


def event_filters(types) -> list[str]:
    return [f"treadle.evt.*.*.{t}.*" for t in types]


async def consume(handler, msg, tries: int = 5) -> None:
    """As a PullConsumer handles a message: a log error (an append conflict, say) or a retryable failure is
    retried in place (here without the backoff); anything else reaches the test."""
    for _ in range(tries - 1):
        try:
            return await handler(msg)
        except (LogError, Retryable):
            continue
    await handler(msg)


class DefaultPolicies:
    """Every tenant has the default policy (the real store reads the ``treadle-policies`` bucket)."""

    async def get(self, tenant: str) -> TenantPolicy:
        return TenantPolicy()


class Request:
    """A command as the coordinator's subscription receives it; ``reply`` is what it answered."""

    def __init__(self, subject: str, data: bytes) -> None:
        self.subject, self.data = subject, data
        self.headers: dict[str, str] | None = None  # as a NATS message without headers (the trace context rides there)
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def respond(self, data: bytes) -> None:
        self.reply.set_result(data)


class Twins:
    def __init__(self, tmp_path: Path) -> None:
        self.log, self.checkpoints = MemoryEventLog(), MemoryCheckpoints()
        self.hosts = MemoryHosts(on_disk=self.checkpoints.on_disk)
        self.volumes = MemoryVolumes()
        self.shared = Shared(state_dir=tmp_path)
        self._ids = itertools.count(1)
        self._cursors: dict[tuple[int, str], int] = {}  # a worker's handler -> the last sequence it was given
        self._provider_seq = 0

    def coordinator(self, **settings) -> Coordinator:
        return Coordinator(
            NATS(),
            self.shared,
            CoordinatorSettings(**settings),
            log=self.log,
            checkpoints=self.checkpoints,
            hosts=self.hosts,
            policies=DefaultPolicies(),
            volumes=self.volumes,
        )

    def supervisor(self, **settings) -> Supervisor:
        return Supervisor(
            NATS(),
            self.shared,
            SupervisorSettings(**settings),
            log=self.log,
            checkpoints=self.checkpoints,
            hosts=self.hosts,
        )

    async def command(
        self, coordinator: Coordinator, body: Body, thread: str | None = None, command_id: str | None = None
    ) -> Reply:
        """Through the coordinator's subscription and mailbox, as the gateway sends it."""
        command = Command(
            id=command_id or f"cmd_{next(self._ids)}", tenant=TENANT, user="u", thread=thread, issued_at=T0, body=body
        )
        verb = type(body).__struct_config__.tag.split(".")[1]
        request = Request(subjects.command(TENANT, verb), msgspec.json.encode(command))
        await coordinator._on_command(request)
        return _reply.decode(await request.reply)

    async def deliver(self, handler, types) -> list[StoredMessage]:
        """The events of ``types`` stored since this handler's last delivery, handed to it one by one."""
        key = id(handler.__self__), handler.__name__
        got = self.log.delivered(*event_filters(types), after=self._cursors.get(key, 0))
        for msg in got:
            await consume(handler, msg)
            self._cursors[key] = msg.seq
        return got

    async def run_ended(self, coordinator: Coordinator) -> list[StoredMessage]:
        return await self.deliver(coordinator._on_run_ended, RUN_ENDED)

    async def wake(self, supervisor: Supervisor) -> list[StoredMessage]:
        return await self.deliver(supervisor._on_dispatched, PARTITION_WAKE_EVENTS)

    async def dispatched(self, coordinator: Coordinator, supervisor: Supervisor) -> tuple[str, ThreadState, str]:
        """A new thread's message sent and handed to a provider: (thread, its state after, the run's id)."""
        created = await self.command(coordinator, CreateThread(title="t"))
        sent = await self.command(coordinator, SendMessage(text="go"), thread=created.thread_id)
        assert isinstance(sent, Accepted), sent
        await self.wake(supervisor)
        return created.thread_id, await self.state(created.thread_id), sent.run_id

    async def report(
        self,
        supervisor: Supervisor,
        thread: str,
        session_id: str,
        body: pe.AnyBody,
        *,
        pth: str = "pth_1",
        run_id: str | None = None,
        attempt_id: str | None = None,
        index: int = 0,
        then: list[pe.AnyBody] | None = None,
    ) -> None:
        """A provider event as a host publishes it (``then``: what followed in the same burst), delivered to the
        supervisor."""
        self._provider_seq += 1
        event = pe.ProviderEvent(
            id=f"pev_{self._provider_seq}",
            tenant=TENANT,
            thread=thread,
            session_id=session_id,
            provider_thread_id=pth,
            run_id=run_id,
            attempt_id=attempt_id,
            index=index,
            at=T0,
            body=body,
            then=then or [],
        )
        subject = f"{subjects.provider(TENANT, thread, pth)}.0"
        await consume(
            supervisor._on_provider_event, StoredMessage(self._provider_seq, subject, msgspec.json.encode(event))
        )

    async def play(self, supervisor: Supervisor, thread: str, run_id: str, writes: dict[str, str]) -> None:
        """The run's current attempt plays on the live session: it writes ``writes`` and completes."""
        state = await self.state(thread)
        session, run = state.live_session, state.run(run_id)
        assert session is not None and run is not None and state.thread is not None
        self.checkpoints.files(TENANT, state.thread.workspace).update(writes)
        pth = state.session_thread(session.id)
        for index, body in enumerate([pe.TurnStarted(), pe.TurnCompleted(status="completed")], start=1):
            await self.report(
                supervisor,
                thread,
                session.id,
                body,
                pth=pth.id if pth else "pth_1",
                run_id=run.id,
                attempt_id=run.attempt.id,
                index=index,
            )
        self.hosts.end_turn(session.id, run.attempt.id)

    async def state(self, thread: str) -> ThreadState:
        return fold(await self.log.read(TENANT, thread))
