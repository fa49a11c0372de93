"""Views from the domain's folded state: the one place the read contract meets the domain.

``thread_view`` maps a whole ``ThreadState``; ``encoded_part`` and ``encoded_item`` give the JSON of one
top-level field or one element of a long list, so the projection writer converts only what a batch of events
changed. The mapping is by field name (``msgspec.convert`` from attributes): a field of the state that no view
declares stays out of the API (``provider_seq``, attempts' ``provider_index``, the ``command_id`` of threads,
messages and requests). Where a domain type and its view have the same fields in the same order, all the way
down, the domain value is encoded as it is: the same bytes as its view at a fraction of the cost (the projector
encodes on every event); any change to either side makes them differ and the conversion is used again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args, get_type_hints

import msgspec
from msgspec import inspect as mi

from treadle.core import events as ev
from treadle.core.state import ThreadState, fold

from .thread import ThreadSummary, ThreadView

_PART_TYPES: dict[str, Any] = get_type_hints(ThreadView)
_ITEM_TYPES: dict[str, Any] = {
    name: get_args(t)[0] for name, t in _PART_TYPES.items() if getattr(t, "__origin__", None) is list
}
FIELDS: tuple[str, ...] = ThreadView.__struct_fields__


_encode = msgspec.json.Encoder().encode


def _same_wire(a: mi.Type, b: mi.Type, seen: set[tuple[type, type]]) -> bool:
    """Values of domain type ``a`` encode exactly as their conversion to view type ``b`` does."""
    if type(a) is not type(b):
        return False
    if isinstance(a, mi.StructType):
        assert isinstance(b, mi.StructType)
        if (a.cls, b.cls) in seen:
            return True
        seen.add((a.cls, b.cls))
        omit = a.cls.__struct_config__.omit_defaults, b.cls.__struct_config__.omit_defaults
        return (
            a.array_like == b.array_like
            and a.tag == b.tag
            and a.tag_field == b.tag_field
            and omit == (False, False)
            and len(a.fields) == len(b.fields)
            and all(
                fa.encode_name == fb.encode_name and _same_wire(fa.type, fb.type, seen)
                for fa, fb in zip(a.fields, b.fields)
            )
        )
    if isinstance(a, mi.UnionType):
        assert isinstance(b, mi.UnionType)
        return len(a.types) == len(b.types) and all(_same_wire(x, y, seen) for x, y in zip(a.types, b.types))
    if isinstance(a, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        assert isinstance(b, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType))
        return _same_wire(a.item_type, b.item_type, seen)
    if isinstance(a, mi.DictType):
        assert isinstance(b, mi.DictType)
        return _same_wire(a.key_type, b.key_type, seen) and _same_wire(a.value_type, b.value_type, seen)
    return True  # str, int, datetime, literals, …: encoded from the runtime value alone


def _as_is(domain_type: Any, view_type: Any) -> bool:
    return _same_wire(mi.type_info(domain_type), mi.type_info(view_type), set())


_STATE_TYPES: dict[str, Any] = get_type_hints(ThreadState)
_PART_AS_IS = {name: _as_is(_STATE_TYPES[name], _PART_TYPES[name]) for name in FIELDS}
_ITEM_AS_IS = {name: _as_is(get_args(_STATE_TYPES[name])[0], t) for name, t in _ITEM_TYPES.items()}


def encoded_part(state: ThreadState, name: str) -> bytes:
    """The JSON of the view of top-level field ``name``."""
    return _encode(getattr(state, name) if _PART_AS_IS[name] else part(state, name))


def encoded_item(name: str, value: Any) -> bytes:
    """The JSON of the view of one element of list field ``name``."""
    return _encode(value if _ITEM_AS_IS[name] else item(name, value))


def thread_view(state: ThreadState) -> ThreadView:
    return msgspec.convert(state, ThreadView, from_attributes=True)


def _struct_of(hint: Any) -> Any:
    """``X`` of ``X | None`` where X is a Struct (msgspec caches what it knows of a Struct type, not of a union)."""
    args = [a for a in get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], msgspec.Struct) else None


_OPTIONAL = {name: _struct_of(t) for name, t in _PART_TYPES.items()}


def part(state: ThreadState, name: str) -> Any:
    """The view of one top-level field of the thread document."""
    value = getattr(state, name)
    if name in _ITEM_TYPES:
        return [msgspec.convert(v, _ITEM_TYPES[name], from_attributes=True) for v in value]
    if (struct := _OPTIONAL[name]) is not None:
        return None if value is None else msgspec.convert(value, struct, from_attributes=True)
    return msgspec.convert(value, _PART_TYPES[name], from_attributes=True)


def item(name: str, value: Any) -> Any:
    """The view of one element of list field ``name`` (a message, run, checkpoint, activity or handoff)."""
    return msgspec.convert(value, _ITEM_TYPES[name], from_attributes=True)


def summary(state: ThreadState) -> ThreadSummary:
    """The thread's list item (as ``thread.summary`` gives it from the views), without converting them all."""
    t = state.thread
    assert t is not None
    last = state.runs[-1] if state.runs else None
    return ThreadSummary(
        id=t.id,
        title=t.title,
        provider=t.provider,
        created_at=t.created_at.isoformat(),
        archived=t.archived,
        seq=state.seq,
        runs=len(state.runs),
        active_run_id=state.active_run_id,
        last_run_status=last.status if last else None,
        last_activity_at=state.last_activity_at.isoformat() if state.last_activity_at else None,
    )


def replay(events: Iterable[ev.Envelope]) -> ThreadView | None:
    """The views of a thread folded from its events (None: the log has no such thread)."""
    state = fold(events)
    return thread_view(state) if state.thread is not None and not state.thread.deleted else None
