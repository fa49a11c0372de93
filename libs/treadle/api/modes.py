"""The choices of the contract a thread runs and a message is dispatched under."""

from __future__ import annotations

from typing import Literal

RuntimeMode = Literal["approval_required", "auto_accept_edits", "full_access"]

DispatchMode = Literal[
    "auto", "start_immediately", "queue_after_active", "steer_active", "restart_active", "reject", "rollback_active"
]
