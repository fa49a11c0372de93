"""The adapter contract. Orchestration sees only this and the capabilities an adapter declares."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.core.providers.model import ProviderCapabilities

from .mcp_access import McpAccess
from .native_state import NativeFiles

if TYPE_CHECKING:
    from .protocol import PlaceSession


SPARE_THREAD = "spare"  # the thread a spare runtime is started for: none yet (``take_workspace`` names its own)


class Unsupported(Exception):
    """The adapter lacks the capability; orchestration applies the degradation policy instead."""


class ResumeFailed(Exception):
    """L9.4, from ``open_thread``: the provider thread cannot be resumed (a runtime condition, not a missing
    capability); orchestration continues the conversation on a replacement provider thread."""


class UnknownProvider(ValueError):
    """The provider is not served by this host (an ACP agent it has no settings for): the run fails with this
    reason instead of waiting for a placement that can never succeed."""


class RuntimeLost(Exception):
    """L9.3, from ``run_turn``: the runtime died under the turn. The host stops the session (reason
    ``provider_crashed``) instead of failing the turn, so the run is retried on a resumed provider thread."""


class TurnSink(Protocol):
    """Where an adapter reports a turn: normalised events (durable) and raw text (live)."""

    async def event(self, body: pe.AnyBody) -> None: ...
    async def text(self, message_id: str, node_id: str, chunk: str) -> None: ...
    async def text_done(self, message_id: str, node_id: str, text: str) -> None: ...


class Turn:
    """One provider turn as an adapter sees it."""

    def __init__(
        self,
        *,
        run_id: str,
        attempt_id: str,
        root_node_id: str,
        text: str,
        script: dict[str, Any] | None,
        ids: IdFactory,
        recovery: bool = False,
    ) -> None:
        self.run_id = run_id
        self.attempt_id = attempt_id
        self.root_node_id = root_node_id
        self.text = text
        self.script = script
        self.ids = ids
        self.recovery = recovery  # L9.3: the retry of a turn a failure cut off
        self.native_ref: str | None = None  # the runtime's own turn id, once the adapter knows it

    def prompt_after(self, held: str | None) -> str:
        """What to send, ``held`` being the last user message the provider thread holds: a recovery whose
        cut-off prompt the thread already holds sends ``RECOVERY_NOTE`` instead, so the model sees the request
        once and is told what happened (a failure, not the user). A runtime may put its own context before the
        prompt in the same message (Claude Code's local commands): the message ends with the prompt."""
        held_it = held is not None and bool(self.text) and held.endswith(self.text)
        return RECOVERY_NOTE if self.recovery and held_it else self.text


# L9.3: what the model is told when the turn a failure cut off is retried on its own provider thread
RECOVERY_NOTE = (
    "[Treadle] Your previous turn on the request above was cut off by a failure (its runtime or host stopped), "
    "not by the user, and is being retried now. Carry on with that request; some of its actions may have run "
    "already, so check the current state before repeating them."
)


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A user's answer to a live runtime request (L11.2/L11.4), provider-neutral.

    Approvals carry ``decision``: accept | accept_for_session | decline | cancel (``message`` explains a
    decline to the agent). Questions carry ``answers``: question id (or "0" for a single free-text
    question) → the chosen option label or the typed text.
    """

    decision: Literal["accept", "accept_for_session", "decline", "cancel"] | None = None
    answers: dict[str, str] | None = None
    message: str | None = None


class ProviderAdapter(abc.ABC):
    name: str
    capabilities: ProviderCapabilities
    mcp_access: McpAccess | None = None  # issue 21: set by the host before the runtime starts
    warms = False  # its runtime's start is worth launching ahead of the placement (``warm``)
    spares = False  # a runtime of it may be started before its thread exists (``take_workspace``)

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    @property
    def offers_orchestrator(self) -> bool:
        """Issue 21: the runtime was given the orchestrator's MCP server (published as a capability)."""
        return self.mcp_access is not None

    @abc.abstractmethod
    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        """Resume ``native_ref`` (L9.2, required) or create a provider thread. Returns (native ref, resumed)."""

    @abc.abstractmethod
    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        """Play one turn to its end, reporting through ``sink``; ends with ``TurnCompleted``."""

    async def steer(self, turn: Turn, text: str, message_id: str | None = None) -> None:
        """L3.2: add ``text`` (Treadle's message ``message_id``) to the playing ``turn`` natively. Called only when
        ``active_steering``. A runtime that says where the steer joined its conversation reports
        ``SteerJoined(message_id)`` there, so the steer is listed after what the runtime said before it."""
        raise Unsupported("this provider cannot steer an active turn")

    async def interrupt(self, turn: Turn) -> None:
        """L8.1: ask the runtime to stop ``turn``. Returning is only an acknowledgement (L8.2): the turn
        still ends through ``run_turn`` reporting ``TurnCompleted(status="interrupted")``."""
        raise Unsupported("this provider cannot interrupt a turn")

    async def respond(self, request_id: str, response: Response) -> None:
        """L11.2: answer the live request ``request_id`` (the id the adapter put in ``RequestOpened``).
        Raises ``Unsupported`` when the callback is gone (the request becomes ``not_resumable``)."""
        raise Unsupported("this provider has no live requests")

    async def fork(self, at_turn_ref: str | None) -> str:
        """L6.2: fork the open provider thread natively (after ``at_turn_ref``, or at its end); returns the
        new thread's native ref, which a later ``open_thread`` resumes."""
        raise Unsupported("this provider cannot fork natively")

    async def rollback(self, turns: int) -> dict[str, Any] | None:
        """L10.5: drop the last ``turns`` turns of the open provider thread; returns the provider's
        snapshot of what remains when it gives one."""
        raise Unsupported("this provider cannot roll its conversation back")

    async def snapshot(self) -> dict[str, Any]:
        """The provider's own view of the open thread (capability ``read_snapshot``)."""
        raise Unsupported("this provider has no readable snapshot")

    async def native_state(self) -> NativeFiles | None:
        """Issue 35: the files the runtime needs to resume the open provider thread natively, for the host to
        keep off the node after each turn (it stores what changed since); None: nothing to keep. Called after
        every turn: cheap (no search of the runtime's home once the files are known)."""
        return None

    async def restore_native_state(
        self, native_ref: str, fetch: Callable[[], Awaitable[dict[str, bytes] | None]]
    ) -> bool:
        """Issue 35, before ``open_thread(native_ref)``: when the runtime's own state of ``native_ref`` is missing
        here (another node, a lost disk), put back what ``fetch`` returns (the kept files by relative name, each
        name plain and every byte checked; None when none were kept). True when it restored something; raises ``native_state.NativeStateRefused`` for bytes it will not
        write (the resume then fails over to the replacement path as without them)."""
        return False

    async def warm(self) -> None:
        """Launch the runtime (sandbox, process, handshake) before any provider thread is opened, for a placement
        of this very session to adopt (provider_host/warm.py). Only adapters with ``warms`` are warmed."""
        return None

    async def take_workspace(self, workspace: Path, request: PlaceSession) -> None:
        """A spare runtime (``spares``: started for its tenant before any thread, provider_host/spares.py) becomes
        ``request``'s session, working in ``workspace`` from the thread it opens next."""
        raise Unsupported("this provider keeps no spare runtimes")

    def adopt(self, request: PlaceSession) -> None:
        """The placement of the session this adapter was warmed for (same tenant, thread, session and settings:
        ``WarmSession.matches``) takes it over; it names the provider thread."""
        raise Unsupported("this provider is not warmed ahead of its placement")

    async def abandon(self) -> None:
        """The host lets go of the session without anyone asking (it is stopping; L9.3 retries its turns on
        another host): a runtime that would record its cancelled turn as the user's interruption is stopped as
        a crash stops it. ``close`` follows. Default: nothing to do."""
        return None

    async def close(self) -> None:
        """Release the runtime (idle reaper, host stop). The provider thread survives (L9.3)."""
        return None
