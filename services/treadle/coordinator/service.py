"""The thread coordinator: owns app threads (messages, the run queue, dispatch). It decides *when* a run
starts; the run supervisor decides *how*."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from treadle import ports
from treadle.api.constraints import violation
from treadle.checkpoints.client import CheckpointClient, CheckpointUnavailable
from treadle.core import placement
from treadle.core.commands import Accepted, Command, Rejected
from treadle.core.ctx import Ctx, reaction_ctx, thread_id_for
from treadle.core.decide import decide, require_thread
from treadle.core.errors import DomainError
from treadle.core.events import RUN_ENDING, RunEnded, decode_event
from treadle.core.limits import check_sizes
from treadle.core.lineage.commands import DelegateTask, ForkThread
from treadle.core.lineage.context_sends import wants_context
from treadle.core.requests import answers
from treadle.core.requests.commands import RespondRequest
from treadle.core.rollback import decide as rollback
from treadle.core.state import ThreadState
from treadle.core.thread.commands import CreateThread, DeleteThread
from treadle.core.thread.decide import dispatch_next
from treadle.core.thread.events import ThreadCreated
from treadle.eventlog import nats_patches, subjects, tracing
from treadle.eventlog.errors import Conflict, LogError, Unavailable
from treadle.eventlog.log import EventLog
from treadle.eventlog.store import ThreadStore
from treadle.ops import audit
from treadle.providers import protocol as hp
from treadle.providers.base import Response
from treadle.providers.hosts import HostClient, HostUnavailable
from treadle.providers.registry import CATALOGUE
from treadle.runtime import partitions
from treadle.runtime.consumer import PartitionConsumers, PullConsumer
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.mailbox import Mailboxes
from treadle.runtime.metrics import APPEND_CONFLICTS, COMMANDS
from treadle.runtime.partition_migration import Legacy, unpartitioned_event_types
from treadle.runtime.settings import CoordinatorSettings, Shared
from treadle.runtime.volumes import Volumes
from treadle.usecases.ports import PolicyBook

from .admission import Admission
from .delegations import Delegations
from .erasure import Erasure, ErasureFailed
from .lineage import LineageCommands
from .rollback import Rollbacks
from .volume_loss import WATCHER_PARTITION, VolumeLoss

log = logging.getLogger(__name__)
# A decision made outside the pure core (lineage, answers): the events to append and the receipt.
Decider = Callable[[ThreadState, Command], Awaitable[tuple[list[Any], Accepted]]]

_command_decoder = msgspec.json.Decoder(Command)


class _Tagged(msgspec.Struct):
    type: str = ""


class _Wrapped(msgspec.Struct):
    body: _Tagged = msgspec.field(default_factory=_Tagged)


def _body_tag(data: bytes) -> str | None:
    """The body's tag of a command that failed to decode: which member of ``Body`` its path goes through."""
    try:
        return msgspec.json.decode(data, type=_Wrapped).body.type or None
    except msgspec.DecodeError:
        return None


_encode = msgspec.json.encode
MAX_DECISION_TRIES = 8
DELIVERY_TRIES = 3  # an answer the provider failed to take is offered again this often, then the command's retry
REMEMBERED_ANSWERS = 10_000  # a retry on another replica (or after a restart) asks the host, which takes it as once
RUN_ENDED = RUN_ENDING  # the event types that end a run (their trait ``ends_run``)
RUN_ENDED_DURABLE = "coordinator-run-ended"  # one per partition: "coordinator-run-ended-p3"


class NoVolume(Exception):
    """No volume can take a new thread: the creation is refused (503 ``no_volume``), nothing appended."""


class Coordinator:
    """``log``, ``checkpoints``, ``hosts`` and ``policies``: the ports it works through, over ``nc`` unless
    given (tests pass the in-memory twins of ``treadle.memory``)."""

    def __init__(
        self,
        nc: NATS,
        shared: Shared,
        own: CoordinatorSettings,
        *,
        log: ports.EventLog | None = None,
        checkpoints: ports.CheckpointStore | None = None,
        hosts: ports.HostDirectory | None = None,
        policies: PolicyBook | None = None,
        volumes: ports.VolumeDirectory | None = None,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._store = ThreadStore(log if log is not None else EventLog(nc), "coordinator", own.cache_threads)
        # Addressed per request to the thread's home volume (its thread.created, thread.moved), never to a volume
        # of this process: the coordinator serves every volume.
        self._checkpoints = checkpoints if checkpoints is not None else CheckpointClient(nc, own.checkpoint_timeout)
        self._hosts = hosts if hosts is not None else HostClient(nc, own.host_timeout)
        self._volumes = volumes if volumes is not None else Volumes(self._js)  # where new threads go
        self._lineage = LineageCommands(self._store, self._checkpoints)  # L6, L7
        self._delivered: dict[str, None] = {}  # recent answer commands the provider took: a retry asks nothing
        self._rollbacks = Rollbacks(self._store, self._checkpoints, self._hosts)  # L10.5/L10.6 (rollback.py)
        self._admission = Admission(
            self._js, self._store.log, own, policies
        )  # tenant policy and quotas, checked before any decision
        self._delegations = Delegations(
            self._store, self._checkpoints, self._admission, own, self._decide_and_append
        )  # issue 21
        self._mailboxes = Mailboxes()  # commands and reactions of one thread run one at a time
        self._replies: set[asyncio.Future[None]] = set()  # refusals being sent (held: a task is kept only weakly)
        self._erasure = Erasure(nc, own.checkpoint_timeout)  # a deleted thread's data (L1.4)
        self._volume_lost_seconds = own.volume_lost_seconds
        # Reactions to run ends are thread-keyed: each replica runs them for the partitions it leases.
        # Commands are requests any replica may answer (the queue group); OCC on the log orders them.
        legacy = Legacy(
            ((subjects.EVENTS_STREAM, RUN_ENDED_DURABLE),),
            lambda: self._run_ended(RUN_ENDED_DURABLE, unpartitioned_event_types(*RUN_ENDED)),
        )
        self.work = PartitionedWork(
            nc,
            kind="coordinator",
            replica=shared.replica_name("coordinator"),
            ttl=shared.lease_ttl,
            make=self._partition,
            stream_replicas=shared.stream_replicas,
            legacy=legacy,
        )

    def _run_ended(self, durable: str, filters: list[str]) -> PullConsumer:
        return PullConsumer(
            self._js,
            stream=subjects.EVENTS_STREAM,
            durable=durable,
            filters=filters,
            handle=self._on_run_ended,
            mailboxes=self._mailboxes,
        )

    def _partition(self, partition: int) -> PartitionConsumers | PullConsumer:
        consumer = self._run_ended(
            f"{RUN_ENDED_DURABLE}-p{partition}", partitions.event_types_filters(RUN_ENDED, partition)
        )
        if partition != WATCHER_PARTITION:
            return consumer
        # One replica at a time watches for lost volumes: the holder of this partition's lease.
        return PartitionConsumers([consumer, VolumeLoss(self._nc, self._volume_lost_seconds)])

    async def start(self) -> None:
        await self._admission.start()
        self._sub = await nats_patches.subscribe(self._nc, subjects.COMMANDS_ALL, self._take_command, "coordinator")
        await self.work.start()

    async def stop(self) -> None:
        await self._sub.unsubscribe()
        await self.work.stop()
        try:
            await self._mailboxes.drain(10.0)  # the commands taken before the unsubscribe
        except TimeoutError:
            await self._mailboxes.cancel()
        await self._admission.stop()

    # --- commands ----------------------------------------------------------------------------------

    def _take_command(self, msg: Msg) -> None:
        """A command as the read loop hands it over: into its thread's mailbox, or refused at once."""
        if (refusal := self._admit(msg)) is not None:
            replying = asyncio.ensure_future(msg.respond(refusal))
            self._replies.add(replying)
            replying.add_done_callback(self._replies.discard)

    async def _on_command(self, msg: Msg) -> None:
        if (refusal := self._admit(msg)) is not None:
            await msg.respond(refusal)

    def _admit(self, msg: Msg) -> bytes | None:
        """The command handed to its thread's mailbox (None), or the encoded refusal to answer it with."""
        try:
            command = _command_decoder.decode(msg.data)
            tenant = subjects.token(command.tenant, "tenant")
            if msg.subject.split(".")[2] != tenant:
                raise ValueError("command tenant does not match its subject")
            if isinstance(command.body, CreateThread):
                command.thread = command.thread or thread_id_for(command.id, command.issued_at)
            subjects.token(command.thread or "", "thread")
        except msgspec.ValidationError as exc:  # a field over its limit is refused with its own code
            refused = violation(exc, Command, tag=_body_tag(msg.data))
            reply = Rejected(code=refused.code, message=refused.message, details=refused.details) if refused else None
            return _encode(reply or Rejected(code="bad_request", message=str(exc)))
        except (msgspec.DecodeError, ValueError) as exc:
            return _encode(Rejected(code="bad_request", message=str(exc)))
        self._mailboxes.submit(f"{command.tenant}.{command.thread}", lambda: self._traced_command(msg, command))
        return None

    async def _traced_command(self, msg: Msg, command: Command) -> None:
        with tracing.nats_span(
            f"command {type(command.body).__name__}",
            msg.subject,
            "process",
            msg.headers,
            kind="server",
            extra={"treadle.tenant": command.tenant},
        ):
            await self._handle_command(msg, command)

    async def _handle_command(self, msg: Msg, command: Command) -> None:
        verb = type(command.body).__name__
        try:
            if isinstance(command.body, RespondRequest):
                reply = await self._answer(command)
            elif isinstance(command.body, (ForkThread, DelegateTask)):
                reply = await self._decide_and_append(command)  # decided by LineageCommands / Delegations, fenced
            elif wants_context(command):
                reply = await self._decide_and_append(command, self._lineage.send)
            elif isinstance(command.body, DeleteThread):
                reply = await self._delete(command)
            else:
                reply = await self._decide_and_append(command)
        except Exception:
            # A bug must not leave the gateway re-sending the command until its timeout: answer at once.
            log.exception("command %s (%s) failed", command.id, verb)
            reply = Rejected(code="internal", message="internal error", status=500)
        COMMANDS.labels(verb, "rejected" if isinstance(reply, Rejected) else "accepted").inc()
        await msg.respond(_encode(reply))

    async def _decide_and_append(self, command: Command, decider: Decider | None = None) -> Accepted | Rejected:
        if not self._admission.creates_thread(command):
            return await self._decide_and_append_admitted(command, decider)
        async with self._admission.creation_lock(command.tenant):  # counted and appended one at a time
            return await self._decide_and_append_admitted(command, decider)

    async def _decide_and_append_admitted(
        self, command: Command, decider: Decider | None = None
    ) -> Accepted | Rejected:
        tenant, thread = command.tenant, command.thread or ""
        tenant_policy = None
        # A pure decision may first be made on the cache (see ``_cached``); only one that is appended counts.
        pure = decider is None and not isinstance(command.body, (ForkThread, DelegateTask))
        tries = 0
        home: str | None = None  # a new thread's volume, placed once: a try after a conflict keeps the workspace
        while tries < MAX_DECISION_TRIES:
            ctx = Ctx.for_command(command, CATALOGUE)
            state = self._cached(tenant, thread) if pure else None
            pure = False  # once: after a conflict or an answer without an append, the log is read
            on_cache = state is not None
            tries += not on_cache
            try:
                if state is None:
                    state = await self._store.refresh(tenant, thread)
                check_sizes(command.body)  # every decider, whatever reached the broker
                require_thread(state, command)  # before any decider: they may rely on the thread being there
                fence = None
                if self._admission.guards(command):
                    tenant_policy = tenant_policy or await self._admission.policy(tenant, command.policy_revision)
                    fence = await self._admission.check(tenant_policy, state, command)
                if isinstance(command.body, CreateThread) and state.thread is None:
                    ctx.home = home = home or await self._place(tenant)
                if isinstance(command.body, ForkThread):
                    events, receipt = await self._lineage.fork(state, command, fence)
                elif isinstance(command.body, DelegateTask):
                    events, receipt = await self._delegations.delegate(state, command, fence)
                elif decider is not None:
                    events, receipt = await decider(state, command)
                else:
                    events, receipt = decide(state, command, ctx)
                if not events:
                    if on_cache:
                        continue  # an answer that appends nothing is fenced by nothing: decide it on the log
                    return await self._rollbacks.after(tenant, thread, state, command, receipt)
                if isinstance(command.body, CreateThread):
                    created = events[0]
                    assert isinstance(created, ThreadCreated)  # a thread's creation is its first event
                    await self._checkpoints.prepare(tenant, thread, created.workspace, volume=created.volume)
                receipt.seq = await self._store.append(
                    tenant,
                    thread,
                    state,
                    events,
                    ids=ctx.ids,
                    at=ctx.now,
                    command_id=command.id,
                    actor=ctx.actor,
                    fence=fence if isinstance(command.body, CreateThread) else None,
                )
                if fence is not None and isinstance(command.body, CreateThread):
                    self._admission.created(tenant, fence, receipt.seq)  # its one event: the new last creation
                if home is not None and isinstance(command.body, CreateThread):
                    self._volumes.placed(home, tenant)
                return await self._rollbacks.after(tenant, thread, state, command, receipt)
            except DomainError as exc:
                if on_cache:
                    continue  # a refusal is fenced by nothing either
                return Rejected(code=exc.code, message=exc.message, status=exc.status, details=exc.details)
            except CheckpointUnavailable as exc:
                return Rejected(code="unavailable", message=str(exc), status=503)
            except NoVolume as exc:
                return Rejected(code="no_volume", message=str(exc), status=503)
            except Conflict:
                APPEND_CONFLICTS.labels("coordinator").inc()  # stale cache or a retried command: reload, decide again
            except Unavailable as exc:
                log.warning("append unavailable for %s: %s", command.id, exc)
            except LogError as exc:
                return Rejected(code="unavailable", message=str(exc), status=503)
        return Rejected(code="busy", message="the thread is busy; retry", status=503)

    async def _delete(self, command: Command) -> Accepted | Rejected:
        """The tombstone first (the thread is gone for every reader and command from then on), then the erasure
        of its data; a repeated delete finds the tombstone and erases again, resuming a stopped erasure."""
        reply = await self._decide_and_append(command)
        if isinstance(reply, Rejected):
            return reply
        try:
            state = await self._store.refresh(command.tenant, reply.thread_id)
            assert state.thread is not None and state.thread.deleted  # nothing but a delete follows a tombstone
            await self._erasure.erase(command.tenant, state.thread, reply.seq)
            # Once erased, each time (a repeat says so): a record lost to a failure here is made by the retry.
            details = {"tombstone_seq": reply.seq, "repeated": reply.duplicate}
            await audit.record(
                self._js,
                tenant=command.tenant,
                action="thread.deleted",
                target=reply.thread_id,
                actor=command.user,
                details=details,
            )
        except (ErasureFailed, LogError, NatsError) as exc:
            return Rejected(code="erasure_incomplete", message=str(exc), status=503)
        self._store.forget(command.tenant, reply.thread_id)
        return reply

    async def _place(self, tenant: str) -> str:
        """The home of a new thread of ``tenant``: a live volume with room, the tenant's threads spread
        (core/placement.py, on what the volumes announce: runtime/volumes.py)."""
        try:
            snapshot = await self._volumes.snapshot()
        except (NatsError, TimeoutError) as exc:  # the broker away a moment: retryable, like a silent service
            raise CheckpointUnavailable(f"the workspace volumes could not be read: {exc!r}") from None
        home = placement.place(snapshot.volumes, snapshot.tenant_threads(tenant))
        if home is None:
            raise NoVolume(
                "no workspace volume can take a new thread now (none has a live checkpoint service and provider "
                "host, or every one is draining); retry once a workspace node is up"
            )
        return home

    def _cached(self, tenant: str, thread: str) -> ThreadState | None:
        """The cached state of an idle thread, to decide a command on without reading the log first. While a run
        is under way the supervisor appends to the thread, so its cache is behind and a send decided on it
        would conflict; once it ended, the run-ended reaction brought the cache up to that end (``through``).
        A cache that is behind after all (another replica appended) makes the append conflict."""
        state = self._store.trusted(tenant, thread)
        if state is None or state.active_run_id is not None or state.queue:
            return None
        return state

    async def _answer(self, command: Command) -> Accepted | Rejected:
        """L11.2/L11.3: decided by ``treadle.core.requests.answers``. The answer is recorded first, then delivered to
        the live callback on the host holding the session: a provider that ends its turn as soon as it has the
        answer must find the request answered, not close it as cancelled. What the host's reply leaves to record
        (the request pending again, or ``not_resumable``) is recorded after it, then the command refused."""
        effects: list[answers.DeliverAnswer] = []
        reply = await self._decide_and_append(command, partial(self._record_answer, effects))
        if isinstance(reply, Rejected) or not effects or command.id in self._delivered:
            return reply
        again = reply.duplicate
        for _ in range(DELIVERY_TRIES):
            outcome = await self._deliver(effects[0])
            settled = answers.settle(outcome, again=again)
            if settled.retry is None:
                break
            log.warning("answer %s: %s", command.id, settled.retry)
        if outcome.status == "accepted":
            self._delivered[command.id] = None
            while len(self._delivered) > REMEMBERED_ANSWERS:
                del self._delivered[next(iter(self._delivered))]
        if settled.error is not None and (failed := await self._record_after(command, outcome, again)) is not None:
            return failed
        if settled.retry is not None:
            return Rejected(code="unavailable", message=settled.retry, status=503)
        if (error := settled.error) is not None:
            return Rejected(code=error.code, message=error.message, status=error.status, details=error.details)
        return reply

    async def _record_after(self, command: Command, outcome: answers.Delivered, again: bool) -> Rejected | None:
        """Append what the host's reply leaves to record (``answers.after``) on the thread as it is now. Its ids
        are seeded apart from the answer's record, which took the command's (the log drops an event id twice)."""
        tenant, thread = command.tenant, command.thread or ""
        ctx = reaction_ctx(f"{command.id}|delivery", command.issued_at, "coordinator")
        for _ in range(MAX_DECISION_TRIES):
            try:
                state = await self._store.refresh(tenant, thread)
                events = answers.after(state, command, outcome, again=again)
                if events:
                    await self._store.append(
                        tenant, thread, state, events, ids=ctx.ids, at=ctx.now, command_id=command.id, actor=ctx.actor
                    )
                return None
            except Conflict:
                APPEND_CONFLICTS.labels("coordinator").inc()
            except (Unavailable, LogError) as exc:
                return Rejected(code="unavailable", message=str(exc), status=503)
        return Rejected(code="busy", message="the thread is busy; retry", status=503)

    async def _record_answer(
        self, effects: list[answers.DeliverAnswer], state: ThreadState, command: Command
    ) -> tuple[list[Any], Accepted]:
        """The decider of an answer: its record (appended by the caller) and, in ``effects``, its delivery. A
        request whose callback is gone is recorded ``not_resumable`` here, then refused."""
        decision = answers.decide(state, command)
        effects[:] = decision.effects  # decided again after an append conflict: the last decision counts
        if (refusal := decision.refusal) is not None:
            assert state.thread is not None
            await self._store.append(
                command.tenant,
                state.thread.id,
                state,
                refusal.events,
                ids=Ctx.for_command(command).ids,
                at=command.issued_at,
                command_id=command.id,
                actor=refusal.actor,
            )
            raise refusal.error
        return decision.events, decision.receipt

    async def _deliver(self, effect: answers.DeliverAnswer) -> answers.Delivered:
        response = Response(decision=effect.decision, answers=effect.answers, message=effect.message)  # type: ignore[arg-type]  # requests.answerable checked it is one of the four
        request = hp.Respond(session_id=effect.session_id, request_id=effect.request_id, response=response)
        try:
            reply = await self._hosts.verb(effect.host_id, "request.respond", request)
        except HostUnavailable:
            return answers.Delivered(status="gone")
        if isinstance(reply, hp.TurnAccepted):
            return answers.Delivered(status="accepted")
        if reply.code == "provider_error":
            return answers.Delivered(status="failed", message=reply.message)
        if reply.code == "bad_request":
            return answers.Delivered(status="refused", message=reply.message)
        return answers.Delivered(status="gone", message=f"{reply.code}: {reply.message}")

    # --- reactions ---------------------------------------------------------------------------------

    async def _on_run_ended(self, msg: Msg) -> None:
        """L3.6: when a run ends, the next queued run of its thread starts — after the rollback that was
        waiting for this run to end (rollback_active, or a rollback asked to interrupt first)."""
        tenant, thread, _ = subjects.parse_event_subject(msg.subject)
        seq = msg.metadata.sequence.stream
        # Not the cache alone: a command answered by another replica may have queued a run since. ``through``
        # reads the log only when the cache is not contiguous up to this event.
        state = await self._store.through(tenant, thread, msg)
        ended = decode_event(msg.data, seq).data
        if isinstance(ended, RunEnded):
            await self._delegations.on_run_ended(tenant, state, ended)  # a task's result, a cascade
        pending = rollback.pending(state)
        if pending is not None and not rollback.waiting(state, pending):
            await self._rollbacks.carry_out(tenant, thread, state, pending)  # it dispatches the queue's head
            return
        events = dispatch_next(state)
        if not events:
            return
        ctx = reaction_ctx(f"dispatch|{tenant}|{thread}|{seq}", datetime.now(UTC), "coordinator")
        try:
            await self._store.append(
                tenant, thread, state, events, ids=ctx.ids, at=ctx.now, command_id=f"evt-{seq}", actor=ctx.actor
            )
        except Conflict:
            APPEND_CONFLICTS.labels("coordinator").inc()
            raise
