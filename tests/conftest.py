"""Shared fixtures: one nats-server and one redis-server for the whole session, on free ports.

Set TREADLE_TEST_NATS_URL / TREADLE_TEST_REDIS_URL to test against servers you run yourself.
Without a local binary, a reachable Docker engine is used through testcontainers.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from urllib.parse import urlparse

import nats
import pytest
import uvloop
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from tests.support import deadline
from tests.support.helpers import wait_for
from treadle.ops.servers import NatsServer, RedisServer, ServerNotFound

NATS_IMAGE = os.environ.get("TREADLE_TEST_NATS_IMAGE", "nats:2.15.1")
REDIS_IMAGE = os.environ.get("TREADLE_TEST_REDIS_IMAGE", "redis:7")
logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request buries what a failure report should show


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, object]:
    # pytest-asyncio 1.x replaced the event_loop_policy fixture with this hook.
    return {"uvloop": uvloop.new_event_loop}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Async tests get their deadline here (tests/support/deadline.py says why pytest-timeout cannot)."""
    test = getattr(item, "obj", None)
    if inspect.iscoroutinefunction(test):
        item.obj = deadline.bounded(test, deadline.seconds_for(item))  # type: ignore[attr-defined]  # a pytest.Function's obj


@dataclass(frozen=True)
class ExternalServer:
    """A server someone else runs: the tests only know its URL and never start or stop it."""

    url: str


@pytest.fixture(scope="session")
async def nats_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NatsServer | ExternalServer]:
    if url := os.environ.get("TREADLE_TEST_NATS_URL"):
        yield ExternalServer(url)
        return
    try:
        server = NatsServer(tmp_path_factory.mktemp("nats"))
    except ServerNotFound as missing:
        with _container(NATS_IMAGE, 4222, "-js", missing) as (host, port):
            url = f"nats://{host}:{port}"
            await wait_for(lambda: _nats_answers(url), timeout=60, interval=0.2, what=f"NATS at {url}")
            yield ExternalServer(url)
        return
    async with server:
        yield server


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServer | ExternalServer) -> str:
    return nats_server.url


@pytest.fixture(scope="session")
async def redis_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RedisServer | ExternalServer]:
    if url := os.environ.get("TREADLE_TEST_REDIS_URL"):
        yield ExternalServer(url)
        return
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
    except ServerNotFound as missing:
        with _container(REDIS_IMAGE, 6379, None, missing) as (host, port):
            url = f"redis://{host}:{port}/0"
            await wait_for(lambda: _redis_answers(url), timeout=60, interval=0.2, what=f"Redis at {url}")
            yield ExternalServer(url)
        return
    async with server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | ExternalServer) -> str:
    return redis_server.url


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NatsClient]:
    conn = await nats.connect(nats_url, name="treadle-tests", connect_timeout=5)
    yield conn
    if not conn.is_closed:
        await conn.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=False)
    yield client
    await client.aclose()


# --- Docker fallback -------------------------------------------------------------------------


@contextlib.contextmanager
def _container(image: str, port: int, command: str | None, missing: ServerNotFound) -> Iterator[tuple[str, int]]:
    if not _docker_reachable():
        pytest.fail(f"{missing} (and no Docker engine is reachable for a testcontainers fallback)", pytrace=False)
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError:
        pytest.fail(
            f"{missing}. A Docker engine is reachable, but testcontainers is not installed "
            "(`.venv/bin/pip install testcontainers` to use it instead)",
            pytrace=False,
        )
    container = DockerContainer(image).with_exposed_ports(port)
    if command:
        container = container.with_command(command)
    container.start()
    try:
        yield container.get_container_host_ip(), int(container.get_exposed_port(port))
    finally:
        container.stop()


def _docker_reachable() -> bool:
    target = urlparse(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        if target.scheme == "unix":
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(target.path)
        elif target.scheme == "tcp":
            socket.create_connection((target.hostname, target.port or 2375), timeout=1).close()
        # Other schemes (ssh://, npipe://): let testcontainers try and report its own error.
        return True
    except OSError:
        return False


async def _nats_answers(url: str) -> bool:
    try:
        conn = await nats.connect(url, allow_reconnect=False, connect_timeout=1)
    except Exception:
        return False
    await conn.close()
    return True


async def _redis_answers(url: str) -> bool:
    client = Redis.from_url(url)
    try:
        return bool(await client.ping())
    except Exception:
        return False
    finally:
        await client.aclose()
