"""A field's limit is declared once, on its type: a msgspec constraint (``Meta(max_length=…)``, a ``Literal``)
carrying the API's error code in ``extra``. msgspec enforces it wherever the type is decoded (the gateway's
bodies, the MCP tools' arguments, the coordinator's commands) and says which path broke it; ``violation`` turns
that into the typed refusal clients branch on: ``{code, message, details: {field, limit}}`` (each side raises
it as its own error: the core's ``BadRequest``, the gateway's ``ApiError``)."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import inspect as mi

_PATH = re.compile(r" - at `\$([^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[([^\]]*)\]")
_LENGTH = re.compile(r"^Expected `(\w+)` of length <= (\d+)")
_ENUM = re.compile(r"^Invalid enum value ")
_UNITS = {"str": "characters", "array": "items", "object": "entries"}


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str
    details: dict[str, Any]


def limited(max_length: int, code: str) -> msgspec.Meta:
    """At most ``max_length`` (characters of a string, items of a list, entries of a dict), else ``code``."""
    return msgspec.Meta(max_length=max_length, extra={"code": code})


def coded(code: str) -> msgspec.Meta:
    """A ``Literal`` (or any type) whose refusal is answered with ``code``."""
    return msgspec.Meta(extra={"code": code})


def _unwrap(info: mi.Type, code: str | None) -> tuple[mi.Type, str | None]:
    """Through constraints (keeping the innermost code) and ``| None``."""
    while True:
        if isinstance(info, mi.Metadata):
            code = (info.extra or {}).get("code", code)
            info = info.type
        elif (
            isinstance(info, mi.UnionType)
            and len(some := [t for t in info.types if not isinstance(t, mi.NoneType)]) == 1
        ):
            info = some[0]
        else:
            return info, code


def _step(info: mi.Type, name: str | None, tag: str | None) -> mi.Type | None:
    """The type one step down a path: a field of a struct (of the union member ``tag`` names, if one), an item."""
    if isinstance(info, mi.UnionType):  # of tagged structs (a command's body)
        members = [_unwrap(t, None)[0] for t in info.types if not isinstance(t, mi.NoneType)]
        structs = [m for m in members if isinstance(m, mi.StructType)]
        structs.sort(key=lambda s: s.tag != tag)  # the named member first
        info = structs[0] if structs and name is not None else (members[0] if len(members) == 1 else info)
    if name is not None and isinstance(info, mi.StructType):
        return next((f.type for f in info.fields if f.encode_name == name), None)
    if name is None and isinstance(info, (mi.ListType, mi.DictType, mi.TupleType, mi.SetType)):
        return info.value_type if isinstance(info, mi.DictType) else getattr(info, "item_type", None)
    return None


def violation(exc: msgspec.ValidationError, root: Any, *, skip: int = 0, tag: str | None = None) -> Violation | None:
    """The typed refusal for a broken constraint of ``root`` (a type), or None when ``exc`` is not one of ours
    (a wrong type, a missing field: the caller's generic 400). ``skip`` drops leading path steps that are not
    ``root``'s (a framework's wrapper); ``tag`` picks the member of a tagged union the path goes through."""
    text = str(exc)
    where = _PATH.search(text)
    length, enum = _LENGTH.match(text), _ENUM.match(text)
    if where is None or (length is None and enum is None):
        return None
    steps = _STEP.findall(where.group(1))[skip:]
    info: mi.Type | None = mi.type_info(root)
    code: str | None = None
    for name, _index in steps:
        assert info is not None
        info, code = _unwrap(info, code)
        info = _step(info, name or None, tag)
        if info is None:
            return None
    assert info is not None
    info, code = _unwrap(info, code)
    if code is None:
        return None
    field = ".".join(name for name, _ in steps if name)
    if length is not None:
        limit = int(length.group(2))
        unit = _UNITS.get(length.group(1), "items")
        return Violation(
            code=code, message=f"{field} is at most {limit} {unit}", details={"field": field, "limit": limit}
        )
    allowed = [str(v) for v in info.values] if isinstance(info, mi.LiteralType) else []
    return Violation(
        code=code, message=f"{field} must be one of {', '.join(allowed)}", details={"field": field, "allowed": allowed}
    )
