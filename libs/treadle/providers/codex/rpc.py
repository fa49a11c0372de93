"""A small JSON-RPC client for ``codex app-server`` (and ACP agents) over stdio: one JSON object per line,
with no ``jsonrpc`` field for Codex and ``"jsonrpc": "2.0"`` for ACP. Server requests share the id space of client requests, so a message is routed by whether it
carries a ``method`` (notification or server request) or not (the answer to one of ours)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ...runtime.children import die_with_parent
from .. import exits

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_LINE_LIMIT = 64 * 1024 * 1024  # a command's aggregated output arrives in one line
_DRAIN_AFTER_EXIT = 1.0  # seconds to read what a dead server wrote when its stdout never reaches EOF


class _ExitAware(asyncio.subprocess.SubprocessStreamProtocol):
    """Says when the server itself exits. Codex's own children (its login-shell snapshot, a backgrounded
    command, and whatever a login profile leaves behind, e.g. pyenv's rehash) inherit its stdio, so EOF on
    stdout, and with it ``Process.wait()``, can come long after the server is gone."""

    def __init__(self, on_exit: Callable[[], None], limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self._on_exit = on_exit

    def process_exited(self) -> None:
        super().process_exited()
        self._on_exit()


class RpcError(Exception):
    """The server answered a request with an error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message


class ProcessGone(Exception):
    """The app-server process exited; every pending and later request fails with this."""


Notify = Callable[[str, dict[str, Any]], None]
ServerRequest = Callable[[int | str, str, dict[str, Any]], None]


class RpcProcess:
    """One ``codex app-server`` child. ``on_notification(method, params)`` and ``on_request(id, method,
    params)`` are called from the reader task in arrival order. The child stays in its host's process
    group and gets SIGKILL if the host dies, so a killed host leaves no writer holding its threads, and its
    turn is cut off as by a crash (a runtime that is asked to stop records its turn as the user's interruption,
    which the retried turn must not be told; L9.3)."""

    def __init__(
        self,
        on_notification: Notify,
        on_request: ServerRequest,
        *,
        runtime: str = "codex app-server",
        jsonrpc: bool = False,
    ) -> None:
        self._runtime = runtime  # how errors and logs name the process
        self._envelope: dict[str, Any] = {"jsonrpc": "2.0"} if jsonrpc else {}
        self._on_notification = on_notification
        self._on_request = on_request
        self._proc: asyncio.subprocess.Process | None = None
        self._next_id = 0
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._reader: asyncio.Task[Any] | None = None
        self._stderr_task: asyncio.Task[Any] | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._gone = asyncio.Event()  # the server process exited (its stdio may still be open)
        self._exit_watch: asyncio.Task[Any] | None = None
        self._write_lock = asyncio.Lock()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        loop = asyncio.get_running_loop()
        pipe = asyncio.subprocess.PIPE
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitAware(self._gone.set, _LINE_LIMIT, loop),
            *argv,
            stdin=pipe,
            stdout=pipe,
            stderr=pipe,
            env=env,
            cwd=str(cwd),
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        self._transport = transport
        self._proc = asyncio.subprocess.Process(transport, protocol, loop)
        self._reader = asyncio.create_task(self._read(), name=f"codex-rpc:{self._proc.pid}")
        self._stderr_task = asyncio.create_task(self._drain_stderr(), name=f"codex-stderr:{self._proc.pid}")
        self._exit_watch = asyncio.create_task(self._watch_exit(), name=f"codex-exit:{self._proc.pid}")

    async def request(self, method: str, params: dict[str, Any] | None, timeout: float) -> Any:
        if self.exited.is_set():
            raise ProcessGone(self.describe_exit())
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, future)
        try:
            await self._send({**self._envelope, "id": request_id, "method": method, "params": params or {}})
            async with asyncio.timeout(timeout):
                return await future
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {**self._envelope, "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def reply(self, request_id: int | str, result: dict[str, Any] | None) -> None:
        await self._send({**self._envelope, "id": request_id, "result": result})

    async def reply_error(self, request_id: int | str, code: int, message: str) -> None:
        await self._send({**self._envelope, "id": request_id, "error": {"code": code, "message": message}})

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._proc and self._proc.stdin
        async with self._write_lock:
            try:
                self._proc.stdin.write(_encode(message) + b"\n")
                await self._proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise ProcessGone(self.describe_exit()) from exc

    async def _read(self) -> None:
        assert self._proc and self._proc.stdout
        try:
            while line := await self._proc.stdout.readline():
                try:
                    message = _decode(line)
                except msgspec.DecodeError:
                    log.warning("%s wrote a line that is not JSON: %r", self._runtime, line[:200])
                    continue
                self._dispatch(message)
        except Exception:
            log.exception("%s reader failed", self._runtime)

    async def _watch_exit(self) -> None:
        """The server is gone once its process exits: what it wrote before is read, then every waiter is told."""
        await self._gone.wait()
        assert self._reader is not None and self._stderr_task is not None
        done, _ = await asyncio.wait([self._reader, self._stderr_task], timeout=_DRAIN_AFTER_EXIT)
        for task in (self._reader, self._stderr_task):
            if task not in done:
                task.cancel()  # an orphan of the server still holds the other end of the pipe
        await asyncio.gather(self._reader, self._stderr_task, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()  # our ends of the pipes; the orphan's writes now fail instead of piling up
        self.exited.set()
        gone = ProcessGone(self.describe_exit())
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(gone)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            entry = self._pending.get(message.get("id"))  # type: ignore[arg-type]  # any JSON id: one not ours finds nothing
            if entry is None or entry[1].done():
                return
            name, future = entry
            if "error" in message:
                error = message["error"] or {}
                future.set_exception(RpcError(name, int(error.get("code", 0)), str(error.get("message", ""))))
            else:
                future.set_result(message.get("result"))
        elif "id" in message:
            self._on_request(message["id"], method, message.get("params") or {})
        else:
            self._on_notification(method, message.get("params") or {})

    async def _drain_stderr(self) -> None:
        assert self._proc and self._proc.stderr
        while line := await self._proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.stderr_tail.append(text)
            log.debug("%s: %s", self._runtime, text)

    def describe_exit(self) -> str:
        return exits.describe(self._runtime, self._proc.returncode if self._proc else None, self.stderr_tail)

    async def kill(self) -> None:
        """SIGKILL, as a crash ends the process: it records nothing of the turn it was playing (L9.3)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self.exited.wait()

    async def close(self, grace: float = 5.0) -> None:
        """Closing stdin ends the server; a server that lingers is killed."""
        if self._proc is None:
            return
        if self._proc.returncode is None and self._proc.stdin:
            with contextlib.suppress(Exception):
                self._proc.stdin.close()
            try:
                async with asyncio.timeout(grace):
                    await self.exited.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
        await self.exited.wait()
        for task in (self._reader, self._stderr_task):
            if task:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
