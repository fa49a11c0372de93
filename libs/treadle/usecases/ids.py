"""Ids from outside (a path, an argument) are checked before they reach a subject or a key, and resolved to
their thread."""

from __future__ import annotations

from treadle.core.errors import BadRequest, NotFound
from treadle.core.ids import is_id
from treadle.usecases.ports import ThreadReads


def checked(value: str, prefix: str) -> str:
    """Ids are ours; anything else (dots, wildcards, other prefixes) is refused as ``invalid_id``."""
    if not is_id(value, prefix):
        raise BadRequest(f"{value!r} is not a valid {prefix} id", code="invalid_id")
    return value


async def owner(reads: ThreadReads, tenant: str, entity_id: str, prefix: str, missing: str) -> str:
    """The thread of this tenant's id, or a typed 404 (``missing``)."""
    thread = await reads.thread_of(tenant, checked(entity_id, prefix))
    if thread is None:
        raise NotFound(f"{entity_id} not found", code=missing)
    return thread
