"""What a concept's decisions and folds see of the composed thread state.

Slices are typed against this Protocol, not against :class:`treadle.core.state.ThreadState`, so the state
module can compose them without any slice importing it. ``ThreadState`` is its one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from treadle.core.activity import Activity
from treadle.core.checkpoints.model import Checkpoint
from treadle.core.envelope import Envelope, Payload
from treadle.core.lineage.model import ContextHandoff, ContextTransfer, Lineage, StartContext
from treadle.core.plans.model import Plan
from treadle.core.providers.capabilities import CapabilityView
from treadle.core.providers.model import ProviderSession, ProviderThread
from treadle.core.requests.model import RuntimeRequest
from treadle.core.rollback.model import Rollback
from treadle.core.run.model import Run
from treadle.core.thread.model import Message, Thread


class ThreadView(Protocol):
    thread: Thread | None
    seq: int
    messages: list[Message]
    runs: list[Run]
    queue: list[str]
    active_run_id: str | None
    sessions: list[ProviderSession]
    provider_threads: list[ProviderThread]
    requests: list[RuntimeRequest]
    plans: list[Plan]
    checkpoints: list[Checkpoint]
    activity: list[Activity]
    provider_seq: int
    text_bytes: int
    capabilities: CapabilityView | None
    rollbacks: list[Rollback]
    lineage: Lineage | None
    transfers: list[ContextTransfer]
    start_contexts: list[StartContext]
    handoffs: list[ContextHandoff]

    # --- lookups (reverse scans: the newest entity is nearly always the one asked for) ---

    def run(self, run_id: str) -> Run | None: ...

    @property
    def active_run(self) -> Run | None: ...

    def message(self, message_id: str) -> Message | None: ...

    def message_for_command(self, command_id: str) -> Message | None: ...

    def run_messages(self, run_id: str) -> list[Message]: ...

    def position(self, name: str, item_id: str) -> int | None:
        """Where the run, message or handoff (``name``) with this id is in its list."""
        ...

    def messages_moved(self, positions: Iterable[int], left: Iterable[str | None] = ()) -> None:
        """Say that messages (at ``positions`` now) changed runs (``left``: the runs they left) or places."""
        ...

    def touch(self, name: str, *positions: int) -> None:
        """Say that the fold rewrote the items at ``positions`` of the long list ``name`` (``core.touched``)."""
        ...

    def touch_id(self, name: str, item_id: str) -> None:
        """Say that the fold rewrote the run, message or handoff (``name``) with this id."""
        ...

    def checkpoint(self, ordinal: int, scope: str = "root") -> Checkpoint | None: ...

    def session(self, session_id: str) -> ProviderSession | None: ...

    @property
    def live_session(self) -> ProviderSession | None: ...

    @property
    def provider_thread(self) -> ProviderThread | None: ...

    def request(self, request_id: str) -> RuntimeRequest | None: ...

    def provider_thread_of(self, pth_id: str | None) -> ProviderThread | None: ...

    def session_thread(self, session_id: str | None) -> ProviderThread | None:
        """The provider thread a session was attached to (the newest such)."""
        ...

    def covers(self, pth: ProviderThread, ordinal: int) -> bool:
        """``ordinal in pth.covered_ordinals``, without a scan."""
        ...

    def uncovered(self, pth: ProviderThread, before: int) -> bool:
        """Whether a completed run with an ordinal below ``before`` is not in ``pth.covered_ordinals``."""
        ...

    def start_context(self, run_id: str) -> StartContext | None: ...

    def transfer(self, transfer_id: str) -> ContextTransfer | None: ...

    def handoff(self, handoff_id: str) -> ContextHandoff | None: ...


Fold = Callable[[ThreadView, Envelope, Any], None]
"""How one event type changes the state: ``(state, envelope, envelope.data)``; each concept's ``FOLDS`` maps
its event types to these."""
Folds = dict[type[Payload], Fold]
