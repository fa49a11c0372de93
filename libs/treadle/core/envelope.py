"""Events: past-tense facts with stable type tags, wrapped in the envelope of docs/concepts.md.

The payload base and its registry live here; each concept declares its events in its own ``events``
module. The type tag doubles as the last two tokens of the subject
``treadle.evt.<tenant>.<thread>.<aggregate>.<event>``, so consumers can filter by type on the broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import msgspec

SCHEMA_VERSION = 1


class Payload(msgspec.Struct, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[str]


PAYLOADS: dict[str, type[Payload]] = {}


P = TypeVar("P", bound=Payload)


def event(type_: str) -> Callable[[type[P]], type[P]]:
    def register(cls: type[P]) -> type[P]:
        cls.TYPE = type_
        PAYLOADS[type_] = cls
        return cls

    return register


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
