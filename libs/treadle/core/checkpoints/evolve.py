"""How checkpoints fold into a thread (L10); a terminal run carries its own (see run.evolve)."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.checkpoints.events import CheckpointCaptured
from treadle.core.checkpoints.model import Checkpoint
from treadle.core.envelope import Envelope
from treadle.core.view import Folds, ThreadView


def checkpoint_captured(state: ThreadView, e: Envelope, d: CheckpointCaptured) -> None:
    state.checkpoints.append(
        Checkpoint(
            id=d.checkpoint_id,
            scope=d.scope,
            ordinal=d.ordinal,
            run_id=d.run_id,
            kind=d.kind,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            status=d.status,
            ref=d.ref,
            commit=d.commit,
            tree=d.tree,
            unchanged=d.unchanged,
            files=list(d.files),
            created_at=e.at,
            node_id=d.node_id,
            children=list(d.children),
            skipped=list(d.skipped),
            files_total=d.files_total,
        )
    )
    if d.run_id:
        activity.record(state, e, "checkpoint.captured", d.run_id, d.node_id, f"{d.scope}/{d.ordinal} {d.status}")


FOLDS: Folds = {CheckpointCaptured: checkpoint_captured}
