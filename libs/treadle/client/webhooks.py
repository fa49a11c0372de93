"""Signed webhooks, the receiving side: check that a delivery came from Treadle (docs/webhooks.md).

Treadle sends ``Treadle-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``. The timestamp
is signed with the body, so a captured delivery cannot be replayed later than ``tolerance`` seconds."""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Treadle-Signature"


class SignatureError(ValueError):
    """The header is missing or malformed, the signature does not match, or the timestamp is too old or new."""


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret``."""
    return hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header value Treadle sends with ``body``."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, t, body)}"


def verify(secret: str, header: str | None, body: bytes, tolerance: float = 300, now: float | None = None) -> int:
    """Check a delivery's ``Treadle-Signature`` header against its raw body; returns its timestamp or raises
    :class:`SignatureError`. Any ``v1`` entry may match (a secret being rotated signs twice); the comparison is
    constant-time."""
    if not header:
        raise SignatureError("no signature header")
    stamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            stamp = int(value)
        elif key == "v1" and value:
            candidates.append(value)
    if stamp is None or not candidates:
        raise SignatureError("the signature header needs t=<unix seconds> and v1=<hex>")
    current = time.time() if now is None else now
    if abs(current - stamp) > tolerance:
        raise SignatureError(f"the timestamp is more than {tolerance:g}s from now")
    expected = signature(secret, stamp, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise SignatureError("the signature does not match")
    return stamp
