"""Recording child checkpoint scopes (L10.3) as the supervisor folds subagent starts and ends.

The provider host captured them when they happened (provider_host/child_scopes.py); asking again for the
same (scope, ordinal) returns that ref with its stats, or captures it now if the host could not. The
checkpoint joins the node's event in one decision.
"""

from __future__ import annotations

import functools
import logging

from treadle.checkpoints.protocol import Capture, CheckpointError
from treadle.core import events as ev
from treadle.core.checkpoints import child_scopes
from treadle.core.checkpoints.model import FileChange
from treadle.core.ctx import Ctx
from treadle.core.run.model import Run
from treadle.core.state import ThreadState
from treadle.ports import CheckpointStore

log = logging.getLogger(__name__)


async def with_child_checkpoints(
    client: CheckpointStore, state: ThreadState, run: Run | None, events: list[ev.Payload], ctx: Ctx
) -> list[ev.Payload]:
    if run is None or state.thread is None:
        return events
    out: list[ev.Payload] = []
    for e in events:
        out.append(e)
        if isinstance(e, ev.NodeStarted) and e.kind in child_scopes.CHECKPOINTABLE:
            scope = child_scopes.scope_of_new(run, e.node_id, e.parent_id)
            out.append(await _capture(client, state, run, ctx, e.node_id, scope, child_scopes.BASELINE, "baseline"))
        elif isinstance(e, ev.NodeCompleted) and (ended := child_scopes.scope_of(run, e.node_id)) is not None:
            out.append(await _capture(client, state, run, ctx, e.node_id, ended, child_scopes.END, e.status))
    return out


async def _capture(
    client: CheckpointStore, state: ThreadState, run: Run, ctx: Ctx, node_id: str, scope: str, ordinal: int, status: str
) -> ev.CheckpointCaptured:
    assert state.thread is not None
    previous = child_scopes.BASELINE if ordinal != child_scopes.BASELINE else None
    request = Capture(
        tenant=state.thread.tenant,
        thread=state.thread.id,
        workspace=state.thread.workspace,
        scope=scope,
        ordinal=ordinal,
        status=status,
        previous_ordinal=previous,
    )
    kind = "baseline" if ordinal == child_scopes.BASELINE else "node"
    captured = functools.partial(
        ev.CheckpointCaptured,
        checkpoint_id=ctx.ids.next("ckpt"),
        run_id=run.id,
        scope=scope,
        ordinal=ordinal,
        kind=kind,
        node_id=node_id,
    )
    try:
        # CheckpointUnavailable propagates: the provider event is retried
        got = await client.capture(request, volume=state.thread.volume)
    except CheckpointError as exc:  # L10.4: an error summary instead of a checkpoint
        log.warning("child checkpoint %s/%s of %s failed: %s", scope, ordinal, state.thread.id, exc)
        return captured(status="error")
    return captured(
        status=status, ref=got.ref, commit=got.commit, tree=got.tree, unchanged=got.unchanged,
        files=[FileChange(path=f.path, change=f.change, added=f.added, removed=f.removed) for f in got.files],
        skipped=[f"{s.path} ({s.reason})" for s in got.skipped],
        files_total=got.files_total if got.files_total > len(got.files) else None,
    )  # fmt: skip
