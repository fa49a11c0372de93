"""Host side of a sandbox's only way out: a CONNECT proxy on a Unix socket that reaches the model API.

A sandbox has its own empty network namespace; the launcher bind-mounts one directory holding this
socket into it, and ``forward.py`` (inside) turns loopback ports into CONNECT requests over it. Each
connection here must start with ``CONNECT host:port HTTP/1.x``; only the (host, port) pairs the runtime's
URLs name are dialled (its model API's, and the orchestrator's MCP server's when it was given a credential),
host names compared exactly as written (lowercased) and resolved only once allowed. Anything else is answered
with an error status and never opens a connection. On the orchestrator's plain-http target the tunnel carries
only requests for its MCP path (``http_filter.py``): the rest of the gateway is not the runtime's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from treadle.sandbox.http_filter import McpRequests, Refused
from treadle.sandbox.tunnel import Blocked, TunnelEnd, join

log = logging.getLogger(__name__)

FORWARD_SCRIPT = Path(__file__).with_name("forward.py")
MAX_REQUEST_BYTES = 8 * 1024
DEFAULT_PORTS = {"https": 443, "http": 80}
MAX_URL_CHARS = 2048
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL

_HOST = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?|[0-9a-f:.]*:[0-9a-f:.]*")  # a name, IPv4 or bare IPv6
_AUTHORITY = re.compile(r"(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})")


class EgressError(Exception):
    """The egress proxy cannot be set up as asked."""


class EgressTargetError(ValueError):
    """A model API URL that cannot become an egress target."""


class EgressRequestError(Exception):
    """A client's request that is refused before anything is dialled; ``status`` is the HTTP answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def egress_target(url: str, what: str = "model API URL") -> tuple[str, int]:
    """The (host, port) ``url`` names; ``what`` the setting it came from, for the error."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise EgressTargetError(f"{what} {url!r}: scheme must be http or https, not {scheme or 'none'!r}")
    host = parts.hostname  # lowercased, IPv6 brackets removed
    if not host or not _HOST.fullmatch(host):
        raise EgressTargetError(f"{what} {url!r}: no valid host name")
    try:
        port = parts.port
    except ValueError as bad:  # non-numeric or out of range
        raise EgressTargetError(f"{what} {url!r}: bad port ({bad})") from None
    if port == 0:
        raise EgressTargetError(f"{what} {url!r}: bad port 0")
    return host, DEFAULT_PORTS[scheme] if port is None else port


def egress_targets(urls: Iterable[str]) -> frozenset[tuple[str, int]]:
    """The (host, port) pairs a runtime may reach: those of its URLs (model API, orchestrator)."""
    return frozenset(egress_target(url) for url in urls)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return False


def sandbox_reachable_url(url: str, what: str) -> str:
    """``url`` when a sandboxed runtime can reach it, else ``EgressTargetError`` saying why (for a setting
    checked when a worker starts). Inside, a loopback URL is served by the forwarder's listener on the same
    port and anything else only by its CONNECT proxy, which carries https alone: a remote plain-http URL would
    be refused on every request. No user:password either: it would be on the runtime's command line."""
    if len(url) > MAX_URL_CHARS:  # not repeated in the message either
        raise EgressTargetError(f"{what}: longer than {MAX_URL_CHARS} characters")
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:  # and the URL is not repeated: it holds them
        raise EgressTargetError(f"{what}: no credentials in the URL (they would be on the runtime's command line)")
    host, port = egress_target(url, what)
    if is_loopback(host) and ":" in host:
        raise EgressTargetError(f"{what} {url!r}: the sandbox's forwarder listens on 127.0.0.1, not on {host}")
    if is_loopback(host) and port < 1024:  # the forwarder runs as the tenant's uid, which binds no such port
        raise EgressTargetError(f"{what} {url!r}: a sandbox cannot listen on loopback port {port} (below 1024)")
    if parts.scheme.lower() == "http" and not is_loopback(host):
        raise EgressTargetError(
            f"{what} {url!r}: a sandboxed runtime reaches plain http only on the loopback (127.0.0.1); "
            "give the remote gateway's https URL"
        )
    return url


@dataclass(frozen=True, slots=True)
class Routes:
    """How a sandbox reaches its URLs: what the host's Egress allows, the forwarder's loopback listeners
    (listen port, host, port), and whether anything goes through its CONNECT proxy (HTTPS_PROXY)."""

    allowed: frozenset[tuple[str, int]]
    ports: tuple[tuple[int, str, int], ...]
    proxied: bool


def routes(urls: Sequence[str]) -> Routes:
    ports: dict[tuple[int, str, int], None] = {}
    proxied = False
    for url in urls:
        host, port = egress_target(url)
        if is_loopback(host):
            ports[(port, host, port)] = None  # the runtime keeps its URL: a listener on the same port
        else:
            proxied = True
    return Routes(egress_targets(urls), tuple(ports), proxied)


def mcp_paths(orchestrator_url: str | None, urls: Sequence[str]) -> dict[tuple[str, int], str]:
    """The orchestrator's plain-http target and its MCP path, the one path its tunnel carries (an https one is
    not readable on the way; a target that is also a model API's is left whole, as that API needs it)."""
    if orchestrator_url is None or urlsplit(orchestrator_url).scheme.lower() != "http":
        return {}
    target = egress_target(orchestrator_url, "MCP URL")
    if any(egress_target(url) == target for url in urls if url != orchestrator_url):
        log.warning("the MCP URL %s shares its host:port with a model API: its tunnel is not limited", target)
        return {}
    return {target: urlsplit(orchestrator_url).path or "/"}


def parse_connect(head: bytes) -> tuple[str, int]:
    """The target of a CONNECT request head (request line, headers, blank line).

    Headers are not interpreted: the request line alone names the target."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise EgressRequestError(400, "request is not ASCII") from None
    request_line = text.split("\r\n", 1)[0]
    parts = request_line.split(" ")
    if len(parts) != 3:
        raise EgressRequestError(400, "malformed request line")
    method, authority, version = parts
    if method != "CONNECT":
        raise EgressRequestError(405, "only CONNECT is served")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise EgressRequestError(400, "unsupported HTTP version")
    match = _AUTHORITY.fullmatch(authority)
    if not match:
        raise EgressRequestError(400, "target is not host:port")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise EgressRequestError(400, "port out of range")
    return (match["ip6"] or match["name"]).lower(), port


@dataclass(slots=True)
class EgressCounts:
    """What an Egress has done, for logs and metrics."""

    accepted: int = 0
    refused: int = 0  # error answers: not allowed, malformed, too many, upstream unreachable
    tunnelled: int = 0


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Egress:
    """One sandbox's proxy: listens on ``socket_path`` and tunnels to the ``allowed`` (host, port) pairs.

    The directory of ``socket_path`` must exist and be the sandbox's alone; the socket is made mode 0666
    so the sandbox's uid can connect. ``close()`` stops listening and ends every open connection."""

    def __init__(
        self,
        socket_path: Path,
        allowed: frozenset[tuple[str, int]],
        *,
        max_connections: int = 64,
        request_timeout: float = 5.0,
        connect_timeout: float = 10.0,
        paths: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """``paths``: targets whose tunnel carries only HTTP requests for that path (the MCP server's)."""
        if len(os.fsencode(socket_path)) > UNIX_PATH_MAX:
            raise EgressError(f"socket path {socket_path} is longer than {UNIX_PATH_MAX} bytes")
        self.socket_path = Path(socket_path)
        self.allowed = frozenset((host.lower(), port) for host, port in allowed)
        self.paths = {(host.lower(), port): path for (host, port), path in (paths or {}).items()}
        self.max_connections = max_connections
        self.request_timeout, self.connect_timeout = request_timeout, connect_timeout
        self.counts = EgressCounts()
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._clients: set[TunnelEnd] = set()
        self._closing = False

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        if self._server is not None:
            raise EgressError("already started")
        self._closing = False
        _remove_stale_socket(self.socket_path)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: TunnelEnd(MAX_REQUEST_BYTES, on_connect=self._accepted), path=os.fspath(self.socket_path)
        )
        os.chmod(self.socket_path, 0o666)

    async def close(self) -> None:
        if self._server is None:
            return
        server, self._server, self._closing = self._server, None, True
        server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for client in list(self._clients):  # refused ones still flushing their answer included
            client.abort()
        await server.wait_closed()  # uvloop's waits for every accepted transport to be gone
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def __aenter__(self) -> Egress:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _accepted(self, client: TunnelEnd) -> None:
        self.counts.accepted += 1
        self._clients.add(client)
        client.lost.add_done_callback(lambda _: self._clients.discard(client))
        if self._closing or len(self._connections) >= self.max_connections:
            # No lingering over the bound: the answer may be lost to a client writing its request already.
            client.transport.write(self._refusal(503, f"more than {self.max_connections} connections"))
            client.transport.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(client))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, client: TunnelEnd) -> None:
        upstream: TunnelEnd | None = None
        try:
            try:
                head, early = await self._read_head(client)
                host, port = parse_connect(head)
                if (host, port) not in self.allowed:
                    raise EgressRequestError(403, f"{host}:{port} is not an allowed target")
                path = self.paths.get((host, port))
                requests = McpRequests(path) if path is not None else None
                early = requests(early) if requests is not None else early
                upstream = await self._dial(host, port)
                if requests is not None:
                    client.inspect = self._blocking(requests)
            except (EgressRequestError, Refused) as refused:
                client.refuse(self._refusal(refused.status, str(refused)), linger=self.request_timeout)
                await client.lost  # the slot stays taken until the client has gone
                return
            self.counts.tunnelled += 1
            # bytes the client sent right behind its request belong to the tunnel: join passes them on
            join(client, upstream, b"HTTP/1.1 200 Connection established\r\n\r\n", early)
            await asyncio.wait([client.lost, upstream.lost])
        except BaseException:
            client.abort()  # cancelled by close(), or a bug: drop both ends at once
            if upstream is not None:
                upstream.abort()
            raise

    def _blocking(self, requests: McpRequests) -> Callable[[bytes], bytes]:
        """``requests`` as a joined tunnel's inspector: a refused request ends the tunnel with the refusal."""

        def inspect(data: bytes) -> bytes:
            try:
                return requests(data)
            except Refused as refused:
                raise Blocked(self._refusal(refused.status, str(refused))) from None

        return inspect

    async def _read_head(self, client: TunnelEnd) -> tuple[bytes, bytes]:
        """The request head and whatever came right behind it; the head never longer than the bound."""
        try:
            async with asyncio.timeout(self.request_timeout):
                while True:
                    end = client.pending.find(b"\r\n\r\n")
                    if end + 4 > MAX_REQUEST_BYTES or (end < 0 and len(client.pending) >= MAX_REQUEST_BYTES):
                        raise EgressRequestError(431, f"request head over {MAX_REQUEST_BYTES} bytes")
                    if end >= 0:
                        return bytes(client.pending[: end + 4]), bytes(client.pending[end + 4 :])
                    if client.eof:
                        raise EgressRequestError(400, "connection closed inside the request head")
                    client.changed.clear()
                    await client.changed.wait()
        except TimeoutError:
            raise EgressRequestError(408, f"no complete request within {self.request_timeout}s") from None

    async def _dial(self, host: str, port: int) -> TunnelEnd:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, upstream = await loop.create_connection(lambda: TunnelEnd(MAX_REQUEST_BYTES), host, port)
        except TimeoutError:
            raise EgressRequestError(504, f"{host}:{port} did not answer within {self.connect_timeout}s") from None
        except OSError as failed:
            raise EgressRequestError(502, f"{host}:{port} unreachable: {failed.strerror or failed}") from None
        return upstream

    def _refusal(self, status: int, reason: str) -> bytes:
        self.counts.refused += 1
        log.warning("egress %s refused a connection: %d %s", self.socket_path, status, reason)
        return f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()


def _remove_stale_socket(path: Path) -> None:
    """A socket left by an earlier Egress would make bind fail; anything else at the path is an error."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise EgressError(f"{path} exists and is not a socket")
    os.unlink(path)


def world_reachable(path: str | os.PathLike[str]) -> bool:
    """True when any uid may traverse to ``path`` and read and execute it (an unprivileged sandbox must)."""
    path = Path(os.path.realpath(path))
    try:
        if path.stat().st_mode & 0o005 != 0o005:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in path.parents)
    except OSError:
        return False


def sandbox_python(candidates: Sequence[str] = ()) -> str:
    """An interpreter the sandbox's uid can run ``forward.py`` with (stdlib only, any Python 3.8+).

    The venv's own interpreter often lives under a private home (``/root/.pyenv``), so the real
    interpreter of ``sys.executable`` is used only when every uid can reach it."""
    for candidate in (*candidates, os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        if world_reachable(candidate):
            return os.path.realpath(candidate)
    raise EgressError("no Python interpreter that an unprivileged sandbox uid can execute")


def forward_command(
    socket_path: Path,
    argv: Sequence[str],
    *,
    ports: Iterable[tuple[int, str, int]] = (),
    proxy_port: int | None = None,
    python: str | None = None,
) -> list[str]:
    """The command line that runs ``argv`` inside the sandbox behind ``forward.py``.

    ``ports``: (listen port, target host, target port) — a loopback listener per model API that the
    runtime reaches with an unchanged base URL. ``proxy_port``: a loopback CONNECT proxy for remote https
    APIs (set ``HTTPS_PROXY=http://127.0.0.1:<proxy_port>`` for the runtime)."""
    command = [python or sandbox_python(), "-I", "-S", os.fspath(FORWARD_SCRIPT), "--unix", os.fspath(socket_path)]
    for listen, host, port in ports:
        command += ["--port", f"{listen}={_authority(host)}:{port}"]
    if proxy_port is not None:
        command += ["--proxy", str(proxy_port)]
    return [*command, "--", *argv]


def proxy_environment(proxy_port: int) -> dict[str, str]:
    """Environment for a runtime that reaches remote https model APIs through the forwarder's proxy.

    Loopback stays direct: the forwarder's ``--port`` listeners serve it."""
    proxy = f"http://127.0.0.1:{proxy_port}"
    no_proxy = "127.0.0.1,localhost,::1"
    return {"HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": no_proxy, "no_proxy": no_proxy}


def _authority(host: str) -> str:
    return f"[{host}]" if ":" in host else host
