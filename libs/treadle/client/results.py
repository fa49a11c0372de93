"""Every type an SDK call answers with, named once for the request builders and both clients: the receipts of
the writes are the contract's own (:mod:`treadle.api`), the reads decode into the views of
:mod:`treadle.views` (both re-exported here), and the shapes only the SDK needs (a page of a list, a diff, a
policy, webhooks) are msgspec Structs that mirror the gateway's answers (a unit test keeps the two in step), so
the SDK imports nothing of the server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Generic, Literal, TypeVar

import msgspec

from treadle.api import Acknowledged, Forked, Implemented, MessageAccepted, ThreadCreated, ThreadDeleted, ThreadUpdated
from treadle.views.checkpoints import Checkpoint, RollbackView
from treadle.views.lineage import ContextHandoff, HandoffView, LineageView
from treadle.views.requests import Activity, RuntimeRequest
from treadle.views.runs import Message, QueueView, Run
from treadle.views.thread import RunView, ThreadSummary, ThreadView

__all__ = [
    "Activity",
    "Checkpoint",
    "ContextHandoff",
    "HandoffView",
    "LineageView",
    "Message",
    "QueueView",
    "RollbackView",
    "Run",
    "RunView",
    "RuntimeRequest",
    "ThreadSummary",
    "ThreadView",
    "CreatedWebhook",
    "Webhook",
    "WebhookDelivery",
    "WebhookDeliveryList",
    "WebhookList",
    "Acknowledged",
    "CheckpointPoint",
    "Diff",
    "FileStat",
    "Forked",
    "Implemented",
    "MessageAccepted",
    "Page",
    "Policy",
    "ThreadCreated",
    "ThreadDeleted",
    "ThreadUpdated",
]

T = TypeVar("T")


class Page(msgspec.Struct, Generic[T], kw_only=True):
    """One page of a list: ``next_cursor`` asks for the next (None: this is the last); ``seq`` is the
    thread's sequence the page reflects (None for lists that span threads)."""

    items: list[T]
    next_cursor: str | None = None
    seq: int | None = None


class CheckpointPoint(msgspec.Struct, kw_only=True):
    checkpoint_id: str
    ordinal: int
    scope: str
    commit: str


class FileStat(msgspec.Struct, kw_only=True):
    path: str
    change: str
    added: int
    removed: int
    old_path: str | None = None
    binary: bool = False


class Diff(msgspec.Struct, kw_only=True):
    """A unified diff (cut at ``max_bytes``: ``truncated``) and per-file stats between two checkpoints."""

    thread_id: str
    run_id: str | None = None
    from_: CheckpointPoint | None = msgspec.field(default=None, name="from")
    to: CheckpointPoint
    files: list[FileStat]
    files_total: int
    patch: str
    truncated: bool
    patch_bytes: int


RuntimeMode = Literal["approval_required", "auto_accept_edits", "full_access"]


class Policy(msgspec.Struct, kw_only=True):
    """The tenant's policy (admin): the runtime modes its threads may use and its quotas."""

    allowed_modes: list[RuntimeMode]
    max_threads: int | None = None
    max_queued_runs: int | None = None
    max_delegation_depth: int | None = None  # delegated tasks (MCP delegate_task): None is the deployment's default
    max_children_per_run: int | None = None
    max_running_children: int | None = None
    cascade_interrupts: bool | None = None
    max_disk_bytes: int | None = None  # disk budget of its workspaces and runtime homes; None: the deployment's
    max_disk_files: int | None = None
    max_schedules: int | None = None  # schedules of the tenant; None: 100
    updated_at: datetime | None = None
    updated_by: str | None = None


class Webhook(msgspec.Struct, kw_only=True):
    """A webhook endpoint (admin; docs/webhooks.md). Its secret is never shown after creation."""

    id: str
    url: str
    events: list[str]
    threads: list[str]
    description: str
    enabled: bool
    created_at: datetime
    updated_at: datetime


class CreatedWebhook(msgspec.Struct, kw_only=True):
    webhook: Webhook
    secret: str  # shown this once: verify deliveries with it (treadle.client.webhooks.verify)


class WebhookList(msgspec.Struct, kw_only=True):
    items: list[Webhook]


class WebhookDelivery(msgspec.Struct, kw_only=True):
    """One event for one endpoint: status pending (being retried), delivered or failed (dead-lettered)."""

    id: str
    endpoint: str
    thread: str
    event_id: str
    event_type: str
    seq: int
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    response_status: int | None = None
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None = None


class WebhookDeliveryList(msgspec.Struct, kw_only=True):
    items: list[WebhookDelivery]
