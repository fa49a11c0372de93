"""L3.6: the thread's queue of runs waiting for the active one — listed, reordered, edited, cancelled."""

from __future__ import annotations

from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound, check
from treadle.core.providers.catalogue import Catalogue
from treadle.core.run.events import RunCancelled
from treadle.core.run.model import Run
from treadle.core.thread.commands import CancelQueued, EditQueued, ReorderQueue
from treadle.core.thread.events import QueueReordered, RunEdited
from treadle.core.view import ThreadView


def _queued(state: ThreadView, run_id: str) -> Run:
    run = state.run(run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found", code="run_not_found")
    check(
        run_id in state.queue,
        Conflict,
        f"run {run_id} is {run.status}, not queued",
        code="run_not_queued",
        details={"status": run.status},
    )
    return run


def reorder(state: ThreadView, body: ReorderQueue) -> list[Payload]:
    """The new order must name exactly the queued runs: a client that saw an older queue is told so."""
    check(len(set(body.order)) == len(body.order), BadRequest, "order names a run twice", code="invalid_order")
    check(
        sorted(body.order) == sorted(state.queue),
        Conflict,
        "order must name exactly the queued runs",
        code="queue_changed",
        details={"queue": list(state.queue)},
    )
    return [] if body.order == state.queue else [QueueReordered(order=list(body.order))]


def edit(state: ThreadView, body: EditQueued, providers: Catalogue) -> list[Payload]:
    run = _queued(state, body.run_id)
    check(bool(body.text.strip()), BadRequest, "text must not be empty", code="empty_text")
    if body.script is not None:
        try:
            providers.check_turn_options(run.provider, body.script)
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_script") from None
    return [RunEdited(run_id=run.id, text=body.text, script=body.script if body.script is not None else run.script)]


def cancel(state: ThreadView, body: CancelQueued) -> list[Payload]:
    run = _queued(state, body.run_id)
    return [RunCancelled(run_id=run.id, attempt_id=run.attempt.id, error="cancelled while queued")]
