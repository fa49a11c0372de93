"""A webhook receiver on loopback for the tests: it records every request it gets and answers each from a
script of answers (the last one repeats), so a test can make it fail, redirect, stall or flood."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float  # wall clock (time.time()), for a latency measured against an event's `at`


@dataclass
class Receiver:
    answers: list[bytes] = field(default_factory=lambda: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    stall: bool = False  # read the request, never answer
    stall_after_answer: bool = False  # answer, then keep the connection open
    requests: list[Received] = field(default_factory=list)
    connections: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self, port: int = 0) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def wait(self, count: int, timeout: float = 30.0) -> list[Received]:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.requests

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            line = await reader.readline()
            headers: dict[str, str] = {}
            while (raw := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = raw.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            answer = self.answers[min(len(self.requests), len(self.answers) - 1)]
            self.requests.append(Received(line.decode().split(" ")[1], headers, body, time.time()))
            self.arrived.set()
            if self.stall:
                await asyncio.Event().wait()
            writer.write(answer)
            await writer.drain()
            if self.stall_after_answer:
                await asyncio.Event().wait()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def answer(status: int, reason: str = "X", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n{extra}\r\n".encode()
