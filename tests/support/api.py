"""A thin HTTP driver for e2e tests: retries through gateway restarts, parses SSE."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from tests.support.helpers import wait_for
from treadle.runtime.tokens import TokenStore


@dataclass
class Sse:
    id: int | None
    event: str
    data: dict


class Api:
    def __init__(self, base_url: str, token: str, tenant: str) -> None:
        self.tenant = tenant
        self.http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    async def close(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, **kw) -> httpx.Response:
        """One request; connection errors (a gateway being restarted) are retried until it answers."""
        async def attempt():
            try:
                return await self.http.request(method, path, **kw)
            except httpx.TransportError:
                return None
            except AttributeError as exc:
                # anyio under uvloop: a connection the gateway drops while httpcore opens it has no socket any
                # more when its attributes are read (seen while the chaos killer restarts the gateway)
                if "getpeername" not in str(exc):
                    raise
                return None
        # long enough for a graceful restart of the whole stack (the chaos test makes one)
        return await wait_for(attempt, timeout=90, interval=0.05, what=f"{method} {path}")

    async def create_thread(self, **body) -> str:
        r = await self.request("POST", "/v1/threads", json=body)
        assert r.status_code == 201, r.text
        return r.json()["thread_id"]

    async def send(self, thread: str, text: str, **body) -> dict:
        r = await self.request("POST", f"/v1/threads/{thread}/messages", json={"text": text, **body})
        assert r.status_code == 202, r.text
        return r.json()

    async def run(self, run_id: str) -> dict:
        r = await self.request("GET", f"/v1/runs/{run_id}")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_run(self, run_id: str, status: str = "completed", timeout: float = 30) -> dict:
        async def done():
            r = await self.request("GET", f"/v1/runs/{run_id}")
            return r.json() if r.status_code == 200 and r.json()["status"] == status else None
        return await wait_for(done, timeout=timeout, interval=0.05, what=f"run {run_id} {status}")

    async def events(self, thread: str, last_event_id: int | None = None) -> AsyncIterator[Sse]:
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        async with self.http.stream("GET", f"/v1/threads/{thread}/events", headers=headers, timeout=None) as r:
            assert r.status_code == 200, await r.aread()
            fields: dict[str, str] = {}
            async for line in r.aiter_lines():
                if line == "":
                    if "data" in fields:
                        yield Sse(int(fields["id"]) if "id" in fields else None, fields.get("event", "message"),
                                  json.loads(fields["data"]))
                    fields = {}
                elif not line.startswith(":"):
                    key, _, value = line.partition(":")
                    fields[key] = value[1:] if value.startswith(" ") else value

    async def thread(self, thread: str) -> dict:
        r = await self.request("GET", f"/v1/threads/{thread}")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_thread(self, thread: str, predicate, what: str, timeout: float = 30):
        """Poll the thread's projection until ``predicate(doc)`` returns something truthy; return that."""
        async def check():
            return predicate(await self.thread(thread))
        return await wait_for(check, timeout=timeout, interval=0.05, what=what)

    async def wait_request(self, thread: str, status: str = "pending", timeout: float = 30) -> dict:
        def pending(doc):
            return next((r for r in doc["requests"] if r["status"] == status), None)
        return await self.wait_thread(thread, pending, f"a {status} request on {thread}", timeout)

    async def wait_running(self, run_id: str, timeout: float = 30) -> dict:
        async def running():
            run = (await self.request("GET", f"/v1/runs/{run_id}")).json()
            return run if run.get("status") in ("running", "waiting") else None
        return await wait_for(running, timeout=timeout, interval=0.05, what=f"run {run_id} running")

    async def post(self, path: str, body: dict | None = None, expect: int | None = None) -> dict:
        r = await self.request("POST", path, json=body or {})
        if expect is not None:
            assert r.status_code == expect, r.text
        return r.json()


async def make_api(stack, stack_nc, tenant: str) -> Api:
    """An Api acting as ``tenant``'s user alice, with a fresh token."""
    token = await TokenStore(stack_nc.jetstream()).create(tenant, "alice")
    return Api(stack.api_url, token, tenant)
