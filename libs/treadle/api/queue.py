"""Steering the queue of runs: ``PATCH /v1/threads/{thread_id}/queue`` and ``…/queue/{run_id}``."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.api.limits import QueueOrder, Text


class ReorderBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    order: QueueOrder


class EditBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: Text
    script: dict[str, Any] | None = None  # at most core.limits.MAX_SCRIPT_BYTES as JSON
