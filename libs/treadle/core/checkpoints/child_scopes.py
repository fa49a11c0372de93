"""Child checkpoint scopes (L10.3): a subagent node gets its own scope under its parent's, captured when it
starts (ordinal 0, its baseline) and when it ends (ordinal 1, diffed against the baseline). Child scopes
never advance the app run count: their ordinals live in their own scope, and runs keep theirs."""

from __future__ import annotations

from collections.abc import Iterable

from treadle.core.checkpoints.model import Checkpoint, ChildCheckpoint
from treadle.core.run.model import Run

ROOT = "root"
BASELINE, END = 0, 1
CHECKPOINTABLE = ("subagent",)


def scope_of(run: Run, node_id: str) -> str | None:
    """``root/<node>`` for a top-level subagent, ``root/<parent>/<node>`` for one nested in a subagent; None
    for a node that is not checkpointable."""
    node = run.node(node_id)
    if node is None or node.kind not in CHECKPOINTABLE:
        return None
    chain = [node.id]
    parent = run.node(node.parent_id) if node.parent_id else None
    while parent is not None and parent.kind in CHECKPOINTABLE:
        chain.append(parent.id)
        parent = run.node(parent.parent_id) if parent.parent_id else None
    return "/".join([ROOT, *reversed(chain)])


def scope_for_new(parents: dict[str, str], node_id: str, parent_id: str | None) -> str:
    """The scope of a subagent as it starts, from the scopes of the subagents already open (``parents``)."""
    base = parents.get(parent_id or "", ROOT)
    return f"{base}/{node_id}"


def summaries(checkpoints: Iterable[Checkpoint], run_id: str) -> list[ChildCheckpoint]:
    """What the root checkpoint of a run says about its child scopes: each child's last checkpoint."""
    last: dict[str, ChildCheckpoint] = {}
    for c in checkpoints:
        if c.run_id == run_id and c.scope != ROOT and not c.stale:
            last[c.scope] = ChildCheckpoint(
                checkpoint_id=c.id, node_id=c.node_id, scope=c.scope, status=c.status, files=len(c.files)
            )
    return list(last.values())


def scope_of_new(run: Run, node_id: str, parent_id: str | None) -> str:
    """The scope of a subagent whose start is being folded (it is not in ``run.nodes`` yet)."""
    parent = scope_of(run, parent_id) if parent_id else None
    return f"{parent or ROOT}/{node_id}"
