"""The host side of the egress path over its real Unix socket: what it tunnels, what it refuses, what it
never dials, its bounds and its shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.integration.egress_servers import MODELS, Listener, free_port, model_api, socket_dir
from tests.support.helpers import wait_for
from treadle.sandbox.egress import Egress, EgressError


@pytest.fixture
def api_port() -> Iterator[int]:
    with model_api() as port:
        yield port


@pytest.fixture
def broker() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def sink() -> Iterator[Listener]:
    """An allowed target that never answers: malformed requests naming it must still not reach it."""
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
async def egress(api_port: int, sink: Listener) -> AsyncIterator[Egress]:
    with socket_dir() as directory:
        async with Egress(
            directory / "egress.sock",
            frozenset({("127.0.0.1", api_port), ("127.0.0.1", sink.port)}),
            request_timeout=1.0,
        ) as proxy:
            yield proxy


async def within(awaitable, seconds: float = 10):
    """A read that must finish: a bug fails the test instead of hanging it."""
    return await asyncio.wait_for(awaitable, seconds)


async def connect(egress: Egress, target: str) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(os.fspath(egress.socket_path))
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    return await within(reader.readuntil(b"\r\n\r\n")), reader, writer


async def answer_to(egress: Egress, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(os.fspath(egress.socket_path))
    writer.write(raw)
    answer = await within(reader.read())  # to EOF: the proxy closes after refusing
    writer.close()
    return answer


async def test_an_allowed_target_is_tunnelled_both_ways_with_half_close(egress, api_port):
    head, reader, writer = await connect(egress, f"127.0.0.1:{api_port}")
    assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
    writer.write(b"GET /v1/models HTTP/1.0\r\n\r\n")
    writer.write_eof()  # the client is done sending; the answer must still come back whole
    response = await within(reader.read())
    assert response.startswith(b"HTTP/1.0 200") and response.endswith(b"\r\n\r\n" + MODELS)
    assert egress.counts.tunnelled == 1 and egress.counts.refused == 0


async def test_bytes_sent_right_behind_the_connect_request_reach_the_target(egress, api_port):
    answer = await answer_to(
        egress, f"CONNECT 127.0.0.1:{api_port} HTTP/1.1\r\n\r\nGET /v1/models HTTP/1.0\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200")
    assert answer.endswith(MODELS)


async def test_a_target_not_allowed_gets_403_is_logged_and_never_dialled(egress, broker, api_port, caplog):
    caplog.set_level(logging.WARNING, logger="treadle.sandbox.egress")
    head, _, _ = await connect(egress, f"127.0.0.1:{broker.port}")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    # Names are compared as written: the model API's port under another name is not the model API.
    head, _, _ = await connect(egress, f"localhost:{api_port}")
    assert head.startswith(b"HTTP/1.1 403 ")
    assert broker.waiting() == 0
    assert egress.counts.refused == 2 and egress.counts.tunnelled == 0
    assert f"127.0.0.1:{broker.port} is not an allowed target" in caplog.text


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"405"),
        (b"CONNECT 127.0.0.1:{port}\r\n\r\n", b"400"),
        (b"CONNECT 127.0.0.1:{port} HTTP/1.1 extra\r\n\r\n", b"400"),
        (b"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
        (b"CONNECT 127.0.0.1:{port} HTTP/1.1\n\n", b"408"),  # bare LFs never end the head: the timeout does
        (b"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n", b"400"),  # closed half-way (write_eof below)
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),  # a TLS hello, not a request
    ],
    ids=["not-connect", "no-version", "extra-token", "oversized", "lf-only-timeout", "eof-mid-head", "binary"],
)
async def test_malformed_or_oversized_requests_are_refused_without_any_connection(egress, sink, request_head, status):
    reader, writer = await asyncio.open_unix_connection(os.fspath(egress.socket_path))
    writer.write(request_head.replace(b"{port}", str(sink.port).encode()))
    if status == b"400" and request_head.endswith(b"HTTP/1.1\r\n"):
        writer.write_eof()
    answer = await within(reader.read())
    assert answer.startswith(b"HTTP/1.1 " + status + b" ")
    assert sink.waiting() == 0
    assert egress.counts.tunnelled == 0


async def test_an_unreachable_allowed_target_gets_502(api_port):
    dead = free_port()
    with socket_dir() as directory:
        async with Egress(directory / "e.sock", frozenset({("127.0.0.1", dead)})) as egress:
            head, _, _ = await connect(egress, f"127.0.0.1:{dead}")
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")


async def test_connections_beyond_the_bound_get_503(api_port):
    with socket_dir() as directory:
        async with Egress(directory / "e.sock", frozenset({("127.0.0.1", api_port)}), max_connections=2) as egress:
            opened = [await connect(egress, f"127.0.0.1:{api_port}") for _ in range(2)]
            assert all(head.startswith(b"HTTP/1.1 200 ") for head, _, _ in opened)
            # Refused at once, before its request: read it without writing (a write might meet the close).
            reader, _ = await asyncio.open_unix_connection(os.fspath(egress.socket_path))
            assert (await within(reader.read())).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            # A slot freed is a slot usable again.
            _, reader, writer = opened[0]
            writer.close()
            await within(reader.read())
            await wait_for(lambda: egress.open_connections < 2, what="the proxy noticing the closed tunnel")
            head, _, _ = await connect(egress, f"127.0.0.1:{api_port}")
            assert head.startswith(b"HTTP/1.1 200 ")


async def test_a_refused_client_keeps_its_slot_until_it_goes_or_the_request_timeout_passes(broker):
    with socket_dir() as directory:
        async with Egress(directory / "e.sock", frozenset(), max_connections=1, request_timeout=0.5) as egress:
            head, reader, writer = await connect(egress, f"127.0.0.1:{broker.port}")
            assert head.startswith(b"HTTP/1.1 403 ") and await within(reader.read()) == b""  # answered, half-closed
            assert egress.open_connections == 1  # the client has not closed: the slot is still its own
            await wait_for(lambda: egress.open_connections == 0, timeout=5, what="the lingering refusal to end")
            writer.close()
    assert broker.waiting() == 0


async def test_close_ends_open_tunnels_and_removes_the_socket(egress, api_port):
    head, reader, _ = await connect(egress, f"127.0.0.1:{api_port}")
    assert head.startswith(b"HTTP/1.1 200 ")
    await egress.close()
    assert await within(reader.read()) == b""
    assert not egress.socket_path.exists()


async def test_the_socket_is_0666_and_a_stale_one_is_replaced(api_port):
    with socket_dir() as directory:
        path = directory / "e.sock"
        first = Egress(path, frozenset())
        await first.start()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
        first._server.close()  # a crashed predecessor: its socket file stays behind
        async with Egress(path, frozenset({("127.0.0.1", api_port)})) as second:
            head, _, _ = await connect(second, f"127.0.0.1:{api_port}")
            assert head.startswith(b"HTTP/1.1 200 ")
        path.write_text("not a socket")
        with pytest.raises(EgressError, match="not a socket"):
            await Egress(path, frozenset()).start()


def test_a_socket_path_too_long_for_sun_path_is_refused_up_front():
    with pytest.raises(EgressError, match="longer than"):
        Egress(Path("/tmp/" + "x" * 200), frozenset())
