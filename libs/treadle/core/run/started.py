"""The run's start (``run.started``), apart from the run's other events: a message's first delta can carry it
(``MessageDelta.started``), and the thread's events may not import the run's (those import them)."""

from __future__ import annotations

from treadle.core.envelope import Payload, event


@event("run.started", local=True, other_runs=False, provider_threads=False)
class RunStarted(Payload, kw_only=True):
    """L2.2: the provider accepted the turn; root node and run are running."""

    run_id: str
    attempt_id: str
    session_id: str
    turn_id: str
    native_turn_ref: str | None = None
