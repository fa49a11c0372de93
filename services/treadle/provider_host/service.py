"""The provider session host: the only worker that touches provider runtimes. It places sessions, plays
turns through adapters, and on boot reports the sessions of its previous life as stopped (L9.3)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime, timezone
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.errors import NoKeysError

from treadle.domain import provider_events as pe
from treadle.domain.ids import IdFactory
from treadle.eventlog import subjects
from treadle.providers import protocol as hp
from treadle.providers.base import ProviderAdapter, Turn, Unsupported
from treadle.providers.registry import create_adapter
from treadle.runtime.metrics import LIVE_SESSIONS
from treadle.runtime.settings import ProviderHostSettings, Shared

from .publisher import TurnPublisher

log = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode


class SessionRecord(msgspec.Struct, kw_only=True):
    """KV ``treadle-sessions`` entry ``<host>.<session>``: enough to report the session after a crash."""

    tenant: str
    thread: str
    provider_thread_id: str
    boot_id: str


class Session:
    def __init__(self, request: hp.PlaceSession, adapter: ProviderAdapter, native_ref: str, resumed: bool) -> None:
        self.request = request
        self.adapter = adapter
        self.native_ref = native_ref
        self.resumed = resumed
        self.turns: dict[str, asyncio.Task] = {}
        self.playing: dict[str, Turn] = {}  # attempt id -> the turn while it plays
        self.steered: set[str] = set()  # message ids delivered (a re-sent steer is not injected twice)
        self.answered: dict[str, bytes] = {}  # request id -> the answer given (a retried answer is not an error)


class ProviderHost:
    def __init__(self, nc: NATS, shared: Shared, own: ProviderHostSettings) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._workspaces = shared.workspaces
        self._runtime_dir = (shared.state_dir / "provider-runtimes" / own.host_id).resolve()
        self._own = own
        self.host_id = subjects.token(own.host_id, "host id")
        self.boot_id = uuid.uuid4().hex[:16]
        self._sessions: dict[str, Session] = {}
        self._subs: list = []
        self._heartbeat: asyncio.Task | None = None

    async def start(self) -> None:
        self._kv_sessions = await self._js.key_value("treadle-sessions")
        self._kv_hosts = await self._js.key_value("treadle-hosts")
        await self._report_previous_life()
        self._subs.append(await self._nc.subscribe(subjects.HOST_PLACE, queue="hosts", cb=self._on_place))
        self._subs.append(await self._nc.subscribe(subjects.host(self.host_id, ">"), cb=self._on_verb))
        self._heartbeat = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        if self._heartbeat:
            self._heartbeat.cancel()
        for session_id in list(self._sessions):
            await self._end_session(session_id, "host_stopping")

    # --- lifecycle ---------------------------------------------------------------------------------

    async def _beat(self) -> None:
        while True:
            record = {"boot_id": self.boot_id, "capacity": self._own.capacity, "live": len(self._sessions),
                      "at": datetime.now(timezone.utc).isoformat()}
            try:
                await self._kv_hosts.put(self.host_id, _encode(record))
            except Exception as exc:  # the broker may be reconnecting; the next beat retries
                log.warning("heartbeat failed: %r", exc)
            await asyncio.sleep(self._own.heartbeat_seconds)  # heartbeat period

    async def _report_previous_life(self) -> None:
        """Sessions recorded by an earlier boot of this host died with it: say so on their threads."""
        try:
            keys = await self._kv_sessions.keys()  # nats-py 2.16 drops key filters, so filter here
        except NoKeysError:
            return
        for key in (k for k in keys if k.startswith(f"{self.host_id}.")):
            entry = await self._kv_sessions.get(key)
            record = msgspec.json.decode(entry.value, type=SessionRecord)
            if record.boot_id == self.boot_id:
                continue
            session_id = key.split(".", 1)[1]
            await self._publish_stopped(session_id, record, "host_restarted")
            await self._kv_sessions.delete(key)

    async def _publish_stopped(self, session_id: str, record: SessionRecord, reason: str) -> None:
        event = pe.ProviderEvent(id=f"evt_stop_{session_id}_{self.boot_id}", tenant=record.tenant, thread=record.thread,
                                 session_id=session_id, provider_thread_id=record.provider_thread_id,
                                 at=datetime.now(timezone.utc), body=pe.SessionStopped(reason=reason, boot_id=record.boot_id))
        await self._js.publish(subjects.provider(record.tenant, record.thread, record.provider_thread_id),
                               _encode(event), headers={"Nats-Msg-Id": event.id})

    async def _end_session(self, session_id: str, reason: str) -> None:
        session = self._sessions.pop(session_id)
        for task in session.turns.values():
            task.cancel()
        await asyncio.gather(*session.turns.values(), return_exceptions=True)
        await session.adapter.close()
        req = session.request
        record = SessionRecord(tenant=req.tenant, thread=req.thread, provider_thread_id=req.provider_thread_id,
                               boot_id=self.boot_id)
        await self._publish_stopped(session_id, record, reason)
        await self._kv_sessions.delete(f"{self.host_id}.{session_id}")
        LIVE_SESSIONS.set(len(self._sessions))

    # --- requests ----------------------------------------------------------------------------------

    async def _on_place(self, msg: Msg) -> None:
        try:
            request = hp.place_request.decode(msg.data)
            reply = await self._place(request)
        except (msgspec.DecodeError, ValueError) as exc:
            reply = hp.HostFailure(code="bad_request", message=str(exc))
        except Exception as exc:
            log.exception("place failed")
            reply = hp.HostFailure(code="provider_error", message=repr(exc))
        await msg.respond(_encode(reply))

    async def _place(self, request: hp.PlaceSession) -> hp.SessionPlaced | hp.HostFailure:
        session = self._sessions.get(request.session_id)
        if session is None:
            if len(self._sessions) >= self._own.capacity:
                return hp.HostFailure(code="capacity", message=f"host {self.host_id} is full")
            adapter = self._adapter(request)
            fresh_ref = f"scripted-{request.provider_thread_id}"
            if request.fork_from is not None:
                try:
                    native_ref, resumed = await self._open_fork(adapter, request, fresh_ref)
                except Unsupported as exc:
                    return hp.HostFailure(code="unsupported", message=str(exc))
            elif request.native_ref is not None:
                try:
                    native_ref, resumed = await adapter.open_thread(request.native_ref, fresh_ref)
                except Exception as exc:  # L4.2: the orchestrator replaces the provider thread
                    await adapter.close()
                    return hp.HostFailure(code="resume_failed", message=f"cannot resume {request.native_ref}: {exc!r}")
            else:
                native_ref, resumed = await adapter.open_thread(None, fresh_ref)
            session = Session(request, adapter, native_ref, resumed)
            record = SessionRecord(tenant=request.tenant, thread=request.thread,
                                   provider_thread_id=request.provider_thread_id, boot_id=self.boot_id)
            await self._kv_sessions.put(f"{self.host_id}.{request.session_id}", _encode(record))
            self._sessions[request.session_id] = session
            LIVE_SESSIONS.set(len(self._sessions))
        return hp.SessionPlaced(host_id=self.host_id, boot_id=self.boot_id, session_id=request.session_id,
                                provider=request.provider, provider_thread_id=request.provider_thread_id,
                                native_ref=session.native_ref, resumed=session.resumed,
                                capabilities=session.adapter.capabilities)

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

    def _adapter(self, request: hp.PlaceSession) -> ProviderAdapter:
        workspace = self._workspaces / subjects.token(request.tenant, "tenant") / request.workspace
        return create_adapter(request, Path(workspace), self._runtime_dir / request.session_id)

    async def _on_verb(self, msg: Msg) -> None:
        verb = msg.subject.split(".", 3)[3]
        kind = hp.VERB_REQUESTS.get(verb)
        try:
            if kind is None:
                reply = hp.HostFailure(code="bad_request", message=f"unknown verb {verb}")
            else:
                request = msgspec.json.decode(msg.data, type=kind)
                session = self._sessions.get(request.session_id)
                if session is None:
                    reply = hp.HostFailure(code="unknown_session", message=f"session {request.session_id} is not live here")
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

    async def _control(self, session: Session, verb: str, request) -> hp.TurnAccepted | hp.Forked | hp.HostFailure:
        """Steer, interrupt, stop, answer: each reaches the live runtime or says why it cannot."""
        if verb == "request.respond":
            answer = _encode(request.response)
            if request.request_id in session.answered:
                if session.answered[request.request_id] == answer:
                    return hp.TurnAccepted(already=True)
                return hp.HostFailure(code="not_active", message=f"request {request.request_id} was answered already")
            await session.adapter.respond(request.request_id, request.response)
            session.answered[request.request_id] = answer
            return hp.TurnAccepted()
        if verb == "thread.fork":  # L6.2: the live session forks its own provider thread (it holds the writer)
            return hp.Forked(native_ref=await session.adapter.fork(request.at_turn))
        if verb == "session.stop":
            await self._end_session(request.session_id, "interrupted")
            return hp.TurnAccepted()
        turn = session.playing.get(request.attempt_id)
        if turn is None:
            return hp.HostFailure(code="not_active", message=f"attempt {request.attempt_id} is not playing here")
        if verb == "turn.interrupt":
            await session.adapter.interrupt(turn)
            return hp.TurnAccepted()
        if request.message_id in session.steered:
            return hp.TurnAccepted(already=True)
        await session.adapter.steer(turn, request.text)
        session.steered.add(request.message_id)
        return hp.TurnAccepted()

    def _start_turn(self, session: Session, request: hp.StartTurn) -> hp.TurnAccepted | hp.HostFailure:
        if request.attempt_id in session.turns:
            return hp.TurnAccepted(already=True)  # a redelivered start: the turn is already playing
        task = asyncio.create_task(self._play(session, request), name=f"turn:{request.attempt_id}")
        session.turns[request.attempt_id] = task
        return hp.TurnAccepted()

    async def _play(self, session: Session, request: hp.StartTurn) -> None:
        ids = IdFactory(request.attempt_id, int(datetime.now(timezone.utc).timestamp() * 1000))
        publisher = TurnPublisher(self._nc, tenant=request.tenant, thread=request.thread, session_id=request.session_id,
                                  provider_thread_id=session.request.provider_thread_id, run_id=request.run_id,
                                  attempt_id=request.attempt_id, ids=ids)
        turn = Turn(run_id=request.run_id, attempt_id=request.attempt_id, root_node_id=request.root_node_id,
                    text=request.text, script=request.script, ids=ids)
        session.playing[request.attempt_id] = turn
        try:
            await session.adapter.run_turn(turn, publisher)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("turn %s failed", request.attempt_id)
            await publisher.event(pe.TurnCompleted(status="failed", error=f"provider error: {exc!r}"))
        finally:
            session.playing.pop(request.attempt_id, None)
            publisher.close()
