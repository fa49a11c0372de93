"""Checks of request fields: bad input gets a typed ``bad_request`` before anything is touched."""

from __future__ import annotations

import re

from treadle.checkpoints.protocol import Capture, CheckpointError
from treadle.checkpoints.refs import thread_prefix
from treadle.core.ids import is_token

_STATUS = re.compile(r"[a-z_]{1,32}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MAX_SCOPE_DEPTH = 8


def check_token(name: str, value: str) -> None:
    if not is_token(value):
        raise CheckpointError("bad_request", f"invalid {name} {value!r}")


def check_scope(scope: str) -> None:
    parts = scope.split("/")
    # Digit-only parts would collide with ordinal leaves: "root/3" vs the directory "root/3/…".
    if len(parts) > _MAX_SCOPE_DEPTH or not all(is_token(p) and not p.isdigit() for p in parts):
        raise CheckpointError("bad_request", f"invalid scope {scope!r}")


def check_commit(value: str | None, name: str) -> None:
    if value is not None and not _COMMIT.fullmatch(value):
        raise CheckpointError("bad_request", f"{name} must be a full commit id, got {value!r}")


def check_capture(req: Capture) -> None:
    check_token("tenant", req.tenant)
    check_token("thread", req.thread)
    check_scope(req.scope)
    if req.checkpoint_id is not None:
        check_token("checkpoint_id", req.checkpoint_id)
    if req.previous_scope is not None:
        check_scope(req.previous_scope)
    if not _STATUS.fullmatch(req.status):
        raise CheckpointError("bad_request", f"invalid status {req.status!r}")
    if req.ordinal < 0 or (req.previous_ordinal is not None and req.previous_ordinal < 0):
        raise CheckpointError("bad_request", "ordinals must be >= 0")
    check_commit(req.previous_commit, "previous_commit")
    check_commit(req.previous_tree, "previous_tree")
    if req.previous_ref is not None and not req.previous_ref.startswith(thread_prefix(req.thread) + "/"):
        raise CheckpointError("bad_request", "previous_ref must be a checkpoint ref of the thread")
    if req.previous_ordinal == req.ordinal and (req.previous_scope or req.scope) == req.scope:
        raise CheckpointError("bad_request", "a checkpoint cannot be its own previous checkpoint")
