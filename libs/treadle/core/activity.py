"""The thread's activity feed: one line for each notable fact, with the run and node it belongs to."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from treadle.core.entity import Entity
from treadle.core.envelope import Envelope


class Activity(Entity, kw_only=True):
    """One line of the activity feed (L12.4): always carries its run and node."""

    at: datetime
    kind: str
    run_id: str
    node_id: str | None = None
    summary: str = ""


class HasActivity(Protocol):
    """What :func:`record` needs of a state: its activity feed."""

    activity: list[Activity]


def record(state: HasActivity, e: Envelope, kind: str, run_id: str, node_id: str | None, summary: str) -> None:
    state.activity.append(Activity(at=e.at, kind=kind, run_id=run_id, node_id=node_id, summary=summary))
