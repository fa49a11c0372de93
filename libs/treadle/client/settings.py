"""Where a client finds its gateway and token when the caller names neither: ``TREADLE_API_URL`` and
``TREADLE_TOKEN``, the variables the CLI reads too, so one exported pair serves the SDK, the CLI and scripts.

A value is checked before it reaches httpx: a URL that is not http(s) or a token with characters a header cannot
carry is a :class:`ClientConfigError` naming the variable, never a request sent somewhere unexpected."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

API_URL_ENV = "TREADLE_API_URL"
TOKEN_ENV = "TREADLE_TOKEN"
_TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")  # visible ASCII: a bearer token never holds a space or a line break


class ClientConfigError(ValueError):
    """The gateway URL or token is missing or malformed (given, or read from the environment)."""


def resolve(base_url: str | None, token: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The URL and token to use: each argument given, else its environment variable."""
    env = os.environ if environ is None else environ
    url = base_url if base_url is not None else env.get(API_URL_ENV, "")
    secret = token if token is not None else env.get(TOKEN_ENV, "")
    source_url = "base_url" if base_url is not None else API_URL_ENV
    source_token = "token" if token is not None else TOKEN_ENV
    if not url:
        raise ClientConfigError(f"no gateway URL: pass base_url or set {API_URL_ENV}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientConfigError(f"{source_url} must be an http(s) URL with a host, not {url[:200]!r}")
    if not secret:
        raise ClientConfigError(f"no API token: pass token or set {TOKEN_ENV}")
    if not _TOKEN.fullmatch(secret):
        raise ClientConfigError(f"{source_token} holds characters a bearer token cannot have")
    return url.rstrip("/"), secret
