"""One simulated UI per thread: its SSE stream and its POSTs, timing every run from send to ``run.completed``."""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

import httpx
import msgspec

TERMINAL = {b"run.completed", b"run.failed", b"run.interrupted", b"run.cancelled"}
RUN_TIMEOUT = 120.0  # a loaded shared machine; a first capture of 10,000 files


class _Delta(msgspec.Struct):
    run_id: str = ""


class _Data(msgspec.Struct):
    run_id: str | None = None


class _Env(msgspec.Struct):
    data: _Data = msgspec.field(default_factory=_Data)


_delta_decoder = msgspec.json.Decoder(_Delta)
_env_decoder = msgspec.json.Decoder(_Env)


@dataclass(slots=True, eq=False)
class RunObs:
    t0: float = 0.0
    accepted: float | None = None
    first_delta: float | None = None
    end: float | None = None
    status: str | None = None
    run_id: str = ""
    durable: int = 0
    marks: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)


def http_client(base_url: str, token: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(10.0),
        limits=limits,
        http2=False,
    )


OPEN: set[ThreadClient] = set()  # closed in run.py main's `finally`, also after an interrupt


class ThreadClient:
    """One simulated UI on one thread: its own HTTP/1.1 pool of two keep-alive connections (the SSE stream
    and the POSTs). A pool shared by all threads costs the client O(connections) per request in httpcore
    (idle/expiry checks poll every pooled socket), which made the client the bottleneck at 50 threads."""

    def __init__(self, base_url: str, token: str, thread_id: str, errors: collections.Counter) -> None:
        self.http = http_client(base_url, token, 2)
        self.id = thread_id
        self.errors = errors
        self.runs: dict[str, RunObs] = {}
        self.inflight: RunObs | None = None
        self.last_seq = 0
        self.durable = 0
        self.unattributed = 0
        self.connected = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    def obs(self, run_id: str) -> RunObs:
        o = self.runs.get(run_id)
        if o is None:
            o = self.runs[run_id] = RunObs()
        return o

    def start(self) -> None:
        OPEN.add(self)
        self._task = asyncio.get_running_loop().create_task(self._sse())

    async def close(self) -> None:
        OPEN.discard(self)
        self._closing = True
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.http.aclose()

    async def _sse(self) -> None:
        while not self._closing:
            headers = {"Accept": "text/event-stream"}
            if self.last_seq:
                headers["Last-Event-ID"] = str(self.last_seq)
            try:
                async with self.http.stream(
                    "GET", f"/v1/threads/{self.id}/events", headers=headers, timeout=httpx.Timeout(10.0, read=60.0)
                ) as resp:
                    if resp.status_code != 200:
                        self.errors[f"sse_http_{resp.status_code}"] += 1
                        await asyncio.sleep(0.5)  # backoff before reconnecting
                        continue
                    buf = b""
                    async for chunk in resp.aiter_raw():
                        now = time.perf_counter()
                        buf += chunk
                        if b"\n\n" not in buf:
                            continue
                        *blocks, buf = buf.split(b"\n\n")
                        for block in blocks:
                            self._event(block, now)
                    if not self._closing:
                        self.errors["sse_closed"] += 1
            except asyncio.CancelledError:
                raise
            except httpx.HTTPError as exc:
                if self._closing:
                    return
                self.errors[f"sse_{type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)  # backoff before reconnecting

    def _event(self, block: bytes, now: float) -> None:
        seq = 0
        etype = b""
        data = b""
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                data = line[6:]
            elif line.startswith(b"event: "):
                etype = line[7:]
            elif line.startswith(b"id: "):
                seq = int(line[4:])
            elif line.startswith(b": connected"):
                self.connected.set()
        if etype == b"live.delta":
            delta = self.obs(_delta_decoder.decode(data).run_id)
            if delta.first_delta is None:
                delta.first_delta = now
            return
        if not seq:
            return
        if seq <= self.last_seq:
            return  # a replay after a reconnect
        self.last_seq = seq
        self.durable += 1
        run_id = _env_decoder.decode(data).data.run_id
        o = self.obs(run_id) if run_id else self.inflight
        if o is None:
            self.unattributed += 1
            return
        o.durable += 1
        o.marks.setdefault(etype.decode(), now)
        if etype in TERMINAL and run_id:
            o.end = now
            o.status = etype.decode()
            o.done.set()

    async def run_once(self, text: str, script: dict | None = None) -> RunObs | None:
        t0 = time.perf_counter()
        body: dict = {"text": text, "mode": "queue_after_active"}
        if script is not None:
            body["script"] = script
        try:
            r = await self.http.post(f"/v1/threads/{self.id}/messages", json=body)
        except httpx.TimeoutException:
            self.errors["post_timeout"] += 1
            return None
        except httpx.HTTPError as exc:
            self.errors[f"post_{type(exc).__name__}"] += 1
            return None
        accepted = time.perf_counter()
        if r.status_code != 202:
            self.errors[f"post_http_{r.status_code}"] += 1
            await asyncio.sleep(0.05)  # do not spin on a failing endpoint
            return None
        body = r.json()
        run_id = body["run_id"]
        o = self.obs(run_id)
        o.t0, o.accepted, o.run_id = t0, accepted, run_id
        if body.get("disposition") != "started":
            self.errors[f"disposition_{body.get('disposition')}"] += 1
        self.inflight = o
        try:
            await asyncio.wait_for(o.done.wait(), RUN_TIMEOUT)
        except TimeoutError:
            self.errors["run_timeout"] += 1
            return None
        finally:
            self.inflight = None
            self.runs.pop(run_id, None)
        if o.status != "run.completed":
            self.errors[o.status or "run_unknown"] += 1
        return o


async def create_threads(
    http: httpx.AsyncClient, n: int, errors: collections.Counter, workspaces: list[str] | None = None
) -> list[str]:
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        body = {"title": f"bench {i}"} | ({"workspace": workspaces[i]} if workspaces else {})
        async with sem:
            for _ in range(5):
                r = await http.post("/v1/threads", json=body)
                if r.status_code == 201:
                    return r.json()["thread_id"]
                errors[f"create_http_{r.status_code}"] += 1
                await asyncio.sleep(0.1)  # retry backoff
            raise RuntimeError(f"could not create a thread: {r.status_code} {r.text}")

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def open_threads(http: httpx.AsyncClient, ids: list[str], errors: collections.Counter) -> list[ThreadClient]:
    token = http.headers["Authorization"].split(" ", 1)[1]
    clients = [ThreadClient(str(http.base_url), token, t, errors) for t in ids]
    for c in clients:
        c.start()
    await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in clients)), 120)  # a loaded machine
    # the ordered consumer is live once the thread's first event came through
    deadline = time.monotonic() + 120
    while any(c.last_seq == 0 for c in clients):
        if time.monotonic() > deadline:
            raise RuntimeError("SSE streams did not deliver thread.created")
        await asyncio.sleep(0.02)  # waiting for SSE replay of thread.created
    return clients
