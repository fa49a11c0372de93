"""The projection document's fields as Redis holds them (``projections/document.py`` ``fields`` → ``assemble``)."""

from __future__ import annotations

from typing import Any


def as_stored(fields: list[Any]) -> dict[bytes, bytes]:
    pairs = iter(fields)
    out = {b"seq": b"1"}
    for name, value in zip(pairs, pairs):
        out[name.encode()] = value if isinstance(value, bytes) else str(value).encode()
    return out
