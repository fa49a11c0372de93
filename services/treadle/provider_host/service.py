"""The provider session host: the only worker that touches provider runtimes. It places sessions, plays
turns through adapters, and on boot reports the sessions of its previous life as stopped (L9.3)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.client import CheckpointClient
from treadle.core import capacity
from treadle.core import provider_events as pe
from treadle.core.disk import DiskBudget, budget_for
from treadle.core.ids import IdFactory
from treadle.eventlog import subjects, tracing
from treadle.ops.policies import PolicyStore
from treadle.ops.session_credentials import SessionCredentials
from treadle.providers import protocol as hp
from treadle.providers.base import (
    SPARE_THREAD,
    ProviderAdapter,
    ResumeFailed,
    RuntimeLost,
    Turn,
    TurnSink,
    UnknownProvider,
    Unsupported,
)
from treadle.providers.mcp_access import McpAccess
from treadle.providers.registry import adapter_class, create_adapter
from treadle.runtime.cancelling import cancel_and_wait
from treadle.runtime.clock import Clock, SystemClock
from treadle.runtime.metrics import LIVE_SESSIONS, PLACEMENTS_REFUSED, SESSIONS_RELEASED
from treadle.runtime.settings import ProviderHostSettings, Shared
from treadle.sandbox.host import Sandbox, SandboxSettings, SandboxUnavailable
from treadle.sandbox.identity import TenantIdentities

from . import summaries
from .child_scopes import ChildScopeSink
from .disk_watch import DiskWatch
from .native_states import NativeStates
from .publisher import TurnPublisher
from .reaper import IdleReaper
from .registry import HostRecord, Registry, SessionRecord
from .spares import Spares
from .warm import Warmer, WarmPool
from .watcher import HOST_RESTARTED, HostWatcher, report_all

log = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode
ROLLBACK_SETTLE_SECONDS = 5.0  # how long a rollback waits for a turn that has ended to close
# How long a turn's start waits for the session's earlier turn to close. Past it the adapter's own guard refuses
# the turn, and the supervisor settles the attempt that never started (supervision.never_started).
TURN_SETTLE_SECONDS = 30.0


def _on_disk(workspace: Path) -> bool:
    """The workspace is a directory with something in it (a hydrate would find it present; a lost or evicted one
    is gone, or left empty). One stat and one directory read: on the turn's path instead of a hydrate request."""
    try:
        with os.scandir(workspace) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


class Session:
    def __init__(
        self, request: hp.PlaceSession, adapter: ProviderAdapter, native_ref: str, resumed: bool, now: float
    ) -> None:
        self.request = request
        self.adapter = adapter
        self.native_ref = native_ref
        self.resumed = resumed
        self.turns: dict[str, asyncio.Task[Any]] = {}  # attempt id -> its turn, until the turn is done
        self.started: set[str] = set()  # every attempt whose turn started here: a redelivered start is not played twice
        self.playing: dict[str, Turn] = {}  # attempt id -> the turn while it plays
        self.interrupted_early: set[str] = set()  # attempts interrupted while their turn waited for an earlier one
        self.steered: set[str] = set()  # message ids delivered (a re-sent steer is not injected twice)
        self.answered: dict[str, bytes] = {}  # request id -> the answer given (a retried answer is not an error)
        self.rolled_back: dict[str, hp.RolledBack] = {}  # rollback id -> what it dropped (never dropped twice)
        self.last_active = now  # on the host's clock: the idle reaper releases sessions unused for long
        self.heard = now  # the last event a turn of it reported
        self.awaiting: set[str] = set()  # requests its turns opened that wait for an answer

    @property
    def tenant(self) -> str:
        return self.request.tenant

    @property
    def busy(self) -> bool:
        return any(not task.done() for task in self.turns.values())

    @property
    def quiet_since(self) -> float | None:
        if self.awaiting or not self.busy:
            return None
        return max(self.heard, self.last_active)


class _Heard:
    """A turn sink that notes when the session last heard from its runtime, and which requests wait."""

    def __init__(self, sink: TurnSink, session: Session, clock: Clock) -> None:
        self._sink, self._session, self._clock = sink, session, clock

    async def event(self, body: pe.AnyBody) -> None:
        self._session.heard = self._clock.now()
        if isinstance(body, pe.RequestOpened):
            self._session.awaiting.add(body.request_id)
        await self._sink.event(body)

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        self._session.heard = self._clock.now()
        await self._sink.text(message_id, node_id, chunk)

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        self._session.heard = self._clock.now()
        await self._sink.text_done(message_id, node_id, text)


class ProviderHost:
    def __init__(self, nc: NATS, shared: Shared, own: ProviderHostSettings, clock: Clock | None = None) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._workspaces = shared.workspaces
        self._runtime_dir = (shared.state_dir / "provider-runtimes" / own.host_id).resolve()
        # Every runtime process (Codex, Claude Code) starts through this one launcher (treadle.sandbox)
        self._sandbox = Sandbox(SandboxSettings(), TenantIdentities(self._workspaces), self._runtime_dir)
        self._own = own
        self.host_id = subjects.token(own.host_id, "host id")
        self.boot_id = uuid.uuid4().hex[:16]
        self._volume = shared.volume
        self._clock = clock or SystemClock()
        self._sessions: dict[str, Session] = {}
        self._opening = 0  # placements in progress, counted against capacity
        self._background: set[asyncio.Task[Any]] = set()  # placements and session ends running on their own
        self._subs: list[Any] = []
        self._heartbeat: asyncio.Task[Any] | None = None
        self._checkpoints = CheckpointClient(nc, timeout=10.0)  # child scopes (child_scopes.py), on self._volume
        self._credentials = SessionCredentials(self._js)  # issue 21: per-session MCP credentials
        self._policies = PolicyStore(self._js)
        self._native = NativeStates(JetStreamArchive(self._js, timeout=10.0))  # issue 35: resume state off the node
        self._budgets: dict[str, tuple[float, DiskBudget]] = {}  # tenant -> (when read, its disk budget)
        self._disk = DiskWatch(
            self._sessions, self._clock, self._disk_roots, self._disk_budget, self._end_session, own.disk_check_seconds
        )
        self._seat: Subscription | None = None  # the placement queue-group subscription, held only while there is room
        self._seat_lock = asyncio.Lock()
        self._placing = asyncio.Lock()  # one placement decides (and releases) at a time
        # session id -> its placement in progress: a supervisor that gave up waiting (a runtime whose start takes
        # longer than its request timeout) asks again, and must get that session, not a second runtime
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        self._waiting: dict[str, float] = {}  # tenant -> when a placement of it was last refused for capacity
        self._peers: list[HostRecord] = []  # the other hosts' latest heartbeats: per-tenant counts across hosts
        self._limits = capacity.Limits(
            capacity=own.capacity,
            tenant_sessions=own.tenant_sessions,
            tenant_runs=own.tenant_runs,
            grace=own.shed_grace_seconds,
        )
        self._stopping = False
        self._loops: list[asyncio.Task[Any]] = []
        # Spares have no session nor thread yet: a host that gives each session its own credential keeps none
        self._spares = Spares(
            own.spare_runtimes if own.mcp_url is None and own.warm_sessions else 0,
            own.spare_seconds,
            self._clock,
            self._spare_adapter,
            self._may_spare,
            self._workspace_of,
        )
        self._warmer = Warmer(
            WarmPool(own.warm_sessions, own.warm_seconds),
            self._clock,
            self._adapter,
            self._grant_mcp,
            self._revoke_warmed,
            self._may_warm,
            self._spares,
        )

    async def start(self) -> None:
        await asyncio.to_thread(self._sandbox.host_start, self._workspaces)
        # The placeholders of an earlier life's spares (their runtimes died with it)
        await asyncio.to_thread(shutil.rmtree, self._runtime_dir / "spares", True)
        self._registry = await Registry.open(self._js)
        await self._registry.follow()
        await self._registry.beat(self._record())  # registered before it takes any session
        # Known before the first placement: a full host that knows no peer refuses without a hint to ask again
        # elsewhere, and the run waits out the supervisor's recheck.
        await self._learn_peers()
        # After the beat that names this boot (from then on the gateway refuses an earlier life's credentials),
        # before any placement: the MCP credentials of this host's earlier lives are deleted.
        swept = await self._credentials.sweep_host(self.host_id, self.boot_id)
        if swept:
            log.info("revoked %d MCP credentials of this host's earlier lives", swept)
        self._subs.append(await self._nc.subscribe(subjects.host(self.host_id, ">"), cb=self._on_verb))
        self._subs.append(
            await self._nc.subscribe(
                subjects.host_summarise(self._volume), queue="summarisers", cb=self._take_summary_request
            )
        )
        if self._own.warm_sessions:
            self._subs.append(
                await self._nc.subscribe(subjects.host_warm(self._volume), queue="warmers", cb=self._on_warm)
            )
        await self._sync_seat()  # before the report: the runs it reports are placed again at once
        await self._report_previous_life()
        self._subs.append(
            await self._nc.subscribe(subjects.host_shed(self._volume), queue="shedders", cb=self._take_seat_request)
        )
        await self._freed("")  # runs waiting for capacity may take this host's
        watcher = HostWatcher(
            self._registry,
            self.host_id,
            self.boot_id,
            self._clock,
            self._own.host_expiry_seconds,
            self._own.heartbeat_seconds,
            self._publish_stopped,
        )
        reaper = IdleReaper(
            self._sessions,
            self._clock,
            self._own.idle_seconds,
            self._end_session,
            unresponsive_seconds=self._own.unresponsive_seconds,
        )
        self._loops = [
            asyncio.create_task(loop, name=f"host:{name}")
            for name, loop in (
                ("heartbeat", self._beat()),
                ("watcher", watcher.run()),
                ("reaper", reaper.run()),
                ("disk", self._disk.run()),
                ("warm", self._warmer.run()),
                ("spares", self._spares.run()),
            )
        ]

    async def stop(self) -> None:
        """Every step is tried even when one fails (the broker gone): the loops and every session's runtime
        must end with the host; the first failure is raised after."""
        self._stopping = True  # ending the sessions below frees room: the seat must not be taken again
        await cancel_and_wait(self._loops)
        if hasattr(self, "_registry"):
            await self._registry.close()
        failures: list[BaseException | None] = [*await asyncio.gather(self._unsubscribe(), return_exceptions=True)]
        sessions = [self._end_session(session_id, "host_stopping") for session_id in list(self._sessions)]
        failures += await asyncio.gather(*sessions, self._warmer.stop(), self._spares.stop(), return_exceptions=True)
        first = next((f for f in failures if isinstance(f, BaseException)), None)
        if first is not None:
            raise first

    async def _unsubscribe(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        async with self._seat_lock:
            if self._seat is not None:
                await self._seat.unsubscribe()
                self._seat = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def _record(self) -> HostRecord:
        tenants: dict[str, int] = {}
        busy: dict[str, int] = {}
        for session in self._sessions.values():
            tenant = session.request.tenant
            tenants[tenant] = tenants.get(tenant, 0) + 1
            if session.busy:
                busy[tenant] = busy.get(tenant, 0) + 1
        return HostRecord(
            host_id=self.host_id,
            boot_id=self.boot_id,
            volume=self._volume,
            capacity=self._own.capacity,
            live=len(self._sessions),
            heartbeat_seconds=self._own.heartbeat_seconds,
            at=datetime.now(UTC),
            tenants=tenants,
            busy=busy,
            idle=len(self._sessions) - sum(busy.values()),
            mcp_tools=self._own.mcp_tools,
        )

    async def _beat(self) -> None:
        while True:
            await self._clock.sleep(self._own.heartbeat_seconds)  # heartbeat period
            try:
                await self._registry.beat(self._record())
                await self._learn_peers()
            except Exception as exc:  # the broker may be reconnecting; the next beat retries
                log.warning("heartbeat failed: %r", exc)

    async def _learn_peers(self) -> None:
        # Counts of hosts gone quiet are dropped (wall clocks only weigh a hint here, never a host's life).
        fresh = datetime.now(UTC).timestamp() - self._own.host_expiry_seconds
        self._peers = [p for p in await self._registry.peers(self.host_id) if p.at.timestamp() >= fresh]

    async def _sync_seat(self) -> None:
        """Queue-group placement with a capacity gate: a host is in its volume's placement group only while
        it has room, so NATS hands each new session to one host that can take it."""
        async with self._seat_lock:
            room = not self._stopping and len(self._sessions) + self._opening < self._own.capacity
            if room and self._seat is None:
                self._seat = await self._nc.subscribe(
                    subjects.host_place(self._volume), queue="hosts", cb=self._take_seat_request
                )
            elif not room and self._seat is not None:
                await self._seat.unsubscribe()
                self._seat = None

    async def _report_previous_life(self) -> None:
        """Sessions recorded by an earlier boot of this host died with it: say so on their threads."""
        previous = (await self._registry.sessions_by_host()).get(self.host_id, {})
        await report_all(
            ((session_id, record) for session_id, record in previous.items() if record.boot_id != self.boot_id),
            self._forget_stopped,
            HOST_RESTARTED,
        )

    async def _forget_stopped(self, session_id: str, record: SessionRecord, reason: str) -> None:
        await self._publish_stopped(session_id, record, reason)
        await self._registry.forget_session(self.host_id, session_id)

    async def _publish_stopped(
        self, session_id: str, record: SessionRecord, reason: str, detail: str | None = None
    ) -> None:
        # Every path that reports a session stopped comes here (its own end, a host found lost by a watcher, an
        # earlier life found at start): its MCP credential is revoked before the stop is said.
        await self._credentials.revoke_session(session_id)
        # The id names the session's boot, not the reporter: a watcher and the restarted host reporting the
        # same dead session produce one event.
        event = pe.ProviderEvent(
            id=f"evt_stop_{session_id}_{record.boot_id}",
            tenant=record.tenant,
            thread=record.thread,
            session_id=session_id,
            provider_thread_id=record.provider_thread_id,
            at=datetime.now(UTC),
            body=pe.SessionStopped(reason=reason, boot_id=record.boot_id, detail=detail),
        )
        await self._js.publish(
            subjects.provider(record.tenant, record.thread, record.provider_thread_id),
            _encode(event),
            headers={"Nats-Msg-Id": event.id},
        )

    async def _end_session(
        self, session_id: str, reason: str, detail: str | None = None, announce: bool = True
    ) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return  # already ended (an idle release racing a stop)
        if reason == "host_stopping":  # L9.3: its turns are retried elsewhere, not ended by the user
            await session.adapter.abandon()
        await cancel_and_wait(session.turns.values())
        await session.adapter.close()
        req = session.request
        record = SessionRecord(
            tenant=req.tenant, thread=req.thread, provider_thread_id=req.provider_thread_id, boot_id=self.boot_id
        )
        await self._publish_stopped(session_id, record, reason, detail)
        await self._registry.forget_session(self.host_id, session_id)
        LIVE_SESSIONS.set(len(self._sessions))
        await self._sync_seat()
        if announce:
            await self._freed(req.tenant)

    async def _freed(self, tenant: str) -> None:
        """Tell supervisors holding runs that this host may take one now: any run waiting for capacity, and
        ``tenant``'s waiting for its quota (best effort: they also look again on their own after a while)."""
        if self._stopping:
            return
        try:
            await self._nc.publish(subjects.host_freed(self._volume), tenant.encode())
        except Exception as exc:
            log.info("could not announce freed capacity: %r", exc)

    def _elsewhere(self, field: str) -> dict[str, int]:
        """Per-tenant counts (``tenants`` or ``busy``) summed over the other hosts' latest heartbeats."""
        total: dict[str, int] = {}
        for peer in self._peers:
            for tenant, n in getattr(peer, field).items():
                total[tenant] = total.get(tenant, 0) + n
        return total

    # --- requests ----------------------------------------------------------------------------------

    async def _take_seat_request(self, msg: Msg) -> None:
        """Placement runs outside the seat's own delivery task: giving up the seat (unsubscribing) when the
        host fills up cancels that task, and must not cancel the placement that filled it."""
        task = asyncio.create_task(self._on_place(msg))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _take_summary_request(self, msg: Msg) -> None:
        """L5.5: a summary turn runs on its own task: deliveries of a subscription are handled one at a time."""
        task = asyncio.create_task(self._on_summarise(msg))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _on_summarise(self, msg: Msg) -> None:
        if not msg.reply:
            return  # nobody would get the summary: no provider turn is spent on it
        try:
            request = hp.summarise_request.decode(msg.data)
            subjects.token(request.tenant, "tenant")
            reply = await summaries.summarise(request, self._runtime_dir / "summaries", self._sandbox)
        except (msgspec.DecodeError, ValueError) as exc:
            reply = hp.HostFailure(code="bad_request", message=str(exc))
        except Exception as exc:
            log.exception("summary failed")
            reply = hp.HostFailure(code="provider_error", message=repr(exc))
        await msg.respond(_encode(reply))

    async def _on_place(self, msg: Msg) -> None:
        try:
            request = hp.place_request.decode(msg.data)
            reply = await self._place(request)
        except UnknownProvider as exc:  # the run fails with the reason (no placement can succeed)
            reply = hp.HostFailure(code="unknown_provider", message=str(exc))
        except (msgspec.DecodeError, ValueError) as exc:
            reply = hp.HostFailure(code="bad_request", message=str(exc))
        except ResumeFailed as exc:  # L9.4: the supervisor replaces the provider thread
            reply = hp.HostFailure(code="resume_failed", message=str(exc))
        except SandboxUnavailable as exc:  # the run waits (placement is retried) with the missing piece named
            log.error("session %s not started: %s", getattr(request, "session_id", "?"), exc)
            reply = hp.HostFailure(code="sandbox_unavailable", message=str(exc))
        except Exception as exc:
            log.exception("place failed")
            reply = hp.HostFailure(code="provider_error", message=repr(exc))
        await msg.respond(_encode(reply))

    async def _place(self, request: hp.PlaceSession) -> hp.SessionPlaced | hp.HostFailure:
        first = self._in_flight.get(request.session_id)
        if first is not None:
            await asyncio.shield(first)  # the first placement's outcome answers this one too
            if request.session_id not in self._sessions:
                return hp.HostFailure(code="provider_error", message=f"session {request.session_id} did not open")
        elif request.session_id not in self._sessions:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._in_flight[request.session_id] = done
            try:
                return await self._place_new(request)
            finally:
                self._in_flight.pop(request.session_id, None)
                done.set_result(None)
        return self._placed(request, self._sessions[request.session_id])

    async def _place_new(self, request: hp.PlaceSession) -> hp.SessionPlaced | hp.HostFailure:
        session = self._sessions.get(request.session_id)
        if session is None and self._stopping:  # it would be ended at once, and its run lose an attempt
            return hp.HostFailure(code=capacity.CAPACITY, message=f"host {self.host_id} is stopping")
        if session is None:
            async with self._placing:
                decision = await self._make_room(request.tenant)
                if isinstance(decision, capacity.Refuse):
                    return hp.HostFailure(
                        code=decision.reason,
                        message=f"host {self.host_id}: {decision.message}",
                        retry_after=decision.retry_after,
                    )
                self._opening += 1
            try:
                await self._sync_seat()
                warmed = await self._warmer.adopt(request)  # launched and opened ahead (warm.py), else now
                if warmed is None:
                    adapter = self._adapter(request)
                    await self._grant_mcp(adapter, request)
                else:
                    adapter = warmed[0]
                fresh_ref = f"scripted-{request.provider_thread_id}"
                if request.fork_from is not None:
                    try:
                        native_ref, resumed = await self._open_fork(adapter, request, fresh_ref)
                    except BaseException as exc:  # the session never opened: neither does its credential
                        await self._credentials.revoke_session(request.session_id)
                        if isinstance(exc, Unsupported):
                            return hp.HostFailure(code="unsupported", message=str(exc))
                        raise
                else:
                    try:
                        if warmed is not None:
                            native_ref, resumed = warmed[1]
                        else:
                            await self._native.restore(request, adapter)
                            native_ref, resumed = await adapter.open_thread(request.native_ref, fresh_ref)
                    except BaseException:  # ResumeFailed becomes resume_failed (L9.4); nothing is left open
                        await adapter.close()
                        await self._credentials.revoke_session(request.session_id)
                        raise
                session = Session(request, adapter, native_ref, resumed, self._clock.now())
                record = SessionRecord(
                    tenant=request.tenant,
                    thread=request.thread,
                    provider_thread_id=request.provider_thread_id,
                    boot_id=self.boot_id,
                )
                await self._registry.record_session(self.host_id, request.session_id, record)
                self._sessions[request.session_id] = session
            finally:
                self._opening -= 1
            LIVE_SESSIONS.set(len(self._sessions))
            await self._sync_seat()
            await self._disk_begin(request.tenant)
        return self._placed(request, session)

    # --- disk budget (issue 36, disk_watch.py) --------------------------------------------------------

    def _disk_roots(self, tenant: str) -> list[Path]:
        """The tenant's workspaces and the homes its runtimes had here (those removed since are forgotten)."""
        homes = self._sandbox.homes.get(tenant, set())
        homes.difference_update([h for h in homes if not h.exists()])
        return [self._workspaces / subjects.token(tenant, "tenant"), *homes]

    async def _disk_budget(self, tenant: str) -> DiskBudget:
        """The tenant's budget, its policy read at most once per check interval: the checks keep it fresh, so a
        turn's start does not wait for the broker."""
        now = self._clock.now()
        known = self._budgets.get(tenant)
        if known is not None and now - known[0] < 2 * self._own.disk_check_seconds:
            return known[1]
        default = DiskBudget(bytes=self._own.disk_budget_bytes, files=self._own.disk_budget_files)
        try:
            policy = await self._policies.get(tenant)
        except Exception as exc:  # the broker busy: the deployment's budget meanwhile
            log.info("no policy of tenant %s for its disk budget: %r", tenant, exc)
            return default
        budget = budget_for(default, policy.max_disk_bytes, policy.max_disk_files)
        self._budgets[tenant] = (now, budget)
        return budget

    async def _disk_begin(self, tenant: str) -> None:
        try:
            await self._disk.begin(tenant)
        except Exception:  # never a reason to refuse a session or a turn: the watch checks again
            log.exception("disk check of tenant %s failed", tenant)

    def _placed(self, request: hp.PlaceSession, session: Session) -> hp.SessionPlaced:
        return hp.SessionPlaced(
            host_id=self.host_id,
            boot_id=self.boot_id,
            session_id=request.session_id,
            provider=request.provider,
            provider_thread_id=request.provider_thread_id,
            native_ref=session.native_ref,
            resumed=session.resumed,
            capabilities=msgspec.structs.replace(
                session.adapter.capabilities, orchestrator=session.adapter.offers_orchestrator
            ),
        )

    async def _make_room(self, tenant: str) -> capacity.Admit | capacity.Refuse:
        """Decide the placement (core/capacity.py) and release what it names: an idle session of the busiest
        tenant on a full host, or the tenant's own over its limit. Released sessions stop as after an idle reap."""
        now = self._clock.now()
        loads = [
            capacity.SessionLoad(session_id=sid, tenant=s.request.tenant, busy=s.busy, last_active=s.last_active)
            for sid, s in self._sessions.items()
        ]
        volume = [p for p in self._peers if p.volume == self._volume]
        peers = capacity.Peers(
            sessions=self._elsewhere("tenants"),
            busy=self._elsewhere("busy"),
            idle=sum(p.idle for p in volume),
            hosts=len(volume),
            staleness=max([p.heartbeat_seconds for p in volume], default=0.0),
        )
        self._waiting = {w: at for w, at in self._waiting.items() if now - at < capacity.FAIR_WINDOW}
        decision = capacity.place(loads, self._opening, tenant, peers, self._limits, now, waiting=self._waiting)
        if isinstance(decision, capacity.Refuse) and decision.reason == capacity.CAPACITY:
            self._waiting[tenant] = now
        else:
            self._waiting.pop(tenant, None)
        if isinstance(decision, capacity.Refuse):
            PLACEMENTS_REFUSED.labels(decision.reason).inc()
        else:
            for session_id in decision.release:
                log.info("releasing idle session %s to make room for tenant %s", session_id, tenant)
                SESSIONS_RELEASED.inc()
                await self._end_session(session_id, capacity.CAPACITY, announce=False)  # its room is taken
        return decision

    @staticmethod
    async def _open_fork(adapter: ProviderAdapter, request: hp.PlaceSession, fresh_ref: str) -> tuple[str, bool]:
        """L6.2 native fork: open the source provider thread, fork it at the point, and continue on the fork."""
        try:
            await adapter.open_thread(request.fork_from, fresh_ref)
            forked = await adapter.fork(request.fork_at_turn)
            native_ref, _ = await adapter.open_thread(forked, fresh_ref)
        except BaseException:
            await adapter.close()
            raise
        return native_ref, True

    # --- runtimes launched ahead of their placement (warm.py) ----------------------------------------

    async def _on_warm(self, msg: Msg) -> None:
        try:
            request = hp.warm_request.decode(msg.data)
            for value, what in ((request.tenant, "tenant"), (request.thread, "thread"), (request.session_id, "id")):
                subjects.token(value, what)
        except (msgspec.DecodeError, ValueError) as exc:
            log.info("warm hint ignored: %s", exc)
            return
        self._warmer.offer(request)

    def _may_warm(self, request: hp.WarmSession) -> bool:
        """Room for one more runtime of the tenant, and the session not placed here already."""
        if request.session_id in self._sessions or request.session_id in self._in_flight:
            return False
        return self._may_spare(request.tenant)

    def _may_spare(self, tenant: str) -> bool:
        """Room for one more runtime of the tenant: the host not full or stopping, the tenant under its session
        limit counting the runtimes warmed and spared for it."""
        if self._stopping or len(self._sessions) + self._opening >= self._own.capacity:
            return False
        limit = self._limits.tenant_sessions
        if limit:
            here = sum(1 for s in self._sessions.values() if s.tenant == tenant)
            ahead = len(self._warmer.pool.of(tenant)) + len(self._spares.of(tenant))
            if here + self._elsewhere("tenants").get(tenant, 0) + ahead >= limit:
                return False
        return True

    def _workspace_of(self, request: hp.PlaceSession) -> Path:
        return self._workspaces / subjects.token(request.tenant, "tenant") / request.workspace

    def _spare_adapter(self, tenant: str, provider: str, spare_id: str) -> ProviderAdapter:
        """A spare of ``tenant``: its own session id and an empty placeholder of a workspace, in the host's
        runtime dir (never under the workspaces: no thread's, and nothing a checkpoint or disk budget sees)."""
        if not getattr(adapter_class(provider), "spares", False):  # as warm.py reads ``warms``
            raise Unsupported(f"{provider} keeps no spare runtimes")
        self._sandbox.check()
        request = hp.PlaceSession(
            tenant=subjects.token(tenant, "tenant"),
            thread=SPARE_THREAD,
            provider=provider,
            session_id=spare_id,
            provider_thread_id="pth_spare",
            workspace=spare_id,
        )
        placeholder = self._runtime_dir / "spares" / spare_id
        return create_adapter(request, placeholder, self._runtime_dir / spare_id, self._sandbox)

    async def _revoke_warmed(self, session_id: str) -> None:
        if self._own.mcp_url is not None:
            await self._credentials.revoke_session(session_id)

    async def _grant_mcp(self, adapter: ProviderAdapter, request: hp.PlaceSession) -> None:
        """Issue 21: a real runtime's session gets its own MCP credential (scoped to its tenant, thread, session
        and tools), injected through the sandbox's environment; only its digest is stored."""
        if self._own.mcp_url is None or not getattr(adapter, "sandboxed", False):
            return
        token = await self._credentials.mint(
            tenant=request.tenant,
            thread=request.thread,
            session_id=request.session_id,
            capabilities=self._own.mcp_tools,
            host_id=self.host_id,
            boot_id=self.boot_id,
            idle_seconds=self._own.mcp_idle_seconds,
            lifetime_seconds=self._own.mcp_lifetime_seconds,
        )
        adapter.mcp_access = McpAccess(url=self._own.mcp_url, token=token, tools=self._own.mcp_tools)

    def _adapter(self, request: hp.PlaceSession) -> ProviderAdapter:
        workspace = self._workspace_of(request)
        if getattr(adapter_class(request.provider), "sandboxed", False):
            self._sandbox.check()  # SandboxUnavailable: no runtime starts unsandboxed unless TREADLE_SANDBOX=off
        return create_adapter(request, Path(workspace), self._runtime_dir / request.session_id, self._sandbox)

    async def _on_verb(self, msg: Msg) -> None:
        with tracing.nats_span(
            f"host {msg.subject.split('.', 3)[-1]}",
            msg.subject,
            "process",
            msg.headers,
            kind="server",
            extra={"treadle.host": self.host_id},
        ):
            await self._on_verb_traced(msg)

    async def _on_verb_traced(self, msg: Msg) -> None:
        verb = msg.subject.split(".", 3)[3]
        kind = hp.VERB_REQUESTS.get(verb)
        reply: hp.TurnAccepted | hp.Forked | hp.RolledBack | hp.HostFailure
        try:
            if kind is None:
                reply = hp.HostFailure(code="bad_request", message=f"unknown verb {verb}")
            else:
                request = msgspec.json.decode(msg.data, type=kind)
                session = self._sessions.get(request.session_id)
                if session is None:
                    reply = hp.HostFailure(
                        code="unknown_session", message=f"session {request.session_id} is not live here"
                    )
                elif verb == "turn.start":
                    reply = self._start_turn(session, request)
                else:
                    reply = await self._control(session, verb, request)
        except (msgspec.DecodeError, ValueError) as exc:
            reply = hp.HostFailure(code="bad_request", message=str(exc))
        except Unsupported as exc:
            reply = hp.HostFailure(code="unsupported", message=str(exc))
        except Exception as exc:
            log.exception("%s failed", verb)
            reply = hp.HostFailure(code="provider_error", message=repr(exc))
        await msg.respond(_encode(reply))

    async def _control(
        self,
        session: Session,
        verb: str,
        request: hp.SteerTurn | hp.StopTurn | hp.Respond | hp.ForkThread | hp.RollbackTurns,
    ) -> hp.TurnAccepted | hp.Forked | hp.RolledBack | hp.HostFailure:
        """Steer, interrupt, stop, answer: each reaches the live runtime or says why it cannot."""
        session.last_active = self._clock.now()
        if isinstance(request, hp.Respond):  # request.respond
            answer = _encode(request.response)
            if request.request_id in session.answered:
                if session.answered[request.request_id] == answer:
                    return hp.TurnAccepted(already=True)
                return hp.HostFailure(code="not_active", message=f"request {request.request_id} was answered already")
            await session.adapter.respond(request.request_id, request.response)
            session.answered[request.request_id] = answer
            session.awaiting.discard(request.request_id)
            return hp.TurnAccepted()
        if isinstance(
            request, hp.ForkThread
        ):  # L6.2: the live session forks its own provider thread (it holds the writer)
            return hp.Forked(native_ref=await session.adapter.fork(request.at_turn))
        if isinstance(request, hp.RollbackTurns):
            rolled = await self._roll_back(session, request)
            if isinstance(rolled, hp.RolledBack) and not rolled.already:  # kept as the conversation now ends
                await self._native.keep(session.request, session.adapter)
            return rolled
        if verb == "session.stop":
            await self._end_session(request.session_id, "interrupted")
            return hp.TurnAccepted()
        turn = session.playing.get(request.attempt_id)
        if turn is None and verb == "turn.interrupt" and request.attempt_id in session.turns:
            session.interrupted_early.add(request.attempt_id)  # waiting for an earlier turn: it ends before playing
            return hp.TurnAccepted()
        if turn is None:
            return hp.HostFailure(code="not_active", message=f"attempt {request.attempt_id} is not playing here")
        if isinstance(request, hp.StopTurn):  # turn.interrupt (session.stop returned above)
            await session.adapter.interrupt(turn)
            return hp.TurnAccepted()
        if request.message_id in session.steered:
            return hp.TurnAccepted(already=True)
        await session.adapter.steer(turn, request.text, request.message_id)
        session.steered.add(request.message_id)
        return hp.TurnAccepted()

    @staticmethod
    async def _roll_back(session: Session, request: hp.RollbackTurns) -> hp.RolledBack | hp.HostFailure:
        """L10.5: the adapter drops the provider thread's last turns. Never under a playing turn (the turn
        would write on after the cut), and once per rollback id: a retried request gets the first answer."""
        done = session.rolled_back.get(request.rollback_id)
        if done is not None:
            return msgspec.structs.replace(done, already=True)
        # A turn that has reported its end may still be closing its publisher: give it a moment to finish.
        closing = [t for t in session.turns.values() if not t.done()]
        if closing and not session.playing:
            await asyncio.wait(closing, timeout=ROLLBACK_SETTLE_SECONDS)
        if session.busy:
            return hp.HostFailure(code="not_active", message="a turn is playing on this session")
        if request.turns < 1:
            raise ValueError("a rollback drops at least one turn")
        snapshot = await session.adapter.rollback(request.turns)
        turns = (snapshot or {}).get("turns")
        reply = hp.RolledBack(turns_dropped=request.turns, turns_left=len(turns) if isinstance(turns, list) else None)
        session.rolled_back[request.rollback_id] = reply
        return reply

    def _start_turn(self, session: Session, request: hp.StartTurn) -> hp.TurnAccepted | hp.HostFailure:
        session.last_active = self._clock.now()
        if request.attempt_id in session.started:
            return hp.TurnAccepted(already=True)  # a redelivered start: the turn is playing or has played
        if request.unhydrated and not _on_disk(session.adapter.workspace):
            return hp.HostFailure(
                code=hp.WORKSPACE_MISSING, message=f"workspace {session.request.workspace} is not here"
            )
        tenant = session.request.tenant
        # Not this session: a turn it is still closing (a steer restarting its attempt) is being replaced.
        busy_here = sum(
            1 for s in self._sessions.values() if s is not session and s.request.tenant == tenant and s.busy
        )
        refused = capacity.start_turn(busy_here, self._elsewhere("busy").get(tenant, 0), tenant, self._limits)
        if refused is not None:
            PLACEMENTS_REFUSED.labels(refused.reason).inc()
            return hp.HostFailure(code=refused.reason, message=f"host {self.host_id}: {refused.message}")
        earlier = [t for t in session.turns.values() if not t.done()]  # started before this one, still closing
        task = asyncio.create_task(self._play(session, request, earlier), name=f"turn:{request.attempt_id}")
        session.turns[request.attempt_id] = task
        session.started.add(request.attempt_id)
        # A done turn leaves: a session's turns were all kept, and every start and capacity count scanned them
        task.add_done_callback(lambda _: session.turns.pop(request.attempt_id, None))
        return hp.TurnAccepted()

    async def _play(self, session: Session, request: hp.StartTurn, earlier: list[asyncio.Task[Any]]) -> None:
        # A turn reports its end before its adapter's run_turn has returned (it still closes the turn), and the
        # supervisor starts the next run on that report: a runtime plays one turn at a time, and its adapter
        # refuses a turn that comes while the last one closes, so this one waits for the earlier ones to end.
        if earlier:
            _, closing = await asyncio.wait(earlier, timeout=TURN_SETTLE_SECONDS)
            if closing:
                log.warning("turn %s starts while an earlier turn of its session has not ended", request.attempt_id)
        # One span for the whole turn (a child of the start that made this task); its events carry it, so the
        # supervisor's handling of them, the checkpoint and the projection join the run's trace.
        with tracing.span(
            "provider turn", attributes={"treadle.run.id": request.run_id, "treadle.attempt.id": request.attempt_id}
        ):
            await self._play_traced(session, request)
        if session.adapter.spares:  # the tenant's next thread: a spare, once this turn is over
            self._spares.want(session.tenant, session.request.provider)

    async def _play_traced(self, session: Session, request: hp.StartTurn) -> None:
        ids = IdFactory(request.attempt_id, int(datetime.now(UTC).timestamp() * 1000))
        turn_publisher = TurnPublisher(
            self._nc,
            tenant=request.tenant,
            thread=request.thread,
            session_id=request.session_id,
            provider_thread_id=session.request.provider_thread_id,
            run_id=request.run_id,
            attempt_id=request.attempt_id,
            ids=ids,
        )
        publisher = ChildScopeSink(
            turn_publisher,
            self._checkpoints,
            tenant=request.tenant,
            thread=request.thread,
            workspace=session.request.workspace,
            volume=self._volume,  # the session's workspace is on this host's volume: it was placed here
        )
        turn = Turn(
            run_id=request.run_id,
            attempt_id=request.attempt_id,
            root_node_id=request.root_node_id,
            text=request.text,
            script=request.script,
            ids=ids,
            recovery=request.recovery,
        )
        await self._disk_begin(request.tenant)  # what the tenant holds now over its budget may stay, not grow
        session.playing[request.attempt_id] = turn
        played = False
        try:
            if request.attempt_id in session.interrupted_early:  # L8.2: it ends interrupted, never having played
                await publisher.event(pe.TurnCompleted(status="interrupted"))
            else:
                await session.adapter.run_turn(turn, _Heard(publisher, session, self._clock))
                played = True
        except asyncio.CancelledError:
            raise
        except RuntimeLost as exc:  # L9.3: the same path as a lost host; the run gets a recovery attempt
            log.warning("runtime of session %s died under turn %s: %s", request.session_id, request.attempt_id, exc)
            with contextlib.suppress(Exception):  # what the turn reported is stored before its session's end
                await publisher.drain()
            ending = asyncio.create_task(self._end_session(request.session_id, "provider_crashed", str(exc) or None))
            self._background.add(ending)
            ending.add_done_callback(self._background.discard)
        except Exception as exc:
            log.exception("turn %s failed", request.attempt_id)
            await publisher.event(pe.TurnCompleted(status="failed", error=f"provider error: {exc!r}"))
        finally:
            session.playing.pop(request.attempt_id, None)
            if not session.playing:
                session.awaiting.clear()  # what no turn plays for waits for nothing
            session.interrupted_early.discard(request.attempt_id)
            session.last_active = self._clock.now()
            publisher.close()
            freed = asyncio.create_task(self._freed(request.tenant))  # a turn ended: its tenant may start another
            self._background.add(freed)
            freed.add_done_callback(self._background.discard)
        if played:  # issue 35: the session's next turn waits for this (it starts once this task is done)
            await self._native.keep(session.request, session.adapter)
