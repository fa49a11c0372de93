"""L8: interrupting a run or one of its nodes. The request is a fact; termination comes from the provider."""

from __future__ import annotations

from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound, Unprocessable, check
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run.commands import InterruptRun
from treadle.core.run.events import InterruptRequested, RunCancelled
from treadle.core.run.model import Run
from treadle.core.view import ThreadView


def target(state: ThreadView, body: InterruptRun) -> Run:
    check((body.run_id is None) != (body.node_id is None), BadRequest, "name a run or a node", code="invalid_target")
    if body.run_id is not None:
        run = state.run(body.run_id)
        if run is None:
            raise NotFound(f"run {body.run_id} not found", code="run_not_found")
        return run
    for run in reversed(state.runs):
        node = run.node(body.node_id or "")
        if node is None:
            continue
        # A child node cannot be stopped alone through the provider contract: interrupting it would stop
        # the whole turn, which the user did not ask for.
        check(
            node.counts_for_run,
            Unprocessable,
            f"node {node.id} is a {node.kind}; only a root turn can be "
            "interrupted (interrupt its run to stop everything)",
            code="node_interrupt_unsupported",
        )
        check(
            node.attempt_id == run.attempt.id,
            Conflict,
            f"node {node.id} belongs to an attempt that has ended",
            code="node_not_active",
        )
        return run
    raise NotFound(f"node {body.node_id} not found", code="node_not_found")


def interrupt(
    state: ThreadView, body: InterruptRun, caps: ProviderCapabilities | None, user: str
) -> tuple[list[Payload], str]:
    """Events and the disposition: ``interrupting`` (native), ``stopping_session`` (L8.3), ``cancelled``
    (it had not started), ``already_interrupting``."""
    run = target(state, body)
    if run.id in state.queue:
        return [
            RunCancelled(run_id=run.id, attempt_id=run.attempt.id, error="interrupted before it started")
        ], "cancelled"
    held = run.id == state.active_run_id  # dispatched, waiting for a provider (L9.3): interruptible
    check(
        not run.terminal and (run.status != "queued" or held),
        Conflict,
        f"run {run.id} is {run.status}",
        code="run_not_active",
        details={"status": run.status},
    )
    if run.attempt.interrupt is not None:
        return [], "already_interrupting"
    if caps is not None and not caps.interrupt and not body.allow_destructive:
        raise Conflict(
            "this provider cannot interrupt a turn; stopping its session was not allowed, so the run continues",
            code="interrupt_unsupported",
        )
    events: list[Payload] = [InterruptRequested(run_id=run.id, attempt_id=run.attempt.id, reason="user", by=user)]
    return events, "interrupting" if caps is None or caps.interrupt else "stopping_session"
