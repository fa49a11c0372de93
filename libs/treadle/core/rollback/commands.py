"""Rolling back a thread or a node."""

from __future__ import annotations

import msgspec

from treadle.api.limits import Id


class RollbackThread(msgspec.Struct, kw_only=True, tag="thread.rollback", forbid_unknown_fields=True):
    to_run_ordinal: int
    interrupt_active: bool = False


class RollbackNode(msgspec.Struct, kw_only=True, tag="node.rollback", forbid_unknown_fields=True):
    node_id: Id
    checkpoint_id: Id
