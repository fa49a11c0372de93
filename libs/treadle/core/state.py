"""The composed thread state and ``evolve``: every concept's slice of the thread in one struct.

One fold serves every reader: the coordinator and the supervisor decide on it, the projection writer
stores it as the thread's read model, and ``treadle check`` compares the two. How each event changes the
state lives with its concept (``run.evolve``, ``lineage.evolve``, ``rollback.evolve`` ...); this module
routes every event to its handler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from operator import attrgetter
from typing import Any, TypeVar

import msgspec

from treadle.core.activity import Activity
from treadle.core.checkpoints import evolve as checkpoints_fold
from treadle.core.checkpoints.model import Checkpoint
from treadle.core.coverage import Completed, Coverage
from treadle.core.envelope import Envelope
from treadle.core.lineage import evolve as lineage_fold
from treadle.core.lineage.model import ContextHandoff, ContextTransfer, Lineage, StartContext
from treadle.core.lookup import Groups, Index
from treadle.core.plans import evolve as plans_fold
from treadle.core.plans.model import Plan
from treadle.core.providers import evolve as providers_fold
from treadle.core.providers.capabilities import CapabilityView
from treadle.core.providers.model import ProviderSession, ProviderThread
from treadle.core.requests import evolve as requests_fold
from treadle.core.requests.model import RuntimeRequest
from treadle.core.rollback import evolve as rollback_fold
from treadle.core.rollback.model import Rollback
from treadle.core.run import evolve as run_fold
from treadle.core.run import steering as steering_fold
from treadle.core.run.model import Attempt, Run
from treadle.core.thread import evolve as thread_fold
from treadle.core.thread.model import Message, Thread
from treadle.core.touched import Touched

PROVIDER_CAUSE = "prov:"
X = TypeVar("X")


def provider_cause(seq: int, index: int = 0, attempt_id: str = "") -> str:
    """The causation id of events derived from provider-stream message ``seq``: its ``index`` in the play of
    ``attempt_id``. Events so caused may concern other attempts (a replacement, a superseding run)."""
    return f"{PROVIDER_CAUSE}{seq}:{index}:{attempt_id}"


def _id(x: Any) -> Any:
    return x.id


def _command_id(m: Message) -> str | None:
    return m.command_id


def _run_id(x: Any) -> Any:
    return x.run_id


# dict=True: the lookup indexes (``_ix``) and a watching writer's record of what the folds rewrote (``_touched``)
# ride along as attributes that are neither fields nor encoded.
class ThreadState(msgspec.Struct, kw_only=True, dict=True):
    thread: Thread | None = None
    seq: int = 0
    messages: list[Message] = msgspec.field(default_factory=list)
    runs: list[Run] = msgspec.field(default_factory=list)
    queue: list[str] = msgspec.field(default_factory=list)
    active_run_id: str | None = None
    sessions: list[ProviderSession] = msgspec.field(default_factory=list)
    provider_threads: list[ProviderThread] = msgspec.field(default_factory=list)
    requests: list[RuntimeRequest] = msgspec.field(default_factory=list)
    plans: list[Plan] = msgspec.field(default_factory=list)
    checkpoints: list[Checkpoint] = msgspec.field(default_factory=list)
    activity: list[Activity] = msgspec.field(default_factory=list)
    provider_seq: int = 0  # last provider-stream sequence folded in (supervisor idempotency)
    # UTF-8 bytes of every message's text and JSON bytes of every run's script (the thread-text quota), kept by
    # the fold: summing them per command made each send cost more the longer the thread
    text_bytes: int = 0
    capabilities: CapabilityView | None = None  # what clients can do with the live provider
    rollbacks: list[Rollback] = msgspec.field(default_factory=list)  # L10.5/L10.6, in the order requested
    lineage: Lineage | None = None  # L6: parent, root and children of a forked thread
    transfers: list[ContextTransfer] = msgspec.field(default_factory=list)  # L6/L7 context transfers
    start_contexts: list[StartContext] = msgspec.field(default_factory=list)  # how each run's context was resolved
    handoffs: list[ContextHandoff] = msgspec.field(default_factory=list)  # L5.5 handoff artifacts
    last_activity_at: datetime | None = None  # the ``at`` of the newest event folded in (the thread lists)

    # --- lookups (by index over the append-only lists, see ``lookup``; reverse scans for short lists) ---

    def _index(self, name: str, make: Callable[[], X]) -> X:
        ix: dict[str, Any] | None = self.__dict__.get("_ix")
        if ix is None:
            ix = self.__dict__["_ix"] = {}
        found = ix.get(name)
        if found is None:
            found = ix[name] = make()
        return found  # stored by this method under the same name

    def run(self, run_id: str) -> Run | None:
        return self._index("runs", lambda: Index[Run](_id)).find(self.runs, run_id)

    def position(self, name: str, item_id: str) -> int | None:
        """Where the run, message or handoff (``name``: "runs", "messages", "handoffs") with this id is in its
        list (the newest with it)."""
        items: list[Any] = getattr(self, name)
        return self._index(name, lambda: Index[Any](_id)).position(items, item_id)

    @property
    def active_run(self) -> Run | None:
        return self.run(self.active_run_id) if self.active_run_id else None

    def message(self, message_id: str) -> Message | None:
        return self._index("messages", lambda: Index[Message](_id)).find(self.messages, message_id)

    def message_for_command(self, command_id: str) -> Message | None:
        return self._index("message_commands", lambda: Index[Message](_command_id)).find(self.messages, command_id)

    def run_messages(self, run_id: str) -> list[Message]:
        """The messages of one run, in order."""
        return self._index("run_messages", lambda: Groups[Message](_run_id)).of(self.messages, run_id)

    def run_message_positions(self, run_id: str) -> list[int]:
        """Where the messages of one run are in ``messages``, in order."""
        return self._index("run_messages", lambda: Groups[Message](_run_id)).positions(self.messages, run_id)

    def run_activity_positions(self, run_id: str) -> list[int]:
        """Where the activity of one run is in ``activity``, in order."""
        return self._index("run_activity", lambda: Groups[Activity](attrgetter("run_id"))).positions(
            self.activity, run_id
        )

    def checkpoint_positions(self, by: str, value: Any) -> list[int]:
        """Where the checkpoints whose ``by`` ("id", "ordinal", "run_id") is ``value`` are, in order."""
        return self._index(f"checkpoints.{by}", lambda: Groups[Checkpoint](attrgetter(by))).positions(
            self.checkpoints, value
        )

    def run_checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The checkpoints captured for one run (its root and child scopes), in order."""
        return [self.checkpoints[i] for i in self.checkpoint_positions("run_id", run_id)]

    def messages_moved(self, positions: Iterable[int], left: Iterable[str | None] = ()) -> None:
        """Messages (at ``positions`` now) changed runs (a steer carried over to the run that supersedes its own:
        ``left``, the runs they left) or places (a steer joining where its runtime took it in): index them
        again, and record both for a watching writer (``touch``)."""
        for name in ("messages", "message_commands", "run_messages"):
            self.__dict__.get("_ix", {}).pop(name, None)
        touched: Touched | None = self.__dict__.get("_touched")
        if touched is not None:
            touched.add("messages", positions)
            touched.left.update(run_id for run_id in left if run_id is not None)

    # --- what the folds rewrite, recorded while a writer watches (``core.touched``) ---

    def watch(self) -> Touched:
        """Record from now on which items of the long lists the folds rewrite, in a fresh record (the projection
        writer's, per batch). Kept beside the fields like the indexes: never encoded, never compared, and a
        state nobody watches (the coordinator's, the supervisor's) records nothing."""
        touched = self.__dict__["_touched"] = Touched()
        return touched

    def touch(self, name: str, *positions: int) -> None:
        """The fold rewrote the items at ``positions`` of list ``name`` (one of ``touched.LISTS``)."""
        touched: Touched | None = self.__dict__.get("_touched")
        if touched is not None:
            touched.add(name, positions)

    def touch_id(self, name: str, item_id: str) -> None:
        """The fold rewrote the run, message or handoff (``name``: "runs", "messages", "handoffs") with this id."""
        touched: Touched | None = self.__dict__.get("_touched")
        if touched is not None and (at := self.position(name, item_id)) is not None:
            touched.add(name, (at,))

    def checkpoint(self, ordinal: int, scope: str = "root") -> Checkpoint | None:
        for c in reversed(self.checkpoints):
            if c.ordinal == ordinal and c.scope == scope and not c.stale:
                return c
        return None

    def session(self, session_id: str) -> ProviderSession | None:
        for s in reversed(self.sessions):
            if s.id == session_id:
                return s
        return None

    @property
    def live_session(self) -> ProviderSession | None:
        s = self.sessions[-1] if self.sessions else None
        return s if s is not None and s.status == "live" else None

    @property
    def provider_thread(self) -> ProviderThread | None:
        for p in reversed(self.provider_threads):
            if p.status == "active":
                return p
        return None

    def request(self, request_id: str) -> RuntimeRequest | None:
        return self._index("requests", lambda: Index[RuntimeRequest](_id)).find(self.requests, request_id)

    def provider_thread_of(self, pth_id: str | None) -> ProviderThread | None:
        for p in self.provider_threads:
            if p.id == pth_id:
                return p
        return None

    def session_thread(self, session_id: str | None) -> ProviderThread | None:
        """The provider thread a session was attached to (the newest such)."""
        for p in reversed(self.provider_threads):
            if p.session_id == session_id:
                return p
        return None

    def covers(self, pth: ProviderThread, ordinal: int) -> bool:
        """``ordinal in pth.covered_ordinals``, without a scan."""
        return ordinal in self._index(f"coverage:{pth.id}", Coverage).covered(pth.covered_ordinals)

    def uncovered(self, pth: ProviderThread, before: int) -> bool:
        """Whether a completed run with an ordinal below ``before`` is not in ``pth.covered_ordinals`` (L5.3)."""
        completed = self._index("completed", Completed).current(self.runs)
        missing = self._index(f"coverage:{pth.id}", Coverage).of(completed, pth.covered_ordinals)
        return any(o < before for o in missing)

    def start_context(self, run_id: str) -> StartContext | None:
        return self._index("start_contexts", lambda: Index[StartContext](_run_id)).find(self.start_contexts, run_id)

    def transfer(self, transfer_id: str) -> ContextTransfer | None:
        for t in self.transfers:
            if t.id == transfer_id:
                return t
        return None

    def handoff(self, handoff_id: str) -> ContextHandoff | None:
        for h in reversed(self.handoffs):
            if h.id == handoff_id:
                return h
        return None


def evolve(state: ThreadState, e: Envelope) -> ThreadState:
    """Fold one event into ``state`` (in place) and return it. Events at or below ``state.seq`` are no-ops."""
    if e.seq is not None:
        if e.seq <= state.seq:
            return state
        state.seq = e.seq
    if state.last_activity_at is None or e.at > state.last_activity_at:
        state.last_activity_at = e.at
    handler = _HANDLERS.get(type(e.data))
    if handler is not None:
        handler(state, e, e.data)
    if (completed := state.__dict__.get("_ix", {}).get("completed")) is not None:
        completed.after(state.runs, e.data, state.run)
    if e.causation_id and e.causation_id.startswith(PROVIDER_CAUSE):
        seq, _, rest = e.causation_id[len(PROVIDER_CAUSE) :].partition(":")
        index, _, attempt_id = rest.partition(":")
        state.provider_seq = max(state.provider_seq, int(seq))
        if index and int(index) and (att := _reporting_attempt(state, e.data, attempt_id)) is not None:
            att.provider_index = max(att.provider_index, int(index))
            state.touch_id("runs", att.run_id)  # the attempt may be another run's than the event names
    return state


def _reporting_attempt(state: ThreadState, data: object, attempt_id: str) -> Attempt | None:
    """The attempt whose play reported the provider event: the one named in the causation id, else the run's
    current attempt."""
    if not attempt_id:
        run = state.run(getattr(data, "run_id", "") or "")
        return run.attempt if run is not None else None
    for run in reversed(state.runs):
        for att in run.attempts:
            if att.id == attempt_id:
                return att
    return None


def fold(events: Iterable[Envelope], state: ThreadState | None = None) -> ThreadState:
    state = state or ThreadState()
    for e in events:
        evolve(state, e)
    return state


_HANDLERS = (
    thread_fold.FOLDS
    | run_fold.FOLDS
    | steering_fold.FOLDS
    | providers_fold.FOLDS
    | requests_fold.FOLDS
    | plans_fold.FOLDS
    | checkpoints_fold.FOLDS
    | lineage_fold.FOLDS
    | rollback_fold.FOLDS
)
