"""Opaque page cursors: where the next page of a list starts, MACed with the deployment's key and bound to the
tenant, the list, the thread and the filter they were issued for. A cursor that was edited, cut, made for
another tenant, thread, list or filter, or under another key, is refused whole (``InvalidCursor``), so a
client can only ever continue a list it was reading. Pure: no I/O; the key comes from the caller."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

import msgspec

VERSION = 1
MAX_LENGTH = 512  # far above any cursor this module makes; anything longer is refused before decoding
MAX_INDEX = 2**31 - 1
MAX_SCORE = 2**53  # a thread's creation time in ms
_TAG_BYTES = 16


class InvalidCursor(ValueError):
    """Not a cursor this deployment issued for this tenant's list (garbled, forged, or another's)."""


class Position(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True):
    """Where the next page starts: in a thread's list (``index`` of its next item, in the order things
    happened), or in the tenant's thread list (newest first: after the thread ``after_id`` created at
    ``score``, in ms)."""

    version: int
    list: str
    thread: str  # "" for the tenant's thread list
    filter: str  # the query that narrows the list ("" for none): a cursor serves only the same narrowing
    index: int = 0
    score: int = 0
    after_id: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Position)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _tag(key: bytes, tenant: str, payload: bytes) -> bytes:
    return hmac.new(key, tenant.encode() + b"\0" + payload, hashlib.sha256).digest()[:_TAG_BYTES]


def encode(key: bytes, tenant: str, position: Position) -> str:
    payload = _encoder.encode(position)
    return f"{_b64(payload)}.{_b64(_tag(key, tenant, payload))}"


def decode(key: bytes, tenant: str, cursor: str, *, list: str, thread: str = "", filter: str = "") -> Position:
    """The position ``cursor`` names, if this deployment issued it to ``tenant`` for exactly this list, thread
    and filter; else ``InvalidCursor``."""
    if not 0 < len(cursor) <= MAX_LENGTH or not cursor.isascii():
        raise InvalidCursor("not a cursor")
    body, dot, tag = cursor.partition(".")
    try:
        payload, mac = _unb64(body), _unb64(tag)
    except (binascii.Error, ValueError):
        raise InvalidCursor("not a cursor") from None
    canonical = _b64(payload) == body and _b64(mac) == tag  # one spelling per cursor (no stray padding bits)
    if not dot or not canonical or not hmac.compare_digest(mac, _tag(key, tenant, payload)):
        raise InvalidCursor("not a cursor issued for this list")
    try:
        position = _decoder.decode(payload)
    except msgspec.DecodeError:
        raise InvalidCursor("not a cursor") from None
    if (position.version, position.list, position.thread, position.filter) != (VERSION, list, thread, filter):
        raise InvalidCursor("the cursor belongs to another list, thread or filter")
    if not (0 <= position.index <= MAX_INDEX and 0 <= position.score <= MAX_SCORE and len(position.after_id) <= 64):
        raise InvalidCursor("not a cursor")
    return position


def at(list: str, thread: str, filter: str, index: int) -> Position:
    """The position of a thread's list at item ``index``."""
    return Position(version=VERSION, list=list, thread=thread, filter=filter, index=index)


def after_thread(score: int, thread_id: str, filter: str = "") -> Position:
    """The position in the tenant's thread list just after ``thread_id`` (created at ``score`` ms)."""
    return Position(version=VERSION, list="threads", thread="", filter=filter, score=score, after_id=thread_id)
