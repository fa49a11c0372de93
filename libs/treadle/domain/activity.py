"""The thread's activity feed (L12.4): one line for each notable fact, with the run and node it belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import events as ev
from .entities import Activity

if TYPE_CHECKING:
    from .thread import ThreadState


def record(state: ThreadState, e: ev.Envelope, kind: str, run_id: str, node_id: str | None, summary: str) -> None:
    state.activity.append(Activity(at=e.at, kind=kind, run_id=run_id, node_id=node_id, summary=summary))
