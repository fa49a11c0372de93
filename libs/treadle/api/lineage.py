"""Forking a thread (L6): ``POST /v1/threads/{thread_id}/fork`` and ``thread_fork``."""

from __future__ import annotations

from typing import Literal

import msgspec

from treadle.api.limits import Id, Title, TurnRef

SourceType = Literal["run", "node", "provider_thread"]
OnActive = Literal["latest_checkpoint", "refuse"]


class ForkSourceBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: SourceType
    id: Id
    turn: TurnRef | None = None


class ForkBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    source: ForkSourceBody
    title: Title = ""
    on_active: OnActive = "latest_checkpoint"


class Forked(msgspec.Struct, kw_only=True):
    thread_id: str
    parent_thread_id: str
    seq: int  # of the parent's record of the fork
