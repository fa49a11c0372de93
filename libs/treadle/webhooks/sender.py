"""One signed POST to a webhook endpoint, with the outbound rules of ``addresses``: the host is resolved and
every address checked right before connecting, and the connection goes to a checked address (TLS still
verifies the host name), so nothing between the check and the connect can swap the address. Redirects are
not followed (a 3xx is a failure); connect and read are timed out; at most ``max_response`` bytes of the
answer are read. HTTP/1.1 over asyncio streams: small enough to hold every one of these rules in view."""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

from treadle.client.webhooks import HEADER, sign

from .addresses import AllowList, UnsafeTarget, checked_addresses, parse_url

USER_AGENT = "Treadle-Webhooks/1"


@dataclass(frozen=True)
class Limits:
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    max_response: int = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status: int | None = None
    error: str | None = None


async def post(
    url: str,
    body: bytes,
    secret: str,
    delivery: str,
    allow: AllowList,
    limits: Limits,
    tls: ssl.SSLContext | None = None,
) -> Outcome:
    """POST ``body`` signed with ``secret``; ok on a 2xx answer. Never raises for the receiver's faults."""
    try:
        target = parse_url(url)
        addresses = await checked_addresses(target, allow)
    except UnsafeTarget as exc:
        return Outcome(False, error=f"refused: {exc}")
    head = (
        f"POST {target.path} HTTP/1.1\r\n"
        f"Host: {_host_header(target.host, target.port, target.scheme)}\r\n"
        f"User-Agent: {USER_AGENT}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{HEADER}: {sign(secret, body, int(time.time()))}\r\n"
        f"Treadle-Delivery: {delivery}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    context = (tls or ssl.create_default_context()) if target.scheme == "https" else None
    last_error = "no address"
    for address in addresses:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    str(address),
                    target.port,
                    ssl=context,
                    server_hostname=target.host if context is not None else None,
                ),
                limits.connect_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            last_error = f"connect to {address}: {exc!r}"
            continue
        try:
            writer.write(head + body)
            return await asyncio.wait_for(_answer(reader, limits.max_response), limits.read_timeout)
        except TimeoutError:
            return Outcome(False, error=f"no answer within {limits.read_timeout:g}s")
        except (OSError, ValueError, ssl.SSLError) as exc:
            return Outcome(False, error=f"{exc!r}")
        finally:
            writer.close()
    return Outcome(False, error=last_error)


def _host_header(host: str, port: int, scheme: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == (443 if scheme == "https" else 80) else f"{shown}:{port}"


async def _answer(reader: asyncio.StreamReader, cap: int) -> Outcome:
    """The status of the answer, read with its headers (at most ``cap`` bytes); the body is not read: nothing in
    it is used, and a receiver that keeps the connection open after it must not hold the delivery up."""
    line = await reader.readline()
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        return Outcome(False, error="not an HTTP answer")
    status = int(parts[1])
    read = len(line)
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        read += len(header)
        if read > cap:
            return Outcome(False, status, "the answer's headers exceed the response cap")
    if 200 <= status < 300:
        return Outcome(True, status)
    if 300 <= status < 400:
        return Outcome(False, status, "redirects are not followed")
    return Outcome(False, status, f"answered {status}")
