"""App-owned ids: type-prefixed, time-ordered, URL- and subject-safe.

An id is ``<prefix>_<10 chars of millisecond time><16 chars of entropy>`` in Crockford base32, so ids of
one kind sort by creation time. Ids minted while deciding a command come from an :class:`IdFactory`
seeded by the command, so replaying the same decision yields the same ids (docs/concepts.md principle 6).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TypeGuard

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")

PREFIXES = frozenset(
    {
        "thr",
        "msg",
        "run",
        "att",
        "node",
        "req",
        "ckpt",
        "xfer",
        "hoff",
        "ps",
        "pth",
        "turn",
        "cmd",
        "evt",
        "plan",
        "sch",
    }
)


# Two characters per table lookup: the 130 bits of an id's body (50 of time, 80 of entropy) in 13 lookups of
# 10 bits instead of 26 shifts of 5 (minting the ids of every appended event was 15% of the supervisor under B;
# base64.b32encode, pure Python in 3.11, did not pay).
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
_MS_MASK = (1 << 50) - 1  # 10 characters of time


def _mint(prefix: str, ms: int, entropy: bytes) -> str:
    body = (ms & _MS_MASK) << 80 | int.from_bytes(entropy[:10], "big")
    return prefix + "_" + "".join([_PAIRS[(body >> shift) & 1023] for shift in _SHIFTS])


def new_id(prefix: str, ms: int) -> str:
    """A fresh random id; used only at the edge (gateway command ids, workers' boot ids)."""
    return _mint(prefix, ms, os.urandom(10))


def is_token(value: object) -> TypeGuard[str]:
    """True when ``value`` may be placed in a NATS subject token or a URL path segment."""
    return isinstance(value, str) and TOKEN.fullmatch(value) is not None


_ID_BODY = re.compile(f"[{_ALPHABET}]{{26}}")


def is_id(value: object, prefix: str) -> bool:
    """True for exactly the shape :func:`_mint` makes: ``<prefix>_`` and 26 Crockford base32 characters."""
    return (
        isinstance(value, str)
        and value.startswith(prefix + "_")
        and _ID_BODY.fullmatch(value, len(prefix) + 1) is not None
    )


def has_prefix(value: object, prefix: str) -> bool:
    return is_token(value) and value.startswith(prefix + "_")


class IdFactory:
    """Deterministic ids for one decision: same seed and time, same sequence of ids."""

    __slots__ = ("_seed", "_ms", "_n")

    def __init__(self, seed: str, ms: int) -> None:
        self._seed = seed
        self._ms = ms
        self._n = 0

    def __copy__(self) -> IdFactory:  # copy.copy's generic path for a slotted object costs ~10x this
        twin = IdFactory(self._seed, self._ms)
        twin._n = self._n
        return twin

    def next(self, prefix: str) -> str:
        self._n += 1
        digest = hashlib.blake2b(f"{self._seed}|{prefix}|{self._n}".encode(), digest_size=10).digest()
        return _mint(prefix, self._ms, digest)
