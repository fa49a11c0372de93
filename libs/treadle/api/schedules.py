"""Schedules in the contract: a message sent on a cron expression in a time zone, or every N seconds, to one
thread or to a new thread per firing (``docs/schedules.md``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from treadle.api.constraints import coded, limited
from treadle.api.limits import Model, Provider, Text, Title
from treadle.api.modes import DispatchMode, RuntimeMode
from treadle.api.threads import RuntimeModeChoice

OnActive = Literal["skip", "queue", "dispatch"]
Cron = Annotated[str, limited(120, "invalid_cron")]
Zone = Annotated[str, limited(64, "invalid_timezone")]
SendMode = Annotated[DispatchMode, coded("invalid_mode")]


class ScheduleBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Exactly one of ``cron`` (5 fields, read in ``timezone``) and ``interval_seconds`` (at least 60).
    ``on_active``: when the previous run is still active or queued, ``skip`` this firing, ``queue`` it behind,
    or ``dispatch`` it with ``mode`` (the thread's dispatch rules for ``auto``)."""

    text: Text
    cron: Cron | None = None
    timezone: Zone = "UTC"
    interval_seconds: int | None = None
    provider: Provider | None = None
    model: Model | None = None
    mode: SendMode = "auto"
    on_active: OnActive = "skip"
    paused: bool = False
    # a tenant-level schedule's new thread per firing
    title: Title = ""
    runtime_mode: RuntimeModeChoice = "approval_required"


class ScheduleUpdate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The fields to change; a new timing (cron, timezone or interval) replans the next firing."""

    text: Text | None = None
    cron: Cron | None = None
    timezone: Zone | None = None
    interval_seconds: int | None = None
    provider: Provider | None = None
    model: Model | None = None
    mode: SendMode | None = None
    on_active: OnActive | None = None
    title: Title | None = None
    runtime_mode: RuntimeModeChoice | None = None


class Schedule(msgspec.Struct, kw_only=True):
    """A stored schedule and what its firings did. ``thread_id`` None: each firing creates a thread."""

    schedule_id: str
    thread_id: str | None
    created_by: str
    created_at: datetime
    text: str
    cron: str | None
    timezone: str
    interval_seconds: int | None
    provider: str | None = None
    model: str | None = None
    mode: DispatchMode = "auto"
    on_active: OnActive = "skip"
    title: str = ""
    runtime_mode: RuntimeMode = "approval_required"
    paused: bool = False
    next_at: datetime | None = None  # the next planned firing (None: paused, or it never fires again)
    fired: int = 0
    skipped: int = 0  # missed while down past the catch-up window, or skipped while a run was active
    last_fired_at: datetime | None = None  # the planned time of the last firing made
    last_outcome: str | None = None  # started, queued, skipped_active, missed, refused:<code>
    last_thread_id: str | None = None
    last_run_id: str | None = None
    updated_at: datetime | None = None


class ScheduleView(msgspec.Struct, kw_only=True):
    schedule: Schedule
    next_firings: list[datetime]


class ScheduleList(msgspec.Struct, kw_only=True):
    schedules: list[Schedule]


class ScheduleDeleted(msgspec.Struct, kw_only=True):
    schedule_id: str
    deleted: bool = True
