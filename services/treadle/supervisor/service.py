"""The run supervisor: owns runs, attempts, execution nodes and the finalization barrier. It hands
dispatched runs to provider hosts and folds what the providers report into the thread's events."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from treadle import ports
from treadle.checkpoints.client import CheckpointClient, CheckpointUnavailable
from treadle.checkpoints.hydrate import Hydrate
from treadle.checkpoints.protocol import Capture, Captured, CheckpointError
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.checkpoints import child_scopes
from treadle.core.ctx import Ctx, reaction_ctx
from treadle.core.lineage import start_context
from treadle.core.provider_events import ProviderEvent, provider_event_decoder
from treadle.core.providers import settings as provider_settings
from treadle.core.providers.model import ProviderCapabilities, ProviderSession
from treadle.core.run import recovery
from treadle.core.run import supervision as sv
from treadle.core.run.model import Run
from treadle.core.state import ThreadState, provider_cause
from treadle.eventlog import subjects
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.eventlog.store import ThreadStore
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient, HostGone
from treadle.providers.registry import CATALOGUE
from treadle.runtime import partitions
from treadle.runtime.consumer import Later, PartitionConsumers, PullConsumer, Retryable
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.mailbox import Mailboxes
from treadle.runtime.metrics import APPEND_CONFLICTS, CHECKPOINT_SECONDS, RUN_DURATION, RUNS_HELD
from treadle.runtime.partition_migration import UNPARTITIONED_PROVIDER, Legacy, unpartitioned_event_types
from treadle.runtime.settings import Shared, SupervisorSettings

from .capacity import FreedCapacity, Ticket
from .child_checkpoints import with_child_checkpoints
from .first_session import creation_hint, first_session_id
from .summariser import ProviderSummariser
from .warm_workspaces import WarmWorkspaces

log = logging.getLogger(__name__)
ACTOR = "supervisor"
MAX_PLACEMENTS = 3
HOLD_CODES = ("capacity", "tenant_quota", "sandbox_unavailable")  # hosts' refusals a run waits out, its reason shown
# Refusals no retry of the same placement can change (a provider no host runs, a request the host cannot take, a
# misconfigured runtime home): the run fails with the host's reason instead of being retried for ever.
REFUSED_CODES = ("unknown_provider", "bad_request")
LAST_WORDS = 64  # at most this many earlier messages of a provider thread read back before judging a stop
# Thread events that may leave the supervisor something to do: a run to hand over, a steer or interrupt to send,
# a run held on a lost volume to place on the thread's new home (thread.moved).
WAKE_EVENTS = ("run.queued", "run.dispatched", "run.steered", "interrupt.requested", "thread.moved")
# A new thread's first runtime is launched ahead (first_session.py); the legacy durables keep their filters.
PARTITION_WAKE_EVENTS = (*WAKE_EVENTS, "thread.created")


def _observe_end(run: Run | None) -> None:
    """A run the fold just ended counts in the run-duration histogram."""
    if run is not None and run.ended_at is not None:
        RUN_DURATION.labels(run.status).observe((run.ended_at - run.queued_at).total_seconds())


class Supervisor:
    """``log``, ``checkpoints`` and ``hosts``: the ports it works through, over ``nc`` unless given (tests pass
    the in-memory twins of ``treadle.memory``)."""

    def __init__(
        self,
        nc: NATS,
        shared: Shared,
        own: SupervisorSettings,
        *,
        log: ports.EventLog | None = None,
        checkpoints: ports.CheckpointStore | None = None,
        hosts: ports.HostDirectory | None = None,
    ) -> None:
        js = nc.jetstream()
        self._store = ThreadStore(log if log is not None else EventLog(nc), ACTOR, own.cache_threads)
        # Addressed per request to the thread's home volume (``Thread.volume``, folded from its own events, so a
        # replica that takes a thread over after a crash addresses the same volume): the supervisor serves all.
        self._checkpoints = checkpoints if checkpoints is not None else CheckpointClient(nc, own.checkpoint_timeout)
        self._hosts = hosts if hosts is not None else HostClient(nc, own.host_timeout)
        self._summariser = ProviderSummariser.configured(self._hosts, own)  # L5.5; None: the local one alone
        self._handoff_reasoning = own.handoff_reasoning  # whether handoffs carry the models' reasoning
        self._freed = FreedCapacity(nc)
        self._recheck = own.capacity_recheck_seconds
        self._closing = asyncio.Event()  # held runs stop waiting: their messages go to the next owner
        self._js = js
        self._mailboxes = Mailboxes()  # dispatches and provider events of one thread are handled one at a time
        self._warm_workspaces = WarmWorkspaces(own.cache_threads)  # workspaces a warm turn need not hydrate
        # Each replica consumes the partitions it leases; one lease covers both consumers of a partition, so
        # a thread's dispatches and provider events are never handled by two replicas at once.
        legacy = Legacy(
            ((subjects.EVENTS_STREAM, "supervisor-dispatch"), (subjects.PROVIDER_STREAM, "supervisor-provider")),
            lambda: self._consumers("", unpartitioned_event_types(*WAKE_EVENTS), UNPARTITIONED_PROVIDER),
        )
        self.work = PartitionedWork(
            nc,
            kind="supervisor",
            replica=shared.replica_name("supervisor"),
            ttl=shared.lease_ttl,
            make=self._partition,
            stream_replicas=shared.stream_replicas,
            legacy=legacy,
        )

    def _consumers(self, suffix: str, dispatch: list[str], provider: str) -> PartitionConsumers:
        return PartitionConsumers(
            [
                PullConsumer(
                    self._js,
                    stream=subjects.EVENTS_STREAM,
                    durable=f"supervisor-dispatch{suffix}",
                    filters=dispatch,
                    handle=self._on_dispatched,
                    mailboxes=self._mailboxes,
                ),
                PullConsumer(
                    self._js,
                    stream=subjects.PROVIDER_STREAM,
                    durable=f"supervisor-provider{suffix}",
                    filters=[provider],
                    handle=self._on_provider_event,
                    mailboxes=self._mailboxes,
                ),
            ]
        )

    def _partition(self, partition: int) -> PartitionConsumers:
        # Another replica may have held this partition and written to its threads since they were cached here.
        count = self.work.partitions
        self._store.distrust(lambda tenant, thread: partitions.partition_of(thread, count) == partition)
        return self._consumers(
            f"-p{partition}",
            partitions.event_types_filters(PARTITION_WAKE_EVENTS, partition),
            partitions.provider_filter(partition),
        )

    async def start(self) -> None:
        await self._freed.start()
        await self.work.start()

    async def stop(self) -> None:
        self._closing.set()
        await self.work.stop()
        await self._freed.stop()

    # --- handlers ----------------------------------------------------------------------------------

    async def _on_dispatched(self, msg: Msg) -> None:
        """A run was queued (maybe dispatched with it) or dispatched: hand it over if the state says so. A thread
        was created: its first session's runtime may start now."""
        tenant, thread, kind = subjects.parse_event_subject(msg.subject)
        state = await self._store.through(tenant, thread, msg)
        if kind == "thread.created":  # its runs are handed over on their own messages
            if (hint := creation_hint(state)) is not None:
                assert state.thread is not None
                await self._hosts.warm(hint, volume=state.thread.volume)
            return
        await self._hand_over(tenant, thread, state, f"dispatch|{msg.metadata.sequence.stream}")

    async def _on_provider_event(self, msg: Msg) -> None:
        event = provider_event_decoder.decode(msg.data)
        if msg.subject.split(".")[2:4] != [event.tenant, event.thread]:  # never act on another thread's behalf
            raise msgspec.ValidationError(f"provider event of {event.tenant}/{event.thread} on {msg.subject}")
        tenant, thread = event.tenant, event.thread
        seq = msg.metadata.sequence.stream
        state = await self._store.load(tenant, thread)
        parts = event.parts()
        if seq < state.provider_seq or (seq == state.provider_seq and len(parts) == 1):
            # Folded in already (a redelivery, or a retry after the hand-over below failed): only the
            # hand-over may still be owed, e.g. a recovery attempt whose host was not back yet. Of a message of
            # several events, those folded in are ignored by their index below (a crash between two of them).
            await self._hand_over(tenant, thread, state, f"prov|{seq}")
            return
        if isinstance(event.body, pe.SessionStopped):
            state = await self._fold_last_words(tenant, thread, state, msg.subject, seq, event.session_id)
        i = 0
        while i < len(parts):
            state, taken = await self._fold(tenant, thread, state, seq, parts[i], parts[i + 1 :])
            i += taken
        await self._hand_over(tenant, thread, state, f"prov|{seq}")

    async def _fold_last_words(
        self, tenant: str, thread: str, state: ThreadState, subject: str, seq: int, session_id: str
    ) -> ThreadState:
        """L9.3: a stop is judged after what its session said before it. After a supervisor crash the stop can
        come before the session's earlier events (the crashed one had those in hand, unacknowledged: they come
        back only once their ack wait ends). Judged first, a turn that ended before its host died counted as a
        lost attempt, its end was then dropped as folded, and the run played again (3 such: the run failed). So
        the stopped session's events still unfolded ahead of the stop are read from the stream and folded first."""
        run = state.active_run
        if run is None or run.terminal or run.attempt.status != "running" or run.attempt.session_id != session_id:
            return state  # the stop costs no attempt: nothing to settle first
        start = state.provider_seq + 1
        if start >= seq:
            return state  # it follows the last message folded: nothing can lie between
        for _ in range(LAST_WORDS):
            try:
                raw = await self._js.get_msg(subjects.PROVIDER_STREAM, start, subject=subject, next=True)
            except NotFoundError:
                break
            except NatsError as exc:
                raise Retryable(f"could not read the provider thread before a stop: {exc!r}") from exc
            if raw.seq is None or raw.seq >= seq:
                break
            earlier = provider_event_decoder.decode(raw.data or b"")
            if (
                earlier.session_id == session_id
                and earlier.index
                and earlier.tenant == tenant
                and earlier.thread == thread
            ):
                try:
                    for part in earlier.parts():
                        state, _ = await self._fold(tenant, thread, state, raw.seq, part)
                except Later:  # it waits for an earlier one still: the stop is judged on what is folded
                    break
            start = raw.seq + 1
        return state

    async def _fold(
        self,
        tenant: str,
        thread: str,
        state: ThreadState,
        seq: int,
        event: ProviderEvent,
        rest: Sequence[ProviderEvent] = (),
    ) -> tuple[ThreadState, int]:
        """Fold one provider event (one part of message ``seq``) into the thread; returns the state after it, and
        how many parts it folded, the parts after it (``rest``) included: a turn's end right after its last
        message's completion is one event (``RunEnded.message``), and so is a turn's start with its end (and that
        completion) when the provider reported them together (``RunEnded.started``), and a turn's start with its
        first text (``MessageDelta.started``)."""
        ctx = reaction_ctx(event.id, datetime.now(UTC), ACTOR)
        reaction = sv.react(state, event, ctx)
        if reaction.wait or (reaction is sv.IGNORE and _cache_may_be_behind(state, event)):
            # The cache may be behind the log (another writer, or the replica that held this partition before,
            # appended since): read it once before waiting, or before dropping the event.
            state = await self._store.refresh(tenant, thread)
            reaction = sv.react(state, event, ctx)
        if reaction.wait:
            raise Later(f"provider event {event.index} of {event.attempt_id} is ahead of its turn's earlier events")
        if (both := sv.started_and_ended(state, reaction, event, rest)) is not None:
            state = await self._end_with(tenant, thread, state, seq, both.end, both.message, ctx, both.started)
            return state, both.parts
        if (opened := sv.started_with_text(state, reaction, event, rest)) is not None:
            text = rest[0]  # the causation names the text's index: after a crash both come back, or neither
            causation = provider_cause(seq, text.index, text.attempt_id or "")
            await self._append(tenant, thread, state, [opened], ctx, causation_id=causation)
            return state, 2
        if rest and (carried := sv.carried_message(state, reaction, rest[0])) is not None:
            return await self._end_with(tenant, thread, state, seq, rest[0], carried, ctx), 2
        events = await with_child_checkpoints(
            self._checkpoints, state, state.run(event.run_id or ""), list(reaction.events), ctx
        )
        run = state.run(reaction.run_id or "") if reaction.finalize is not None else None
        if run is not None and reaction.finalize is not None:
            if sv.restarts(state, run, reaction.finalize):
                events += sv.restart(state, run, ctx)
            else:
                status = sv.turn_status(state, run, reaction.finalize)
                events += sv.finalize(state, run, reaction.finalize, await self._capture(state, run, ctx, status), ctx)
        if events:
            await self._append(
                tenant,
                thread,
                state,
                events,
                ctx,
                causation_id=provider_cause(seq, event.index, event.attempt_id or ""),
            )
        _observe_end(run)
        return state, 1

    async def _end_with(
        self,
        tenant: str,
        thread: str,
        state: ThreadState,
        seq: int,
        end: ProviderEvent,
        carried: ev.MessageCompleted | None,
        ctx: Ctx,
        started: ev.RunStarted | None = None,
    ) -> ThreadState:
        """The run's end (provider event ``end``) carrying its last message's completion and maybe its start, all
        folded at once: the causation names ``end``'s index, so after a crash they come back together or not at
        all (the provider message's parts before the end are then folded already: ignored by their index)."""
        assert isinstance(end.body, pe.TurnCompleted)
        run = state.run(end.run_id or "")
        assert run is not None  # ``carried_message`` / ``started_and_ended`` found it
        status = sv.turn_status(state, run, end.body)
        capture = await self._capture(state, run, ctx, status, started.session_id if started is not None else None)
        events = sv.finalize(state, run, end.body, capture, ctx, carried=carried, started=started)
        causation = provider_cause(seq, end.index, end.attempt_id or "")
        await self._append(tenant, thread, state, events, ctx, causation_id=causation)
        _observe_end(run)
        return state

    # --- steps -------------------------------------------------------------------------------------

    async def _append(
        self,
        tenant: str,
        thread: str,
        state: ThreadState,
        events: list[ev.Payload],
        ctx: Ctx,
        causation_id: str | None = None,
    ) -> None:
        if state.thread is not None and state.thread.deleted:
            return  # a deleted thread's log is its tombstone alone: a session reaped after it is not recorded
        try:
            await self._store.append(
                tenant,
                thread,
                state,
                events,
                ids=ctx.ids,
                at=ctx.now,
                command_id=causation_id or ctx.ids.next("cmd"),
                actor=ACTOR,
                causation_id=causation_id,
            )
        except Conflict:
            APPEND_CONFLICTS.labels(ACTOR).inc()  # the consumer retries the message on a fresh state
            raise

    async def _hand_over(self, tenant: str, thread: str, state: ThreadState, seed: str) -> None:
        """Give the active run's pending attempt to a provider: baseline checkpoint (L10.1), a live session
        with its provider thread (L1.2, resumed after a loss per L9.3), then the turn. Idempotent: hosts
        ignore a turn they already play, and every step is skipped once the state shows it done."""
        placement, holds = 0, 0
        while placement < MAX_PLACEMENTS:
            run = sv.pending_attempt(state)
            if run is None:
                return await self._follow_through(tenant, thread, state, seed)
            ctx = reaction_ctx(
                f"{seed}|{run.attempt.id}|{placement}" + (f"|h{holds}" if holds else ""), datetime.now(UTC), ACTOR
            )
            placement += 1
            if run.attempt.interrupt is not None:  # interrupted before any provider saw it (L8)
                turn = pe.TurnCompleted(status="interrupted")
                capture = await self._capture(state, run, ctx, "interrupted")
                await self._append(tenant, thread, state, sv.finalize(state, run, turn, capture, ctx), ctx)
                continue
            # Each step is a fact of its own, appended alone: a crash between them resumes at the next step.
            ordinal = sv.baseline_ordinal(state, run)
            # A new thread's first session: its runtime starts on a host while the steps below run (its id is the
            # first of this step's, so a redelivery names the same session and finds it placed or warm).
            session_id = await self._warm(state, run, ctx) if ordinal is not None else None
            if ordinal is not None:
                await self._append(tenant, thread, state, [await self._capture_baseline(state, run, ordinal, ctx)], ctx)
            if start_context.needs_context(state, run):  # L5/L6/L7: resolve the run's context before any provider work
                resolved = await self._resolve_start_context(tenant, state, run, ctx)
                if resolved:
                    await self._append(tenant, thread, state, resolved, ctx)
                    if run.terminal:
                        continue  # an unresolvable transfer failed the run
            assert state.thread is not None  # a thread with a pending attempt was created
            ticket = self._freed.ticket(state.thread.volume, tenant)
            try:
                unhydrated = await self._hydrate(state, run)
            except CheckpointUnavailable as exc:
                # The home's checkpoint service does not answer (its node lost?): the run waits like one no host
                # can take, woken by the node's return (its hosts' freed signal) or by the thread's move elsewhere.
                gone = hp.HostFailure(code="capacity", message=f"the workspace volume does not answer: {exc}")
                held = await self._hold(tenant, thread, state, run, gone, ticket, ctx)
                if held is None:
                    return
                state = held
                placement, holds = placement - 1, holds + 1
                continue
            if not start_context.session_fits(state, run):
                if self._closing.is_set():
                    # The whole stack may be stopping: a session placed now lands on a host about to stop, and
                    # the run loses one more attempt. The next owner of this message places it.
                    raise Retryable(f"run {run.id} is placed by the next supervisor; this one stops")
                placed = await self._place(state, run, ctx, session_id)
                if isinstance(placed, hp.HostFailure) and placed.code in HOLD_CODES:
                    held = await self._hold(tenant, thread, state, run, placed, ticket, ctx)
                    if held is None:
                        return
                    state = held
                    placement, holds = placement - 1, holds + 1
                    continue
                if isinstance(placed, hp.HostFailure):
                    where = start_context.placement(state, run)
                    # L9.4/L4.2: an unusable provider thread (pending live requests not_resumable, graph kept);
                    # the next placement builds a replacement from app context.
                    if placed.code == "resume_failed":
                        failed = recovery.resume_failed(state, where.provider_thread_id or "", placed.message)
                    elif placed.code in REFUSED_CODES:
                        failed = [ev.RunFailed(run_id=run.id, attempt_id=run.attempt.id, error=placed.message)]
                    else:
                        failed = start_context.fork_refused(state, run, placed.message)
                    await self._append(tenant, thread, state, failed, ctx)
                    continue
                replaced = state.live_session
                attached = sv.attached(placed)
                attached.replaces = recovery.replaced_thread(state, run.provider, placed.provider_thread_id)
                attached.settings = provider_settings.of_run(state, run)  # L5.4: what it runs under
                await self._append(tenant, thread, state, [attached], ctx)
                if replaced is not None and replaced.id != placed.session_id:
                    await self._release(replaced)
            session = state.live_session
            assert session is not None
            att = run.attempt
            inputs = [state.message(m) for m in att.message_ids or [run.message_id]]
            given = "\n\n".join(m.text for m in inputs if m is not None)
            text = start_context.turn_text(state, run, given)
            if text == given:  # no resolved context rides along: a replacement thread still needs the past (L9.4)
                text = recovery.with_replacement_context(state, run, given)
            try:
                reply = await self._hosts.start_turn(
                    session.host_id,
                    hp.StartTurn(
                        session_id=session.id,
                        tenant=tenant,
                        thread=thread,
                        run_id=run.id,
                        attempt_id=att.id,
                        root_node_id=att.root_node_id,
                        text=text,
                        script=att.script if att.message_ids else run.script,
                        recovery=att.reason == "provider_recovery",
                        unhydrated=unhydrated,
                    ),
                )
            except HostGone:
                # Waiting for the host watcher's report would hold this thread's mailbox, where that very
                # report queues behind us: record the loss now and place the session again (L9.3).
                await self._append(
                    tenant, thread, state, [ev.ProviderStopped(session_id=session.id, reason="host_unreachable")], ctx
                )
                continue
            if (
                isinstance(reply, hp.HostFailure) and reply.code in HOLD_CODES
            ):  # the tenant runs as many turns as it may: the session waits with the run
                held = await self._hold(tenant, thread, state, run, reply, ticket, ctx)
                if held is None:
                    return
                state = held
                placement, holds = placement - 1, holds + 1
                continue
            if isinstance(reply, hp.TurnAccepted):
                context = state.start_context(run.id)
                if context is not None and not context.delivered and (pth := state.session_thread(session.id)):
                    await self._append(
                        tenant, thread, state, [ev.ContextDelivered(run_id=run.id, provider_thread_id=pth.id)], ctx
                    )
                return
            if reply.code == hp.WORKSPACE_MISSING:  # lost or evicted under the live session: hydrated next time
                self._warm_workspaces.forget(tenant, thread)
                placement -= 1
                continue
            if reply.code != "unknown_session":
                raise Retryable(f"host {session.host_id} refused the turn: {reply.code} {reply.message}")
            # The host no longer has the session (it restarted): record that and place it again.
            await self._append(
                tenant, thread, state, [ev.ProviderStopped(session_id=session.id, reason="host_lost_session")], ctx
            )
        raise Retryable(f"could not place the pending run of {thread} after {MAX_PLACEMENTS} tries")

    async def _follow_through(self, tenant: str, thread: str, state: ThreadState, seed: str) -> None:
        """Send the running attempt what it is owed (L3.2 steers, L8 interrupts). Sent first, recorded after:
        a crash in between sends again, and hosts ignore what they already have."""
        run = state.active_run
        ctx = reaction_ctx(f"{seed}|owed|{run.attempt.id if run else ''}", datetime.now(UTC), ACTOR)
        events, actions = sv.owed(state, ctx)
        if events:
            await self._append(tenant, thread, state, events, ctx)
        session = state.live_session
        for action in actions:
            assert session is not None
            att = action.run.attempt
            if isinstance(action, sv.Steer):
                reply = await self._hosts.verb(
                    session.host_id,
                    "turn.steer",
                    hp.SteerTurn(
                        session_id=session.id, attempt_id=att.id, message_id=action.message.id, text=action.message.text
                    ),
                )
                if isinstance(reply, hp.TurnAccepted):
                    await self._append(
                        tenant,
                        thread,
                        state,
                        [ev.SteerDelivered(run_id=action.run.id, attempt_id=att.id, message_id=action.message.id)],
                        ctx,
                    )
                # Refused (the turn just ended): the steer becomes the next run when the run ends (L3.4).
                continue
            request = hp.StopTurn(session_id=session.id, attempt_id=att.id)
            reply = await self._hosts.verb(
                session.host_id, "turn.interrupt" if action.path == "native" else "session.stop", request
            )
            if isinstance(reply, hp.HostFailure) and reply.code not in ("unknown_session", "not_active"):
                raise Retryable(f"host {session.host_id} refused the interrupt: {reply.code} {reply.message}")
            await self._append(
                tenant,
                thread,
                state,
                [ev.InterruptSent(run_id=action.run.id, attempt_id=att.id, path=action.path)],
                ctx,
            )

    async def _warm(self, state: ThreadState, run: Run, ctx: Ctx) -> str | None:
        """The id of the session a fresh thread's first placement will open, after hinting a host to launch its
        runtime now (provider_host/warm.py); None when the run may resume, fork or reuse a provider thread."""
        if state.thread is None or state.live_session is not None or start_context.sources_needed(state, run):
            return None
        where = start_context.placement(state, run)
        if where.provider_thread_id is not None or where.fork_from is not None or where.native_ref is not None:
            return None
        session_id = first_session_id(state) or ctx.ids.next("ps")
        hint = hp.WarmSession(
            tenant=state.thread.tenant,
            thread=state.thread.id,
            provider=run.provider,
            session_id=session_id,
            workspace=state.thread.workspace,
            runtime_mode=state.thread.runtime_mode,
            model=run.model,
        )
        await self._hosts.warm(hint, volume=state.thread.volume)
        return session_id

    async def _place(
        self, state: ThreadState, run: Run, ctx: Ctx, session_id: str | None = None
    ) -> hp.SessionPlaced | hp.HostFailure:
        """A session on the provider thread the run must use (start_context.placement). A refused native fork is
        returned for the caller to record; other failures are retried. ``session_id``: the one hinted (``_warm``)."""
        assert state.thread is not None
        where = start_context.placement(state, run)
        if where.fork_from is not None and (forked := await self._fork_on_live_source(state, run)) is not None:
            where = start_context.Placement(provider_thread_id=where.provider_thread_id, native_ref=forked)
        request = hp.PlaceSession(
            tenant=state.thread.tenant,
            thread=state.thread.id,
            provider=run.provider,
            session_id=session_id or ctx.ids.next("ps"),
            provider_thread_id=where.provider_thread_id or ctx.ids.next("pth"),
            native_ref=where.native_ref,
            fork_from=where.fork_from,
            fork_at_turn=where.fork_at_turn,
            workspace=state.thread.workspace,
            runtime_mode=state.thread.runtime_mode,
            model=run.model,
            capabilities=CATALOGUE.script_capabilities(run.provider, run.script),
        )
        try:
            reply = await self._hosts.place(request, volume=state.thread.volume)
        except HostGone:
            reply = None  # no host has room
        # No host with room, or the tenant is at its session limit with idle sessions it may release soon, maybe on
        # a host without room: ask all hosts; the one asked makes room, or says why not (L9.3).
        if reply is None or (
            isinstance(reply, hp.HostFailure) and reply.code == "tenant_quota" and reply.retry_after is not None
        ):
            try:
                reply = await self._hosts.place(request, full=True, volume=state.thread.volume)
            except HostGone:
                reply = reply or hp.HostFailure(code="capacity", message="no provider host serves this volume")
        if isinstance(reply, hp.HostFailure) and reply.code in HOLD_CODES:
            return reply
        if isinstance(reply, hp.HostFailure):
            if (
                (reply.code == "unsupported" and where.fork_from is not None)
                or (reply.code == "resume_failed" and where.native_ref is not None)
                or reply.code in REFUSED_CODES
            ):
                return reply
            raise Retryable(f"placement failed: {reply.code} {reply.message}")
        return reply

    async def _hold(
        self, tenant: str, thread: str, state: ThreadState, run: Run, refused: hp.HostFailure, ticket: Ticket, ctx: Ctx
    ) -> ThreadState | None:
        """L9.3: no host can take the run now. Say so on the run (``queued`` with the reason) once per reason,
        wait until a host announces room (or the recheck time passes), and return the thread as it is then.
        None: other work for this thread arrived meanwhile (an interrupt, say); it takes the hand-over on, as
        every handler of this thread ends by handing over."""
        if run.waiting_reason != refused.code:
            log.info("run %s waits for a provider: %s", run.id, refused.message)
            await self._append(
                tenant, thread, state, [ev.RunHeld(run_id=run.id, attempt_id=run.attempt.id, reason=refused.code)], ctx
            )
            RUNS_HELD.labels(refused.code).inc()
        soon = refused.retry_after
        arrival = self._mailboxes.arrival(f"{tenant}.{thread}")
        await self._freed.wait(
            ticket,
            refused.code,
            self._recheck if soon is None else min(soon + 0.05, self._recheck),
            also=(arrival, self._closing),
        )
        if self._closing.is_set():
            raise Retryable(f"run {run.id} still waits for a provider; the supervisor stops")
        if arrival.is_set():
            return None
        return await self._store.refresh(tenant, thread)

    async def _fork_on_live_source(self, state: ThreadState, run: Run) -> str | None:
        """A source provider thread still live in its own session is forked there: a runtime that allows one
        writer per thread (Codex) could not open it a second time. None: no such session (the fork's own
        session then opens the source and forks it)."""
        assert state.thread is not None
        context = state.start_context(run.id)
        transfer = next(
            (
                t
                for t in (state.transfer(i) for i in (context.transfer_ids if context else []))
                if t is not None and t.type == "fork"
            ),
            None,
        )
        if context is None or transfer is None:
            return None
        source = await self._store.refresh(state.thread.tenant, transfer.source_thread_id)
        session = source.live_session
        pth = source.session_thread(session.id) if session is not None else None
        if session is None or pth is None or pth.native_ref != context.fork_native_ref:
            return None
        reply = await self._hosts.fork(
            session.host_id, hp.ForkThread(session_id=session.id, at_turn=context.fork_at_turn_ref)
        )
        return reply.native_ref if isinstance(reply, hp.Forked) else None

    async def _release(self, session: ProviderSession) -> None:
        """A session replaced by a provider switch (L5) is stopped on its host: its runtime is not left idle
        there. Best effort: the host's idle reaping is the backstop."""
        try:
            await self._hosts.verb(session.host_id, "session.stop", hp.StopTurn(session_id=session.id, attempt_id=""))
        except Exception as exc:  # the host may be gone already; nothing else depends on this
            log.info("could not release replaced session %s: %r", session.id, exc)

    async def _resolve_start_context(self, tenant: str, state: ThreadState, run: Run, ctx: Ctx) -> list[ev.Payload]:
        """Read the threads a transfer comes from, then let the pure hook decide (start_context.resolve_start_context)."""
        sources = {}
        for source_id in start_context.sources_needed(state, run):
            source = await self._store.refresh(tenant, source_id)
            if source.thread is not None:
                sources[source_id] = source
        target = start_context.target_capabilities(
            state, run, CATALOGUE.script_capabilities(run.provider, run.script), sources
        )
        ids = copy.copy(ctx.ids)  # the same ids again, for the provider summariser's material
        reasoning = self._handoff_reasoning
        events = start_context.resolve_start_context(state, run, target, sources, ctx, reasoning)
        if self._summariser is None or not any(isinstance(e, ev.HandoffCreated) for e in events):
            return events
        again = Ctx(now=ctx.now, ids=ids, actor=ctx.actor)
        material = start_context.handoff_material(state, run, target, sources, again, reasoning=reasoning)
        budget = (target or ProviderCapabilities()).max_handoff_chars
        assert state.thread is not None
        return await self._summariser.apply(state.thread.tenant, state.thread.volume, events, material, budget)

    async def _capture_baseline(self, state: ThreadState, run: Run, ordinal: int, ctx: Ctx) -> ev.CheckpointCaptured:
        captured = await self._capture_or_none(state, ordinal, "baseline", previous=None)
        return sv.checkpoint_captured(
            ctx, ordinal=ordinal, run_id=None, kind="baseline", status="baseline", captured=captured
        )

    async def _capture(
        self, state: ThreadState, run: Run, ctx: Ctx, status: str, session_id: str | None = None
    ) -> ev.CheckpointCaptured:
        """L10.2: the run's checkpoint, with its diff from the previous root checkpoint. ``session_id``: the one the
        run's attempt ran on, when its start is not folded yet (``RunEnded.started``)."""
        session_id = session_id or run.attempt.session_id
        before = state.checkpoint(run.ordinal - 1)
        previous = run.ordinal - 1 if before is not None and before.commit is not None else None
        captured = await self._capture_or_none(state, run.ordinal, status, previous)
        checkpoint = sv.checkpoint_captured(
            ctx, ordinal=run.ordinal, run_id=run.id, kind="run", status=status, captured=captured
        )
        assert state.thread is not None
        if captured is not None and session_id is not None:
            self._warm_workspaces.captured(
                state.thread.tenant, state.thread.id, volume=state.thread.volume, workspace=state.thread.workspace,
                commit=captured.commit, session_id=session_id,
            )  # fmt: skip
        checkpoint.children = child_scopes.summaries(state.run_checkpoints(run.id), run.id)  # L10.3
        return checkpoint

    async def _hydrate(self, state: ThreadState, run: Run) -> bool:
        """Before a provider works in the workspace it must hold the run's previous checkpoint: a workspace this
        volume lost (its disk, an eviction) is made from the checkpoint archive. A no-op (answered from the
        checkpoint service's memory) when it is there. A service or archive that does not answer retries the
        message (a long hydrate still running is then waited for, and found done). True: not asked, as the
        workspace was captured at that checkpoint under the live session (warm_workspaces.py); the host then
        checks that it is on its disk."""
        before = state.checkpoint(run.ordinal - 1)
        if before is None or before.commit is None:  # that capture failed (L10.4): the newest one before it
            before = max(
                (
                    c
                    for c in state.checkpoints
                    if c.scope == "root" and c.commit and not c.stale and c.ordinal < run.ordinal
                ),
                key=lambda c: c.ordinal,
                default=None,
            )
        if state.thread is None or before is None or before.commit is None:
            return False
        thread = state.thread
        session = state.live_session
        if (
            session is not None
            and start_context.session_fits(state, run)
            and self._warm_workspaces.holds(
                thread.tenant, thread.id, volume=thread.volume, workspace=thread.workspace, commit=before.commit,
                session_id=session.id,
            )
        ):  # fmt: skip
            return True  # at that commit, and not evicted since (warm_workspaces.py): nothing to ask
        request = Hydrate(
            tenant=state.thread.tenant,
            thread=state.thread.id,
            workspace=state.thread.workspace,
            checkpoint_id=before.id,
            commit=before.commit,
        )
        try:
            made = await self._checkpoints.hydrate(request, volume=state.thread.volume)
        except CheckpointError as exc:
            if exc.code == "store_unavailable":  # the archive, not the volume: retried in place (not a hold)
                raise Retryable(exc.message) from None
            log.warning("workspace of %s not hydrated: %s", state.thread.id, exc)
            return False
        if made.created:
            log.info(
                "workspace of %s hydrated from the archive at %s (%d files)", state.thread.id, made.commit, made.files
            )
        return False

    async def _capture_or_none(
        self, state: ThreadState, ordinal: int, status: str, previous: int | None
    ) -> Captured | None:
        assert state.thread is not None
        before = state.checkpoint(previous) if previous is not None else None
        request = Capture(
            tenant=state.thread.tenant,
            thread=state.thread.id,
            workspace=state.thread.workspace,
            ordinal=ordinal,
            status=status,
            previous_ordinal=previous,
            previous_commit=before.commit if before else None,
            previous_tree=before.tree if before else None,
            previous_ref=before.ref if before else None,
        )
        try:
            with CHECKPOINT_SECONDS.time():
                return await self._checkpoints.capture(request, volume=state.thread.volume)
        except CheckpointError as exc:  # L10.4: record the failure instead of a checkpoint
            log.warning("checkpoint %s/%s of %s failed: %s", "root", ordinal, state.thread.id, exc)
            return None


def _cache_may_be_behind(state: ThreadState, event: pe.ProviderEvent) -> bool:
    """An event the cached thread would drop that the log may place: of a run or an attempt it never saw, or of
    the run's current attempt from a session it does not have that attempt on (another replica started the
    attempt or placed the session). Attempts are only ever added, so an event of an earlier attempt the cache
    knows is a lost session's last words and keeps that meaning (re-reading for those, L10.5's refused
    rollback saw a resumed session reported gone)."""
    if not event.run_id:
        return False
    run = state.run(event.run_id)
    return run is None or event.attempt_id not in {a.id for a in run.attempts[:-1]}
