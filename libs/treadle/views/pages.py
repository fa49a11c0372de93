"""Pages of the API's lists: one shape for all of them. ``items`` in the list's order (a thread's lists in
the order things happened, the tenant's threads newest first), ``next_cursor`` to pass as ``cursor`` for the
next page (null: this page reached the end when it was read) and ``seq``, the thread's stream sequence the
page reflects (null for the tenant's thread list)."""

from __future__ import annotations

from . import View
from .checkpoints import Checkpoint
from .lineage import ContextHandoff
from .requests import Activity, RuntimeRequest
from .runs import Message, Run
from .thread import ThreadSummary


class ThreadPage(View, kw_only=True):
    items: list[ThreadSummary]
    next_cursor: str | None
    seq: int | None


class RunPage(View, kw_only=True):
    items: list[Run]
    next_cursor: str | None
    seq: int | None


class MessagePage(View, kw_only=True):
    items: list[Message]
    next_cursor: str | None
    seq: int | None


class ActivityPage(View, kw_only=True):
    items: list[Activity]
    next_cursor: str | None
    seq: int | None


class RequestPage(View, kw_only=True):
    items: list[RuntimeRequest]
    next_cursor: str | None
    seq: int | None


class CheckpointPage(View, kw_only=True):
    items: list[Checkpoint]
    next_cursor: str | None
    seq: int | None


class HandoffPage(View, kw_only=True):
    items: list[ContextHandoff]
    next_cursor: str | None
    seq: int | None
