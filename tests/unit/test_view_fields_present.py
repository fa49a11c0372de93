"""Issue 25: a view always carries its fields. Every view type, encoded with each optional field at its default
(None, empty), still has every field it declares: a client reads ``active_run_id: null``, never a missing key."""

from __future__ import annotations

import importlib
import pkgutil
from datetime import UTC, datetime
from typing import Any

import msgspec
from msgspec import inspect as mi

import treadle.views
from treadle.views import View


def _all_views() -> list[type[View]]:
    for module in pkgutil.iter_modules(treadle.views.__path__):
        importlib.import_module(f"treadle.views.{module.name}")
    found, todo = [], list(View.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__qualname__)


def _sample(t: mi.Type) -> Any:
    """The smallest value of type ``t`` for a required field: None where allowed, else an empty or first value."""
    if isinstance(t, mi.UnionType):
        if any(isinstance(x, mi.NoneType) for x in t.types):
            return None
        return _sample(t.types[0])
    if isinstance(t, mi.StructType):
        return {f.encode_name: _sample(f.type) for f in t.fields if f.required}
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return []
    if isinstance(t, mi.DictType):
        return {}
    if isinstance(t, mi.StrType):
        return "x"
    if isinstance(t, (mi.IntType, mi.FloatType)):
        return 0
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.DateTimeType):
        return datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    if isinstance(t, mi.NoneType):
        return None
    return None  # Any


def test_every_view_type_is_found():
    names = {cls.__name__ for cls in _all_views()}
    assert {"ThreadView", "ThreadSummary", "RuntimeRequest", "Run", "Message", "Checkpoint", "LineageView"} <= names


def test_every_view_type_encodes_every_field_even_when_it_is_null_or_empty():
    missing: dict[str, list[str]] = {}
    for cls in _all_views():
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        assert not cls.__struct_config__.omit_defaults, f"{cls.__name__} leaves out fields at their default"
        value = msgspec.convert(_sample(info), cls)
        encoded = msgspec.json.decode(msgspec.json.encode(value))
        gone = [f.encode_name for f in info.fields if f.encode_name not in encoded]
        if gone:
            missing[cls.__name__] = gone
    assert missing == {}


def test_the_thread_list_item_carries_active_run_id_last_run_status_and_last_activity_at_as_null():
    from treadle.views.thread import ThreadSummary

    item = ThreadSummary(
        id="thr_1", title="", provider="scripted", created_at="2026-01-01T00:00:00+00:00", seq=1, runs=0
    )
    assert msgspec.json.decode(msgspec.json.encode(item)) == {
        "id": "thr_1",
        "title": "",
        "provider": "scripted",
        "created_at": "2026-01-01T00:00:00+00:00",
        "archived": False,
        "seq": 1,
        "runs": 0,
        "active_run_id": None,
        "last_run_status": None,
        "last_activity_at": None,
    }
