"""The web console: its page at ``/``, its static assets (plain ES modules and CSS, no build step, no CDN) and
the sign-in that turns a bearer token into a session cookie (``sessions``). Everything else the console
does goes through the public ``/v1`` API, the same as any client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import Cookie
from litestar.params import JSONBody
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

from . import sessions
from .errors import ApiError

STATIC = Path(__file__).with_name("console_static")
# No inline script or style, nothing from another origin: an injected string in a reply can only be text.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class SignIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    token: str


class SessionInfo(msgspec.Struct, kw_only=True):
    tenant: str
    user: str
    role: str
    csrf_token: str
    expires_at: float


@get("/", include_in_schema=False)
async def page() -> Response[Any]:
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html", headers=PAGE_HEADERS)


def _cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    return Cookie(
        key=sessions.COOKIE,
        value=value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@post("/console/session", status_code=201, include_in_schema=False)
async def sign_in(request: Request[Any, Any, Any], data: JSONBody[SignIn]) -> Response[Any]:
    sid, who, expires = await sessions.open_session(request, data.token.strip())
    info = SessionInfo(
        tenant=who.tenant,
        user=who.user,
        role=who.role,
        csrf_token=await sessions.csrf_token(request, sid),
        expires_at=expires,
    )
    return Response(
        info, status_code=201, cookies=[_cookie(request, sid, sessions.LIFETIME_SECONDS)], headers=PAGE_HEADERS
    )


def _sid(request: Request[Any, Any, Any]) -> str:
    sid = request.cookies.get(sessions.COOKIE)
    if not sid:
        raise ApiError(401, "unauthorized", "not signed in", headers={"WWW-Authenticate": "Bearer"})
    return sid


@get("/console/session", include_in_schema=False)
async def current(request: Request[Any, Any, Any]) -> Response[Any]:
    """Whether this browser is signed in: a probe the page makes on load, so "no" is an answer, not an error."""
    sid = request.cookies.get(sessions.COOKIE)
    try:
        record = await sessions.find(request, sid or "")
        who = await sessions.principal(request, sid or "")
    except ApiError as exc:
        return Response({"signed_in": False, "reason": exc.message if sid else "not signed in"}, headers=PAGE_HEADERS)
    info = SessionInfo(
        tenant=who.tenant,
        user=who.user,
        role=who.role,
        csrf_token=await sessions.csrf_token(request, sid or ""),
        expires_at=record.expires_at,
    )
    return Response(info, headers=PAGE_HEADERS)


@delete("/console/session", status_code=200, include_in_schema=False)
async def sign_out(request: Request[Any, Any, Any]) -> Response[Any]:
    sid = _sid(request)
    await sessions.principal(request, sid)  # a signed-in page of this origin, with its CSRF token
    await sessions.close_session(request, sid)
    return Response({"signed_out": True}, cookies=[_cookie(request, "", 0)], headers=PAGE_HEADERS)


ROUTES: list[ControllerRouterHandler] = [
    page,
    sign_in,
    current,
    sign_out,
    create_static_files_router(
        path="/console/static", directories=[STATIC], include_in_schema=False, cache_control=None
    ),
]
