"""The base of every entity: the nouns of docs/requirements.md as msgspec Structs, folded from events.

Entities are mutated only by the fold (``treadle.core.state.evolve``, in place); everything else treats
them as read-only values."""

from __future__ import annotations

import msgspec


class Entity(msgspec.Struct, kw_only=True):
    pass
