"""Rolling a thread back to a run's files (L10.5) or a node to a checkpoint (L10.6)."""

from __future__ import annotations

import msgspec

from treadle.api.limits import Id


class RollbackRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    to_run_ordinal: int
    interrupt_active: bool = False


class NodeRollbackRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    checkpoint_id: Id
    thread_id: Id | None = None  # optional: saves looking the node up among the tenant's recent threads
