"""Requests to provider hosts: ``treadle.place.<volume>`` (queue group of the hosts with room),
``treadle.host.<host_id>.<verb>``, ``treadle.summarise.<volume>`` (queue group of every host) and
``treadle.warm.<volume>`` (a hint, no reply: start the runtime of a session about to be placed)."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.providers.model import ProviderCapabilities

from .base import Response


class PlaceSession(msgspec.Struct, kw_only=True):
    tenant: str
    thread: str
    provider: str
    session_id: str
    provider_thread_id: str
    native_ref: str | None = None  # resume this provider thread (L9.2) instead of creating one
    workspace: str
    runtime_mode: str = "approval_required"
    model: str | None = None
    capabilities: ProviderCapabilities | None = None  # a scripted capability profile
    fork_from: str | None = None  # L6.2: open a native fork of this provider thread instead (native_ref unused)
    fork_at_turn: str | None = None  # ...forked after this provider turn (None: at its end)
    ephemeral: bool = False  # L5.5: a throwaway provider thread (a summary): the runtime keeps nothing of it


WORKSPACE_MISSING = "workspace_missing"  # an unhydrated turn's workspace is not on the host's disk (StartTurn)


class WarmSession(msgspec.Struct, kw_only=True):
    """A run of a new thread is on its way to a placement with this session id: a host may launch its runtime
    (sandbox, process, handshake) now, and the placement that names the same session, tenant, thread and
    settings adopts it. Everything the runtime holds is this session's: nothing is shared across threads."""

    tenant: str
    thread: str
    provider: str
    session_id: str
    workspace: str
    runtime_mode: str = "approval_required"
    model: str | None = None
    # Sent when the thread is created, before any run asks for it: launched only into room the pool has, never
    # stopping another runtime (a tenant creating threads in a loop cannot churn the host's runtimes).
    speculative: bool = False

    def matches(self, request: PlaceSession) -> bool:
        """The placement opens a fresh provider thread of this very session (never a resume or a fork)."""
        return (
            request.native_ref is None
            and request.fork_from is None
            and not request.ephemeral
            and (request.tenant, request.thread, request.provider, request.session_id, request.workspace)
            == (self.tenant, self.thread, self.provider, self.session_id, self.workspace)
            and (request.runtime_mode, request.model) == (self.runtime_mode, self.model)
        )

    def placement(self) -> PlaceSession:
        """The session the runtime is launched as (its provider thread is named at adoption)."""
        return PlaceSession(
            tenant=self.tenant,
            thread=self.thread,
            provider=self.provider,
            session_id=self.session_id,
            provider_thread_id="pth_warm",
            workspace=self.workspace,
            runtime_mode=self.runtime_mode,
            model=self.model,
        )


class StartTurn(msgspec.Struct, kw_only=True):
    session_id: str
    tenant: str
    thread: str
    run_id: str
    attempt_id: str
    root_node_id: str
    text: str
    script: dict[str, Any] | None = None
    recovery: bool = False  # L9.3: the retry of a turn a failure cut off (the provider thread may hold its prompt)
    # The supervisor did not hydrate the workspace (it saw it captured under this live session): the host refuses
    # the turn with ``workspace_missing`` when the workspace is not on its disk, and the supervisor hydrates then.
    unhydrated: bool = False


class SteerTurn(msgspec.Struct, kw_only=True):
    session_id: str
    attempt_id: str
    message_id: str  # hosts deliver each steer once, however often it is sent
    text: str


class StopTurn(msgspec.Struct, kw_only=True):
    """``turn.interrupt`` (native, L8.1) or ``session.stop`` (L8.3: the whole runtime goes)."""

    session_id: str
    attempt_id: str


class ForkThread(msgspec.Struct, kw_only=True):
    """``thread.fork`` (L6.2): natively fork the live session's provider thread after ``at_turn`` (None: its end)."""

    session_id: str
    at_turn: str | None = None


class Forked(msgspec.Struct, kw_only=True, tag="forked"):
    native_ref: str


class RollbackTurns(msgspec.Struct, kw_only=True):
    """``thread.rollback`` (L10.5): drop the last ``turns`` turns of the live session's provider thread
    (the adapter's ``rollback``). ``rollback_id`` names the thread's rollback: a repeated request for the
    same rollback gets the first answer instead of dropping turns twice."""

    session_id: str
    rollback_id: str
    turns: int


class RolledBack(msgspec.Struct, kw_only=True, tag="rolled_back"):
    turns_dropped: int
    turns_left: int | None = None  # when the provider says how many turns remain
    already: bool = False


class Respond(msgspec.Struct, kw_only=True):
    session_id: str
    request_id: str
    response: Response


class SessionPlaced(msgspec.Struct, kw_only=True, tag="placed"):
    host_id: str
    boot_id: str
    session_id: str
    provider: str
    provider_thread_id: str
    native_ref: str
    resumed: bool
    capabilities: ProviderCapabilities


class TurnAccepted(msgspec.Struct, kw_only=True, tag="accepted"):
    already: bool = False


class Summarise(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """L5.5: ask a provider for a handoff summary: one turn on a throwaway provider thread in an empty scratch
    workspace (nothing of a tenant's files is reachable; runtime requests are declined)."""

    tenant: str
    provider: str
    text: str  # the whole prompt (summarise.provider_prompt)
    model: str | None = None
    script: dict[str, Any] | None = None  # the scripted provider's steps (tests)
    timeout: float = 60.0  # seconds the turn may take


class Summary(msgspec.Struct, kw_only=True, tag="summary"):
    text: str


class HostFailure(msgspec.Struct, kw_only=True, tag="failure"):
    code: str  # unknown_session | bad_request | provider_error | capacity | tenant_quota | not_active | unsupported
    #   | resume_failed | unknown_provider (an ACP agent the host has no settings for: the run fails)
    #   | sandbox_unavailable (the host cannot sandbox a runtime: the placement is retried, the run waits)
    message: str
    retry_after: float | None = None  # capacity, tenant_quota: seconds until room may be made (an idle session's grace)


place_reply = msgspec.json.Decoder(SessionPlaced | HostFailure)
warm_request = msgspec.json.Decoder(WarmSession)
turn_reply = msgspec.json.Decoder(TurnAccepted | HostFailure)
fork_reply = msgspec.json.Decoder(Forked | HostFailure)
rollback_reply = msgspec.json.Decoder(RolledBack | HostFailure)
summary_reply = msgspec.json.Decoder(Summary | HostFailure)
summarise_request = msgspec.json.Decoder(Summarise)
place_request = msgspec.json.Decoder(PlaceSession)
turn_request = msgspec.json.Decoder(StartTurn)
VERB_REQUESTS = {
    "turn.start": StartTurn,
    "turn.steer": SteerTurn,
    "turn.interrupt": StopTurn,
    "session.stop": StopTurn,
    "request.respond": Respond,
    "thread.fork": ForkThread,
    "thread.rollback": RollbackTurns,
}
encode = msgspec.json.Encoder().encode
