"""Events: past-tense facts with stable type tags, wrapped in the envelope of docs/concepts.md.

The payload base and its registry live here; each concept declares its events in its own ``events``
module. The type tag doubles as the last two tokens of the subject
``treadle.evt.<tenant>.<thread>.<aggregate>.<event>``, so consumers can filter by type on the broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, NamedTuple, TypeVar

import msgspec

SCHEMA_VERSION = 1


class Traits(NamedTuple):
    """What the rest of the system needs to know of an event type beside its fold, declared with the event
    (``event``) so that no reader keeps a list of event types of its own."""

    local: bool  # its fold changes only small fields, what it appends, the run of its run_id, the message of its message_id
    other_runs: bool  # its fold may change the status of a run its run_id does not name
    provider_threads: bool  # its fold may change the thread's provider threads
    indexes: tuple[str, ...] = ()  # fields holding ids a reader looks up alone (/v1/runs/{id}, /v1/requests/{id}, …)
    ends_run: str | None = None  # the status its run ends in: the event ends a run


# What a type this version does not know could have done: anything (readers treat it as changing everything).
UNKNOWN_TRAITS = Traits(local=False, other_runs=True, provider_threads=True)


class Payload(msgspec.Struct, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[str]
    TRAITS: ClassVar[Traits] = UNKNOWN_TRAITS


PAYLOADS: dict[str, type[Payload]] = {}


P = TypeVar("P", bound=Payload)


def event(
    type_: str,
    *,
    local: bool,
    other_runs: bool,
    provider_threads: bool,
    indexes: tuple[str, ...] = (),
    ends_run: str | None = None,
) -> Callable[[type[P]], type[P]]:
    """Register a payload under its type tag with its traits; every trait but the ids it indexes and the run
    status it ends in must be said (``tests/unit/test_event_registry.py`` checks the catalogue)."""
    traits = Traits(local, other_runs, provider_threads, indexes, ends_run)

    def register(cls: type[P]) -> type[P]:
        cls.TYPE = type_
        cls.TRAITS = traits
        PAYLOADS[type_] = cls
        return cls

    return register


def indexed(payload: Payload) -> list[str]:
    """Ids an event makes addressable on their own (``/v1/runs/{id}``, ``/v1/requests/{id}``, …)."""
    return [getattr(payload, name) for name in payload.TRAITS.indexes]


class _Header(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    type: str
    tenant: str
    thread: str
    at: datetime
    command_id: str
    causation_id: str | None = None
    correlation_id: str | None = None
    actor: str
    schema_version: int = SCHEMA_VERSION
    seq: int | None = None


class Envelope(_Header, kw_only=True):
    data: Any


class _RawEnvelope(_Header, kw_only=True):
    data: msgspec.Raw


class UnknownEvent(Payload, kw_only=True):
    """Data of an event type this version does not know (a newer writer); folds as a no-op."""

    raw: dict[str, Any] = {}
