"""Secrets every replica of a worker shares, made once per deployment: KV ``treadle-keys``, one random value
per name, created by whichever replica asks first (the others read it). Used for the gateway's page cursors,
which any replica must accept from any other."""

from __future__ import annotations

import secrets

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

BUCKET = "treadle-keys"
KEY_BYTES = 32


async def shared_key(js: JetStreamContext, name: str) -> bytes:
    """The deployment's key called ``name``: read, or made now when no replica has made it yet."""
    kv = await js.key_value(BUCKET)
    try:
        entry = await kv.get(name)
        if entry.value:
            return entry.value
    except KeyNotFoundError:
        pass
    try:
        await kv.create(name, secrets.token_bytes(KEY_BYTES))
    except KeyWrongLastSequenceError:  # another replica made it first: theirs is the key
        pass
    entry = await kv.get(name)
    assert entry.value, f"key {name} in {BUCKET} is empty"
    return entry.value
