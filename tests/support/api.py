"""A tenant's user in the e2e tests: the public SDK's client (``Api.client``, a :class:`TreadleClient`) with the
shortcuts the tests repeat. Each shortcut asserts the status code the API answers with; raw calls go through the
SDK's ``request`` and are asked again while the gateway is being restarted (the chaos and restart tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from nats.aio.client import Client as NATS

from tests.support.helpers import wait_for
from treadle.cli.stack import Stack
from treadle.client import TERMINAL, SseEvent, TreadleClient, Unreachable
from treadle.ops.tokens import TokenStore

RESTART = 90  # how long a request is asked again: long enough for a graceful restart of the whole stack


class Api:
    def __init__(self, base_url: str, token: str, tenant: str) -> None:
        self.tenant, self.token = tenant, token
        self.client = TreadleClient(base_url, token, timeout=10)

    @property
    def headers(self) -> dict[str, str]:
        """What authenticates this user, for a test that speaks HTTP of its own (an SSE reader, a fuzzer)."""
        return {"Authorization": f"Bearer {self.token}"}

    async def close(self) -> None:
        await self.client.aclose()

    async def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One raw request through the SDK; while the gateway does not answer, it is asked again."""

        async def attempt() -> httpx.Response | None:
            try:
                return await self.client.request(method, path, **kw)
            except Unreachable:
                return None

        return await wait_for(attempt, timeout=RESTART, interval=0.05, what=f"{method} {path}")

    async def create_thread(self, **body: Any) -> str:
        r = await self.request("POST", "/v1/threads", json=body)
        assert r.status_code == 201, r.text
        return r.json()["thread_id"]

    async def send(self, thread: str, text: str, **body: Any) -> dict[str, Any]:
        r = await self.request("POST", f"/v1/threads/{thread}/messages", json={"text": text, **body})
        assert r.status_code == 202, r.text
        return r.json()

    async def post(self, path: str, body: dict[str, Any] | None = None, expect: int | None = None) -> dict[str, Any]:
        r = await self.request("POST", path, json=body or {})
        if expect is not None:
            assert r.status_code == expect, r.text
        return r.json()

    async def run(self, run_id: str) -> dict[str, Any]:
        return await self._reconnecting(lambda: self.client.get_run(run_id))

    async def thread(self, thread: str) -> dict[str, Any]:
        return await self._reconnecting(lambda: self.client.get_thread(thread))

    def events(self, thread: str, last_event_id: int | None = None) -> AsyncIterator[SseEvent]:
        """The thread's events (the SDK's stream): after ``last_event_id``, then live."""
        return self.client.events(thread, last_event_id)

    async def wait_run(self, run_id: str, status: str = "completed", timeout: float = 30) -> dict[str, Any]:
        """The run once it is ``status``; a run that ends otherwise fails the test at once (a rolled-back run is
        interrupted first, so waiting for ``rolled_back`` waits past the other ends)."""
        statuses = {status} if status == "rolled_back" else {status, *TERMINAL}
        try:
            run = await self.client.wait_run(run_id, timeout, statuses)
        except TimeoutError:
            raise TimeoutError(f"run {run_id} not {status} after {timeout}s") from None
        assert run["status"] == status, f"run {run_id} is {run['status']}, not {status}: {run}"
        return run

    async def wait_running(self, run_id: str, timeout: float = 30) -> dict[str, Any]:
        """The run once it is running or waiting for an answer."""
        try:
            return await self.client.wait_run(run_id, timeout, ("running", "waiting"))
        except TimeoutError:
            raise TimeoutError(f"run {run_id} not running after {timeout}s") from None

    async def wait_thread(
        self, thread: str, predicate: Callable[[dict[str, Any]], Any], what: str, timeout: float = 30
    ) -> Any:
        """``predicate(the thread's document)`` once it is truthy."""
        try:
            return await self.client.wait_thread(thread, predicate, timeout)
        except TimeoutError:
            raise TimeoutError(f"{what}: still false after {timeout}s") from None

    async def wait_request(self, thread: str, status: str = "pending", timeout: float = 30) -> dict[str, Any]:
        """The thread's first runtime request in ``status``, as its document shows it."""

        def found(doc: dict[str, Any]) -> dict[str, Any] | None:
            return next((r for r in doc["requests"] if r["status"] == status), None)

        return await self.wait_thread(thread, found, f"a {status} request on {thread}", timeout)

    async def _reconnecting(self, call: Callable[[], Any]) -> Any:
        async def attempt() -> Any:
            try:
                return await call()
            except Unreachable:
                return None

        return await wait_for(attempt, timeout=RESTART, interval=0.05, what="the gateway answering")


async def make_api(stack: Stack, stack_nc: NATS, tenant: str) -> Api:
    """An Api acting as ``tenant``'s user alice, with a fresh token."""
    token = await TokenStore(stack_nc.jetstream()).create(tenant, "alice")
    return Api(stack.api_url, token, tenant)
