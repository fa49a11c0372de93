"""An async client for the HTTP API v1: JSON calls, the thread's Server-Sent Events, and waiting on runs.

Every failure the API reports comes back as :class:`ApiError` carrying the API's own error shape
``{"error": {code, message, details}}``; a gateway that cannot be reached is an ``ApiError`` too (status 0),
so callers handle one exception type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from ..domain.entities import TERMINAL_RUN_STATUSES

TERMINAL = TERMINAL_RUN_STATUSES
MAX_REMEMBERED = 10_000  # threads and runs whose last seen sequence a client keeps

# What a run's status becomes with each event about it: lets wait_run watch the stream instead of polling.
_STATUS_AFTER = {
    "run.dispatched": "starting",
    "attempt.started": "starting",
    "run.started": "running",
    "request.opened": "waiting",
    "request.resolved": "running",
    "run.completed": "completed",
    "run.failed": "failed",
    "run.interrupted": "interrupted",
    "run.cancelled": "cancelled",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict | None = None) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.status, self.code, self.message, self.details = status, code, message, details or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        try:
            error = response.json()["error"]
            return cls(response.status_code, error.get("code", ""), error.get("message", ""), error.get("details"))
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not our shape (a proxy, a crash page): keep the start of the body for the message.
            text = response.text.strip()[:200] or response.reason_phrase
            return cls(response.status_code, f"http_{response.status_code}", text)


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event. ``id`` is the stream sequence of a durable event, None for live deltas."""

    id: int | None
    event: str
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data)


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """The subset of the SSE wire format the gateway speaks: id, event and (multi-line) data fields."""
    id_: int | None = None
    event = ""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield SseEvent(id_, event or "message", "\n".join(data).encode())
            # Only durable events carry an id, so it must not leak into the live delta that follows.
            id_, event, data = None, "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            id_ = int(value) if value.isdigit() else None


class TreadleClient:
    def __init__(self, base_url: str, token: str, timeout: float = 10, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport,
                                       headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        # Reads never go back in time for this client: each thread's read asks for (``min_seq``) the highest
        # sequence the client wrote or saw on it, and a run's read for its thread's.
        self._seen: dict[str, int] = {}
        self._run_thread: dict[str, str] = {}

    def saw(self, thread_id: str, seq: int | None) -> None:
        """Record that this client has seen ``thread_id`` at ``seq`` (a write's answer, an event's id)."""
        if seq is None:
            return
        if len(self._seen) >= MAX_REMEMBERED and thread_id not in self._seen:
            self._seen.clear()  # bounded memory: forgetting only lets a read be as fresh as the projection
        self._seen[thread_id] = max(seq, self._seen.get(thread_id, 0))

    def _learn(self, answer: Any) -> Any:
        """Remember the thread and sequence a write answered with, and the thread of any run it names."""
        if isinstance(answer, dict) and isinstance(answer.get("thread_id"), str):
            thread = answer.get("parent_thread_id") or answer["thread_id"]  # a fork's seq is its parent's
            if isinstance(answer.get("seq"), int):
                self.saw(thread, answer["seq"])
            run_id = answer.get("run_id") or (answer["id"] if str(answer.get("id", "")).startswith("run_") else None)
            if isinstance(run_id, str):
                if len(self._run_thread) >= MAX_REMEMBERED:
                    self._run_thread.clear()
                self._run_thread[run_id] = answer["thread_id"]
        return answer

    def _min_seq(self, thread_id: str | None) -> dict:
        seq = self._seen.get(thread_id or "")
        return {"min_seq": seq} if seq else {}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> TreadleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, *, body: dict | None = None,
                    idempotency_key: str | None = None, params: dict | None = None) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        try:
            response = await self._http.request(method, path, json=body, headers=headers, params=params)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return self._learn(response.json()) if method != "GET" else response.json()

    def _unreachable(self, exc: Exception) -> ApiError:
        return ApiError(0, "unreachable", f"cannot reach {self.base_url}: {exc or exc.__class__.__name__}")

    # --- threads, messages, runs ------------------------------------------------------------------

    async def create_thread(self, title: str | None = None, provider: str | None = None, model: str | None = None,
                            runtime_mode: str | None = None, workspace: str | None = None,
                            idempotency_key: str | None = None) -> dict:
        body = _present(title=title, provider=provider, model=model, runtime_mode=runtime_mode, workspace=workspace)
        return await self._call("POST", "/v1/threads", body=body, idempotency_key=idempotency_key)

    async def list_threads(self, limit: int = 50, offset: int = 0) -> list[dict]:
        return (await self._call("GET", "/v1/threads", params={"limit": limit, "offset": offset}))["threads"]

    async def get_thread(self, thread_id: str) -> dict:
        return await self._call("GET", f"/v1/threads/{thread_id}", params=self._min_seq(thread_id))

    async def send(self, thread_id: str, text: str, mode: str = "auto", provider: str | None = None,
                   script: dict | None = None, idempotency_key: str | None = None,
                   target_run_id: str | None = None, model: str | None = None) -> dict:
        body = {"text": text, "mode": mode, **_present(provider=provider, script=script, target_run_id=target_run_id,
                                                       model=model)}
        return await self._call("POST", f"/v1/threads/{thread_id}/messages", body=body,
                                idempotency_key=idempotency_key)

    async def get_run(self, run_id: str) -> dict:
        run = await self._call("GET", f"/v1/runs/{run_id}", params=self._min_seq(self._run_thread.get(run_id)))
        return self._learn(run)

    # --- lineage (L5-L7): fork, handoffs, the tree; merge-back and clean context are ``send_with_context`` --

    async def fork(self, thread_id: str, source_type: str, source_id: str, *, turn: str | None = None,
                   title: str | None = None, on_active: str | None = None,
                   idempotency_key: str | None = None) -> dict:
        body = {"source": {"type": source_type, "id": source_id, **_present(turn=turn)},
                **_present(title=title, on_active=on_active)}
        return await self._call("POST", f"/v1/threads/{thread_id}/fork", body=body, idempotency_key=idempotency_key)

    async def send_with_context(self, thread_id: str, text: str, *, merge_back_from: str | None = None,
                                clean_context: bool = False, provider: str | None = None,
                                idempotency_key: str | None = None) -> dict:
        body = {"text": text, **_present(merge_back_from=merge_back_from, provider=provider,
                                         clean_context=clean_context or None)}
        return await self._call("POST", f"/v1/threads/{thread_id}/messages", body=body,
                                idempotency_key=idempotency_key)

    async def get_handoff(self, handoff_id: str) -> dict:
        return await self._call("GET", f"/v1/handoffs/{handoff_id}")

    async def lineage(self, thread_id: str) -> dict:
        return await self._call("GET", f"/v1/threads/{thread_id}/lineage", params=self._min_seq(thread_id))

    # --- events -----------------------------------------------------------------------------------

    async def events(self, thread_id: str, last_event_id: int | None = None, *,
                     connected: asyncio.Event | None = None) -> AsyncIterator[SseEvent]:
        """The thread's events after ``last_event_id`` (from the start when None), then live until closed.

        ``connected`` is set when the gateway's first line arrives: it sends one only once it is subscribed,
        so anything published after that (a reply to a message sent then) is in this stream.
        """
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        # The stream is quiet between events (keepalives every 15 s): no read timeout.
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        try:
            async with self._http.stream("GET", f"/v1/threads/{thread_id}/events", headers=headers,
                                         timeout=timeout) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ApiError.from_response(response)
                async for event in parse_sse(_signal_first(response.aiter_lines(), connected)):
                    self.saw(thread_id, event.id)
                    yield event
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    async def wait_run(self, run_id: str, timeout: float, statuses: Iterable[str] = TERMINAL) -> dict:
        """The run once its status is one of ``statuses``, found by following the thread's event stream.

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        wanted = frozenset(statuses)
        async with asyncio.timeout(timeout):
            run = await self._fresh_run(run_id)
            if run["status"] in wanted:
                return run
            # The thread document is one consistent snapshot at its ``seq``: if the run has not reached a
            # wanted status there, the event that takes it there has a later sequence, so following from
            # ``seq`` cannot miss it.
            doc = await self.get_thread(run["thread_id"])
            status = next((r["status"] for r in doc["runs"] if r["id"] == run_id), None)
            if status not in wanted:
                async with contextlib.aclosing(aiter(follow(self, run["thread_id"], doc["seq"]))) as events:
                    async for event in events:
                        after = _STATUS_AFTER.get(event.event)
                        if after in wanted and event.json().get("data", {}).get("run_id") == run_id:
                            break
            # The event is in the log; the read asks for the sequence this client saw (min_seq), so it
            # reflects that event whether or not the projector has written it yet.
            return await self.get_run(run_id)

    async def _fresh_run(self, run_id: str, grace: float = 5.0) -> dict:
        """The run, allowing for a run accepted a moment ago that the read model does not show yet."""
        deadline = asyncio.get_running_loop().time() + grace
        delay = 0.01
        while True:
            try:
                return await self.get_run(run_id)
            except ApiError as exc:
                if exc.status != 404 or asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    # --- checkpoints: diffs and rollbacks (L10) ----------------------------------------------------

    async def run_diff(self, run_id: str, max_bytes: int | None = None) -> dict:
        """What a run changed: unified diff (``truncated`` when cut at ``max_bytes``) and per-file stats."""
        params = {**_present(max_bytes=max_bytes), **self._min_seq(self._run_thread.get(run_id))}
        return await self._call("GET", f"/v1/runs/{run_id}/diff", params=params)

    async def thread_diff(self, thread_id: str, from_ordinal: int | None = None, to_ordinal: int | None = None,
                          max_bytes: int | None = None) -> dict:
        params = {**_present(max_bytes=max_bytes, **{"from": from_ordinal, "to": to_ordinal}), **self._min_seq(thread_id)}
        return await self._call("GET", f"/v1/threads/{thread_id}/diff", params=params)

    async def rollback(self, thread_id: str, to_run_ordinal: int, interrupt_active: bool = False,
                       idempotency_key: str | None = None) -> dict:
        """L10.5: restore run ``to_run_ordinal``'s files; later runs become ``rolled_back``."""
        body = {"to_run_ordinal": to_run_ordinal, "interrupt_active": interrupt_active}
        return await self._call("POST", f"/v1/threads/{thread_id}/rollback", body=body,
                                idempotency_key=idempotency_key)

    async def rollback_node(self, node_id: str, checkpoint_id: str, thread_id: str | None = None,
                            idempotency_key: str | None = None) -> dict:
        """L10.6: restore a child node's checkpoint; the answer says whether the parent's workspace is touched."""
        body = {"checkpoint_id": checkpoint_id, **_present(thread_id=thread_id)}
        return await self._call("POST", f"/v1/nodes/{node_id}/rollback", body=body, idempotency_key=idempotency_key)


class Follow:
    """Durable events of a thread from ``from_seq`` on, reconnecting with ``Last-Event-ID`` when the stream
    drops. ``last_id`` is the sequence of the last event yielded: persist it to resume later."""

    def __init__(self, client: TreadleClient, thread_id: str, from_seq: int = 0, *, live: bool = False,
                 reconnect: bool = True, on_retry: Callable[[ApiError | None], None] | None = None) -> None:
        self.client, self.thread_id, self.last_id = client, thread_id, from_seq
        self.live, self.reconnect, self.on_retry = live, reconnect, on_retry

    def __aiter__(self) -> AsyncIterator[SseEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[SseEvent]:
        delay = 0.1
        while True:
            failure: ApiError | None = None
            try:
                async with contextlib.aclosing(self.client.events(self.thread_id, self.last_id)) as events:
                    async for event in events:
                        delay = 0.1
                        if event.id is None:
                            if self.live:
                                yield event
                            continue
                        if event.id <= self.last_id:  # replayed after a reconnect
                            continue
                        self.last_id = event.id
                        yield event
            except ApiError as exc:
                if not self.reconnect or exc.status not in (0, 502, 503, 504):
                    raise
                failure = exc
            if not self.reconnect:
                return
            if self.on_retry is not None:
                self.on_retry(failure)  # None: the gateway ended the stream (shutdown, a slow reader cut off)
            await asyncio.sleep(delay)  # a gateway restarting: back off, then resume after last_id
            delay = min(delay * 2, 2.0)


def follow(client: TreadleClient, thread_id: str, from_seq: int = 0, *, live: bool = False,
           on_retry: Callable[[ApiError | None], None] | None = None) -> Follow:
    return Follow(client, thread_id, from_seq, live=live, on_retry=on_retry)


async def _signal_first(lines: AsyncIterator[str], event: asyncio.Event | None) -> AsyncIterator[str]:
    async for line in lines:
        if event is not None and not event.is_set():
            event.set()
        yield line


def _present(**fields: Any) -> dict:
    return {k: v for k, v in fields.items() if v is not None}
