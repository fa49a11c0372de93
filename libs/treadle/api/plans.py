"""Implementing a proposed plan (L12.3): ``POST /v1/plans/{plan_id}/implement``."""

from __future__ import annotations

from typing import Literal

import msgspec

ImplementAs = Literal["run", "thread"]


class ImplementBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    as_: ImplementAs = msgspec.field(name="as", default="run")


class Implemented(msgspec.Struct, kw_only=True):
    plan_id: str
    as_: str = msgspec.field(name="as")
    thread_id: str
    run_id: str
