"""The interactive API reference at ``/schema/reference``: a small page of the gateway's own (no CDN, no vendored
bundle) that reads ``/schema/openapi.json`` and lists every operation with its parameters, body and answers,
and sends a request with the token typed into it. It runs under the console's Content-Security-Policy: its
script and stylesheet come from this origin, and every text from the document is set as text."""

from __future__ import annotations

from pathlib import Path

from litestar import Response, get
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

from .console import PAGE_HEADERS

STATIC = Path(__file__).with_name("api_static")


@get("/schema/reference", include_in_schema=False)
async def reference_page() -> Response[bytes]:
    return Response((STATIC / "index.html").read_bytes(), media_type="text/html", headers=PAGE_HEADERS)


ROUTES: list[ControllerRouterHandler] = [
    reference_page,
    create_static_files_router(
        path="/schema/reference/static", directories=[STATIC], include_in_schema=False, cache_control=None
    ),
]
