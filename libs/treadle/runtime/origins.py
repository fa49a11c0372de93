"""What a CORS origin may be: exactly ``scheme://host[:port]`` as a browser sends it in ``Origin``. A wildcard,
``null`` (sandboxed frames, files) or a value with a path, query or credentials is refused when the gateway
starts, so a typo cannot quietly open the API to every site."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_origin(origin: str) -> str:
    parts = urlsplit(origin)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"CORS origin {origin!r}: {exc}") from None
    exact = f"{parts.scheme}://{parts.hostname}" + (f":{port}" if port is not None else "")
    if parts.scheme not in ("http", "https") or not parts.hostname or origin != exact:
        raise ValueError(f"CORS origin {origin!r} is not exactly scheme://host[:port] (http or https, lower case)")
    return origin
