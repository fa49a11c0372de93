"""The shared worker lifecycle: connect, start one service, serve /metrics and health, run until SIGTERM,
then stop fetching, finish in-flight work and drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol

import nats
import uvloop
from nats.aio.client import Client as NATS
from prometheus_client import CONTENT_TYPE_LATEST

from ..eventlog import nats_patches, streams, tracing
from . import broker_urls, heap, logs, metrics
from .settings import Shared, WorkerSettings

log = logging.getLogger(__name__)


class Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def connect(url: str, name: str, *, user: str | None = None, password: str | None = None) -> NATS:
    """A connection that reconnects forever: workers outlive broker restarts. ``url`` may list every node of
    a cluster (comma-separated): the client fails over to whichever answers. ``user``/``password`` are the
    service credentials (``TREADLE_NATS_USER``/``_PASSWORD``); they may also come in the URL."""
    nats_patches.install()
    options = broker_urls.parse(url).connect_options()
    if user:
        options.update(user=user, password=password)

    async def on_error(exc: Exception) -> None:
        log.warning("nats: %r", exc)

    return await nats.connect(
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        error_cb=on_error,
        allow_reconnect=True,
        connect_timeout=2,
        pending_size=64 * 1024 * 1024,
        **options,
    )


async def _health(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ready: Callable[[], bool], kind: str = ""
) -> None:
    try:
        line = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        path = line.split(b" ")[1] if line.count(b" ") >= 2 else b"/"
        if path == b"/metrics":
            status, ctype, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), metrics.exposition(kind)
        elif path == b"/healthz":
            status, ctype, body = b"200 OK", b"text/plain", b"ok\n"
        elif path == b"/readyz":
            ok = ready()
            status, ctype, body = (
                (b"200 OK" if ok else b"503 Service Unavailable"),
                b"text/plain",
                (b"ready\n" if ok else b"not ready\n"),
            )
        else:
            status, ctype, body = b"404 Not Found", b"text/plain", b"not found\n"
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: "
            + ctype
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
    finally:
        writer.close()


async def serve(
    name: str,
    shared: Shared,
    own: WorkerSettings,
    make: Callable[[NATS, contextlib.AsyncExitStack], Awaitable[Service]],
) -> None:
    kind, name = name, shared.replica_name(name)  # "coordinator-2": one of several replicas of a kind
    logs.setup(name, shared.log_level, shared.log_format)
    tracing.setup(kind)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(tracing.shutdown)  # last out: flushes the spans of the stop too

        async def start() -> Service:
            nc = await connect(shared.nats_url, f"treadle-{name}", user=shared.nats_user, password=shared.nats_password)
            stack.push_async_callback(_close, nc)
            await streams.ensure(nc.jetstream(), shared.stream_replicas)
            service = await make(nc, stack)
            await service.start()
            if own.metrics_port:  # after start: /readyz answering means the worker is consuming
                server = await asyncio.start_server(
                    lambda r, w: _health(r, w, lambda: nc.is_connected, kind), own.metrics_host, own.metrics_port
                )
                stack.push_async_callback(_close_server, server)
            return service

        # Starting can take long (a cluster electing leaders after a node loss): a SIGTERM meanwhile ends it.
        starting, stopping = asyncio.ensure_future(start()), asyncio.ensure_future(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            log.info("%s stopped while starting", name)
            return
        service = starting.result()
        heap.settle()
        log.info("%s started", name)
        await stopping
        log.info("%s stopping", name)
        bound = asyncio.timeout(own.stop_seconds)  # e.g. while the broker is away, every request waits out its timeout
        try:
            async with bound:
                await service.stop()
        except TimeoutError as exc:  # what it did not finish is redelivered to, or recovered by, the next owner
            if bound.expired():
                log.warning("%s did not stop within %g s; leaving anyway", name, own.stop_seconds)
            else:  # one of the stop's own requests timed out (the broker is away): it cannot finish either
                log.warning("%s could not finish stopping (%r); leaving anyway", name, exc)


async def _close(nc: NATS) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.drain(), 5)


async def _close_server(server: asyncio.AbstractServer) -> None:
    server.close()
    await server.wait_closed()


# After the service has stopped (or its bounded stop gave up), how long what is left may take to end when cancelled.
LEFTOVER_SECONDS = 2.0


def run(main: Callable[[], Awaitable[None]]) -> None:
    uvloop.run(_then_leave(main))


async def _then_leave(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main``, then make sure the process ends. asyncio would cancel the tasks still running and wait for
    every one of them, for ever if need be; but a task can outlive its cancellation: nats-py reports a cancelled
    ``next_msg`` on a closed connection as ``ConnectionClosedError``, and a loop that retries on errors then
    carries on (chaos: a supervisor SIGTERMed while a NATS node was down stopped, then never exited). Whatever
    the stop cut short is redelivered to, or recovered by, the next owner, so leaving is safe."""
    await main()
    leftovers = asyncio.all_tasks() - {asyncio.current_task()}
    for task in leftovers:
        task.cancel()
    if not leftovers:
        return
    _, stuck = await asyncio.wait(leftovers, timeout=LEFTOVER_SECONDS)
    if stuck:
        log.warning(
            "leaving %d task(s) that did not end when cancelled: %s",
            len(stuck),
            ", ".join(sorted(t.get_name() for t in stuck)),
        )
        logging.shutdown()
        os._exit(0)
