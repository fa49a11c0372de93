"""L3.6: the thread's queue of runs waiting for the active one — listed, reordered, edited, cancelled."""

from __future__ import annotations

from . import events as ev
from .commands import CancelQueued, EditQueued, ReorderQueue
from .entities import Run
from .errors import BadRequest, Conflict, NotFound, check
from .thread import ThreadState
from .turn_options import check_turn_options


def _queued(state: ThreadState, run_id: str) -> Run:
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


def reorder(state: ThreadState, body: ReorderQueue) -> list[ev.Payload]:
    """The new order must name exactly the queued runs: a client that saw an older queue is told so."""
    check(len(set(body.order)) == len(body.order), BadRequest, "order names a run twice", code="invalid_order")
    check(
        sorted(body.order) == sorted(state.queue),
        Conflict,
        "order must name exactly the queued runs",
        code="queue_changed",
        details={"queue": list(state.queue)},
    )
    return [] if body.order == state.queue else [ev.QueueReordered(order=list(body.order))]


def edit(state: ThreadState, body: EditQueued) -> list[ev.Payload]:
    run = _queued(state, body.run_id)
    check(bool(body.text.strip()), BadRequest, "text must not be empty", code="empty_text")
    if body.script is not None:
        try:
            check_turn_options(run.provider, body.script)
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_script") from None
    return [ev.RunEdited(run_id=run.id, text=body.text, script=body.script if body.script is not None else run.script)]


def cancel(state: ThreadState, body: CancelQueued) -> list[ev.Payload]:
    run = _queued(state, body.run_id)
    return [ev.RunCancelled(run_id=run.id, attempt_id=run.attempt.id, error="cancelled while queued")]
