"""Events of runs, their attempts and nodes, steering and interrupts."""

from __future__ import annotations

from typing import Any

from treadle.core.checkpoints.events import CheckpointCaptured
from treadle.core.envelope import Payload, event
from treadle.core.lineage.events import ContextRequest
from treadle.core.run.started import RunStarted as RunStarted
from treadle.core.thread.events import MessageCompleted


@event("run.queued", local=True, other_runs=False, provider_threads=False, indexes=("run_id", "root_node_id"))
class RunQueued(Payload, kw_only=True):
    """L2.1 in one fact: the user message, its run (ordinal N) with root node and first attempt, and — when
    nothing else is active — its dispatch. One event, so the decision is atomic without a batch."""

    run_id: str
    ordinal: int
    message_id: str
    text: str
    author: str | None = None
    root_node_id: str
    attempt_id: str
    mode: str
    disposition: str
    dispatched: bool = False
    provider: str
    model: str | None = None
    script: dict[str, Any] | None = None
    supersedes_run_id: str | None = None  # L3.4: the message was a steer of this run, which had answered already
    front: bool = False  # queued at the head (start_immediately behind a run being interrupted)
    context: ContextRequest | None = None  # L5.4 clean context / L7.1 merge-back asked with the message


@event("run.dispatched", local=True, other_runs=False, provider_threads=False)
class RunDispatched(Payload, kw_only=True):
    run_id: str


@event("run.held", local=True, other_runs=False, provider_threads=False)
class RunHeld(Payload, kw_only=True):
    """L9.3: no provider host can take the run's attempt now; the run waits ``queued`` for ``reason``
    (``capacity``: every host is busy; ``tenant_quota``: its tenant is at a limit; ``sandbox_unavailable``: no host
    that answered can sandbox its runtime) and starts once room frees."""

    run_id: str
    attempt_id: str
    reason: str


class RunEnded(Payload, kw_only=True):
    """A terminal run carries its checkpoint (L10.2): the barrier's last step and its result land together.

    ``message``: the completion of the turn's last message, when the provider reported it in the same burst as
    the turn's end. It folds exactly as a ``message.completed`` right before this event would (logs written
    before it have that event instead), so an ordinary run is one event shorter.

    ``started``: the run's start, when the provider reported the turn's start in the same burst as its end (a
    turn that was over as soon as it began). It folds exactly as a ``run.started`` right before this event (and
    its ``message``) would; logs written before have that event instead, and a turn whose start comes alone
    still gets its ``run.started`` at once."""

    run_id: str
    attempt_id: str
    checkpoint: CheckpointCaptured | None = None
    error: str | None = None
    message: MessageCompleted | None = None
    started: RunStarted | None = None


@event("run.completed", local=True, other_runs=False, provider_threads=True, ends_run="completed")
class RunCompleted(RunEnded, kw_only=True):
    """A run's end as completed: its checkpoint and (``message``) the turn's last message when reported with the end."""


@event("run.failed", local=True, other_runs=False, provider_threads=True, ends_run="failed")
class RunFailed(RunEnded, kw_only=True):
    """A run's end as failed: its checkpoint and (``message``) the turn's last message when reported with the end."""


@event("run.interrupted", local=True, other_runs=False, provider_threads=True, ends_run="interrupted")
class RunInterrupted(RunEnded, kw_only=True):
    """A run's end as interrupted: its checkpoint and (``message``) the turn's last message when reported with the end."""


@event("run.cancelled", local=True, other_runs=False, provider_threads=True, ends_run="cancelled")
class RunCancelled(RunEnded, kw_only=True):
    """A run's end as cancelled: its checkpoint and (``message``) the turn's last message when reported with the end."""


@event("attempt.started", local=True, other_runs=False, provider_threads=False, indexes=("root_node_id",))
class AttemptStarted(Payload, kw_only=True):
    """A further attempt at a run (recovery, steering restart); the first attempt comes with run.queued."""

    run_id: str
    attempt_id: str
    root_node_id: str
    reason: str
    message_ids: list[str] = []  # the steering messages this attempt carries (reason steering_restart)
    script: dict[str, Any] | None = None


@event("attempt.ended", local=True, other_runs=False, provider_threads=False)
class AttemptEnded(Payload, kw_only=True):
    """An attempt that will not complete its run (lost with its provider, interrupted, failed)."""

    run_id: str
    attempt_id: str
    status: str
    reason: str | None = None


@event("node.started", local=True, other_runs=False, provider_threads=False, indexes=("node_id",))
class NodeStarted(Payload, kw_only=True):
    node_id: str
    run_id: str
    attempt_id: str
    parent_id: str | None = None
    kind: str
    title: str = ""
    input: dict[str, Any] | None = None
    native_thread_ref: str | None = None  # L6.4: the provider thread a subagent owns (forkable natively)


@event("node.completed", local=True, other_runs=False, provider_threads=False)
class NodeCompleted(Payload, kw_only=True):
    node_id: str
    run_id: str
    status: str = "completed"
    output: str | None = None


@event("run.warning", local=True, other_runs=False, provider_threads=False)
class RunWarning(Payload, kw_only=True):
    """A provider error that does not end the run (L2.5)."""

    run_id: str
    message: str


@event("run.steered", local=True, other_runs=False, provider_threads=False)
class RunSteered(Payload, kw_only=True):
    """A user message that steers the active run (L3.2/L3.3): attached to the run, delivered by the
    supervisor natively or through an interrupt and a replacement attempt."""

    run_id: str
    message_id: str
    text: str
    author: str | None = None
    steering: str  # native | restart (restart_active, or no active steering)
    script: dict[str, Any] | None = None


@event("steer.delivered", local=True, other_runs=False, provider_threads=False)
class SteerDelivered(Payload, kw_only=True):
    """The provider accepted a native steer into the attempt's turn."""

    run_id: str
    attempt_id: str
    message_id: str


@event("steer.joined", local=False, other_runs=False, provider_threads=False)
class SteerJoined(Payload, kw_only=True):
    """The runtime reported where a native steer joined its conversation (L3.2): the steer takes its place in
    the thread's messages here, after what the runtime reported before it. The steer is appended when the user
    sends it, and what the runtime said before taking it in (text already streamed) can be stored later."""

    run_id: str
    attempt_id: str
    message_id: str


@event("interrupt.requested", local=True, other_runs=False, provider_threads=False)
class InterruptRequested(Payload, kw_only=True):
    """L8.1: someone asked; the run ends only when the provider says so (L8.2)."""

    run_id: str
    attempt_id: str
    reason: str = "user"  # user | steering | preempted
    by: str | None = None


@event("interrupt.sent", local=True, other_runs=False, provider_threads=False)
class InterruptSent(Payload, kw_only=True):
    """How the interrupt reached the provider: ``native`` or ``stop_session`` (L8.3's degradation)."""

    run_id: str
    attempt_id: str
    path: str
