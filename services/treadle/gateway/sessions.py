"""Console sign-in: a bearer token exchanged for a browser session, so the token never sits in page script.

The cookie holds a random session id (HttpOnly, SameSite=Strict, Secure when the request came over https);
the server keeps only the id's SHA-256 digest as the key of KV ``treadle-web-sessions`` (entries expire with
the bucket's TTL and the record's own ``expires_at``), and the record holds only the token's digest, which
resolves to the principal on every request, so revoking the token ends its sessions too. Writes made with
the cookie must carry ``X-Treadle-CSRF``, an HMAC of the session id under a deployment key that only a page
of this origin can read (``GET /console/session``), and must not come from another site (``Origin``,
``Sec-Fetch-Site``). Bearer-token clients never touch any of this."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from typing import Any

import msgspec
from litestar import Request
from nats.js.errors import KeyNotFoundError

from treadle.ops.keys import shared_key
from treadle.ops.tokens import Principal, digest

from .errors import ApiError

BUCKET = "treadle-web-sessions"
COOKIE = "treadle_session"
CSRF_HEADER = "x-treadle-csrf"
LIFETIME_SECONDS = 12 * 3600  # the bucket's TTL says the same (eventlog/streams.py)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SID = re.compile(r"[A-Za-z0-9_-]{43}")


class WebSession(msgspec.Struct, kw_only=True, frozen=True):
    token_digest: str
    expires_at: float


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"session": "invalid"}, headers={"WWW-Authenticate": "Bearer"})


async def _csrf_key(request: Request[Any, Any, Any]) -> bytes:
    state = request.app.state
    key = getattr(state, "csrf_key", None)
    if key is None:
        key = state.csrf_key = await shared_key(state.nc.jetstream(), "console-csrf")
    return key


async def csrf_token(request: Request[Any, Any, Any], sid: str) -> str:
    return hmac.new(await _csrf_key(request), sid.encode(), hashlib.sha256).hexdigest()


async def open_session(request: Request[Any, Any, Any], token: str) -> tuple[str, Principal, float]:
    """A new session for a token that resolves now: (session id, principal, expiry as a Unix time)."""
    if not same_origin(request):  # another site signing this browser in to its own account (login CSRF)
        raise ApiError(403, "forbidden", "a cross-site request cannot sign in", {"csrf": "site"})
    tokens = request.app.state.tokens
    if len(token) > 200 or (who := await tokens.resolve(token)) is None:
        raise ApiError(401, "unauthorized", "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    sid = secrets.token_urlsafe(32)
    expires = time.time() + LIFETIME_SECONDS
    record = WebSession(token_digest=digest(token), expires_at=expires)
    kv = await request.app.state.nc.jetstream().key_value(BUCKET)
    await kv.put(digest(sid), msgspec.json.encode(record))
    return sid, who, expires


async def close_session(request: Request[Any, Any, Any], sid: str) -> None:
    kv = await request.app.state.nc.jetstream().key_value(BUCKET)
    await kv.delete(digest(sid))


async def find(request: Request[Any, Any, Any], sid: str) -> WebSession:
    if not _SID.fullmatch(sid):
        raise _unauthorized("not a session cookie")
    kv = await request.app.state.nc.jetstream().key_value(BUCKET)
    try:
        entry = await kv.get(digest(sid))
    except KeyNotFoundError:
        entry = None
    if entry is None or not entry.value:
        raise _unauthorized("the session has expired or was signed out")
    record = msgspec.json.decode(entry.value, type=WebSession)
    if record.expires_at <= time.time():
        raise _unauthorized("the session has expired")
    return record


def same_origin(request: Request[Any, Any, Any]) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


async def principal(request: Request[Any, Any, Any], sid: str) -> Principal:
    """The principal of a cookie-authenticated request; writes must prove they come from a console page."""
    record = await find(request, sid)
    who: Principal | None = await request.app.state.tokens.resolve_digest(record.token_digest)
    if who is None:
        raise _unauthorized("the session's token was revoked")
    if request.method not in SAFE_METHODS:
        if not same_origin(request):
            raise ApiError(403, "forbidden", "a cross-site request cannot use the console session", {"csrf": "site"})
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), (await csrf_token(request, sid)).encode()):
            raise ApiError(403, "forbidden", f"a write with the session cookie needs {CSRF_HEADER}", {"csrf": "token"})
    request.state.stream_holder = record.token_digest[:16]  # the token's id, as a bearer client's is
    return who
