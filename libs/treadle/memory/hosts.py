"""Provider hosts in memory (``ports.HostDirectory``): hosts by id with a session capacity, sessions of the
scripted provider placed on one with room, turns that play until the test ends them. What a session may do
(steer, interrupt, fork, roll back) follows its capabilities as the scripted adapter's does, and a
provider thread it never minted cannot be resumed. Replies and errors are the real hosts': a host
id nobody serves raises ``HostGone`` (so does a placement when no host has room, as no host then listens in
the placement queue group), an unknown session is ``unknown_session``, a redelivered turn start, steer or
answer is ``already``, and a verb for an attempt that is not playing is ``not_active``. Provider events are
not published: tests feed the supervisor the events a turn would report. ``calls`` records every request."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgspec

from treadle.core.providers.model import ProviderCapabilities
from treadle.ports import HostRequest
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostGone, HostUnavailable
from treadle.providers.scripted import DEFAULT_CAPABILITIES

Reply: TypeAlias = hp.TurnAccepted | hp.Forked | hp.RolledBack | hp.HostFailure


@dataclass
class MemorySession:
    request: hp.PlaceSession
    native_ref: str
    resumed: bool
    capabilities: ProviderCapabilities
    turns: int = 0  # turns the provider thread holds (rollbacks drop them)
    pending: set[str] = field(default_factory=set)  # runtime requests waiting for an answer
    playing: dict[str, hp.StartTurn] = field(default_factory=dict)  # attempt id -> its start
    started: set[str] = field(default_factory=set)  # every attempt this session was given
    steered: set[str] = field(default_factory=set)
    answered: dict[str, bytes] = field(default_factory=dict)
    rolled_back: dict[str, hp.RolledBack] = field(default_factory=dict)
    interrupted: list[str] = field(default_factory=list)


@dataclass
class MemoryHost:
    host_id: str
    capacity: int = 4
    boot_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    sessions: dict[str, MemorySession] = field(default_factory=dict)

    @property
    def has_room(self) -> bool:
        return len(self.sessions) < self.capacity


class MemoryHosts:
    def __init__(self, on_disk: Callable[[str, str], bool] | None = None) -> None:
        """``on_disk(tenant, workspace)``: whether a session's workspace is on the hosts' disk (None: always)."""
        self.hosts: dict[str, MemoryHost] = {}
        self.on_disk = on_disk
        self.calls: list[
            tuple[str, str, HostRequest | hp.PlaceSession | hp.Summarise | hp.WarmSession]
        ] = []  # (host id or "", verb, request)
        self.summaries: list[str] = []  # what summarise answers, in order (empty: no host answers)
        self.volumes: list[str] = []  # the volume each placement or summary was addressed to (one volume here)

    # --- the test's side ---------------------------------------------------------------------------

    def add(self, host_id: str, capacity: int = 4) -> MemoryHost:
        """A host starts (or restarts under the same id: its sessions are gone, as after a real restart)."""
        self.hosts[host_id] = MemoryHost(host_id, capacity)
        return self.hosts[host_id]

    def remove(self, host_id: str) -> None:
        """The host dies: nobody listens on its subjects any more."""
        self.hosts.pop(host_id, None)

    def end_turn(self, session_id: str, attempt_id: str) -> None:
        """The turn reported its end (the test publishes the provider events that say so)."""
        self._session(session_id).playing.pop(attempt_id, None)

    def ask(self, session_id: str, request_id: str) -> None:
        """The runtime asked something (an approval, a question): its callback waits for ``request.respond``."""
        self._session(session_id).pending.add(request_id)

    def session(self, session_id: str) -> MemorySession | None:
        return next((h.sessions[session_id] for h in self.hosts.values() if session_id in h.sessions), None)

    def _session(self, session_id: str) -> MemorySession:
        session = self.session(session_id)
        if session is None:
            raise KeyError(session_id)
        return session

    def verbs(self, verb: str) -> list[Any]:
        return [request for _, v, request in self.calls if v == verb]

    # --- the port ----------------------------------------------------------------------------------

    async def warm(self, request: hp.WarmSession, *, volume: str) -> None:
        self.calls.append(("", "warm", request))  # scripted sessions start at once: nothing to launch ahead

    async def place(
        self, request: hp.PlaceSession, timeout: float | None = None, full: bool = False, *, volume: str
    ) -> hp.SessionPlaced | hp.HostFailure:
        self.volumes.append(volume)
        self.calls.append(("", "shed" if full else "place", request))
        host = next((h for h in self.hosts.values() if request.session_id in h.sessions), None)
        if host is None:
            candidates = list(self.hosts.values()) if full else [h for h in self.hosts.values() if h.has_room]
            if not candidates:
                raise HostGone("no provider host listens on the placement subject")
            host = next((h for h in candidates if h.has_room), None) or self._shed(candidates)
            if host is None:
                return hp.HostFailure(
                    code="capacity", message=f"host {candidates[0].host_id}: no idle session to release"
                )
            capabilities = request.capabilities or DEFAULT_CAPABILITIES
            if request.fork_from is not None:
                if not capabilities.fork:
                    return hp.HostFailure(code="unsupported", message="this profile cannot fork a provider thread")
                native_ref, resumed = f"scripted-{request.provider_thread_id}~fork-of~{request.fork_from}", True
            elif request.native_ref is not None:
                if not request.native_ref.startswith("scripted-"):
                    return hp.HostFailure(
                        code="resume_failed", message=f"the scripted provider has no thread {request.native_ref!r}"
                    )
                native_ref, resumed = request.native_ref, True
            else:
                native_ref, resumed = f"scripted-{request.provider_thread_id}", False
            host.sessions[request.session_id] = MemorySession(request, native_ref, resumed, capabilities)
        session = host.sessions[request.session_id]
        return hp.SessionPlaced(
            host_id=host.host_id,
            boot_id=host.boot_id,
            session_id=request.session_id,
            provider=request.provider,
            provider_thread_id=request.provider_thread_id,
            native_ref=session.native_ref,
            resumed=session.resumed,
            capabilities=session.capabilities,
        )

    @staticmethod
    def _shed(full: list[MemoryHost]) -> MemoryHost | None:
        """A full host releases an idle session to make room (the real hosts' grace period is not modelled)."""
        for host in full:
            idle = next((sid for sid, s in host.sessions.items() if not s.playing), None)
            if idle is not None:
                del host.sessions[idle]
                return host
        return None

    async def start_turn(self, host_id: str, request: hp.StartTurn) -> hp.TurnAccepted | hp.HostFailure:
        return await self.verb(host_id, "turn.start", request)

    async def verb(self, host_id: str, verb: str, request: HostRequest) -> hp.TurnAccepted | hp.HostFailure:
        reply = await self._ask(host_id, verb, request)
        assert isinstance(reply, (hp.TurnAccepted, hp.HostFailure))
        return reply

    async def fork(self, host_id: str, request: hp.ForkThread) -> hp.Forked | hp.HostFailure:
        reply = await self._ask(host_id, "thread.fork", request)
        assert isinstance(reply, (hp.Forked, hp.HostFailure))
        return reply

    async def rollback(
        self, host_id: str, request: hp.RollbackTurns, timeout: float | None = None
    ) -> hp.RolledBack | hp.HostFailure:
        reply = await self._ask(host_id, "thread.rollback", request)
        assert isinstance(reply, (hp.RolledBack, hp.HostFailure))
        return reply

    async def summarise(self, request: hp.Summarise, *, volume: str) -> hp.Summary | hp.HostFailure:
        self.volumes.append(volume)
        self.calls.append(("", "summarise", request))
        if not self.hosts or not self.summaries:
            raise HostUnavailable("no provider host answered the summary request")
        return hp.Summary(text=self.summaries.pop(0))

    async def _ask(self, host_id: str, verb: str, sent: HostRequest) -> Reply:
        self.calls.append((host_id, verb, sent))
        host = self.hosts.get(host_id)
        if host is None:
            raise HostGone(f"no provider host listens on treadle.host.{host_id}.{verb}")
        kind = hp.VERB_REQUESTS.get(verb)
        if kind is None:
            return hp.HostFailure(code="bad_request", message=f"unknown verb {verb}")
        try:  # as the host reads it: the verb says what the request must be
            request = msgspec.json.decode(hp.encode(sent), type=kind)
        except msgspec.ValidationError as exc:
            return hp.HostFailure(code="bad_request", message=str(exc))
        session = host.sessions.get(request.session_id)
        if session is None:
            return hp.HostFailure(code="unknown_session", message=f"session {request.session_id} is not live here")
        caps = session.capabilities
        if isinstance(request, hp.StartTurn):
            if request.attempt_id in session.started:
                return hp.TurnAccepted(already=True)
            placed = session.request
            if request.unhydrated and self.on_disk is not None and not self.on_disk(placed.tenant, placed.workspace):
                return hp.HostFailure(code=hp.WORKSPACE_MISSING, message=f"workspace {placed.workspace} is not here")
            session.started.add(request.attempt_id)
            session.playing[request.attempt_id] = request
            session.turns += 1
            return hp.TurnAccepted()
        if isinstance(request, hp.Respond):
            answer = hp.encode(request.response)
            if request.request_id in session.answered:
                if session.answered[request.request_id] == answer:
                    return hp.TurnAccepted(already=True)
                return hp.HostFailure(code="not_active", message=f"request {request.request_id} was answered already")
            if request.request_id not in session.pending:
                return hp.HostFailure(code="unsupported", message=f"request {request.request_id} is not live")
            session.pending.discard(request.request_id)
            session.answered[request.request_id] = answer
            return hp.TurnAccepted()
        if isinstance(request, hp.ForkThread):
            if not caps.fork:
                return hp.HostFailure(code="unsupported", message="this profile cannot fork a provider thread")
            return hp.Forked(native_ref=f"{session.native_ref}~fork-{len(self.verbs('thread.fork'))}")
        if isinstance(request, hp.RollbackTurns):
            if request.rollback_id in session.rolled_back:
                done = session.rolled_back[request.rollback_id]
                return hp.RolledBack(turns_dropped=done.turns_dropped, turns_left=done.turns_left, already=True)
            if session.playing:
                return hp.HostFailure(code="not_active", message="a turn is playing on this session")
            if not caps.rollback:
                return hp.HostFailure(code="unsupported", message="this profile cannot roll a provider thread back")
            if not 1 <= request.turns <= session.turns:
                return hp.HostFailure(
                    code="bad_request",
                    message=f"the provider thread has {session.turns} turns, cannot drop {request.turns}",
                )
            session.turns -= request.turns
            session.rolled_back[request.rollback_id] = hp.RolledBack(
                turns_dropped=request.turns, turns_left=session.turns
            )
            return session.rolled_back[request.rollback_id]
        if verb == "session.stop":
            del host.sessions[request.session_id]
            return hp.TurnAccepted()
        assert isinstance(request, (hp.StopTurn, hp.SteerTurn))
        if request.attempt_id not in session.playing:
            return hp.HostFailure(code="not_active", message=f"attempt {request.attempt_id} is not playing here")
        if isinstance(request, hp.StopTurn):  # turn.interrupt
            if not caps.interrupt:
                return hp.HostFailure(code="unsupported", message="this profile cannot interrupt a turn")
            session.interrupted.append(request.attempt_id)
            return hp.TurnAccepted()
        if request.message_id in session.steered:
            return hp.TurnAccepted(already=True)
        if not caps.active_steering:
            return hp.HostFailure(code="unsupported", message="this profile cannot steer an active turn")
        session.steered.add(request.message_id)
        return hp.TurnAccepted()
