"""The first async client of the HTTP API v1, answering plain dicts (the tests and older callers use it; new
code uses the typed :class:`treadle.client.AsyncTreadle` or :class:`treadle.client.Treadle`): JSON calls, the
thread's Server-Sent Events, and waiting for a run, a runtime request or any state of a thread.

Every failure the API reports comes back as an :class:`~treadle.client.errors.ApiError` (one subclass per kind,
carrying the status and the API's own ``{"error": {code, message, details}}``); a gateway that cannot be reached
is one too (:class:`~treadle.client.errors.Unreachable`, status 0), so callers handle one exception type.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import httpx

from .calls import ENDING_EVENTS, MAX_REMEMBERED, RUN_EVENTS, TERMINAL, Seen, wakes
from .errors import ApiError, RateLimited, Unreachable
from .events import Follow, follow, parse_sse, signal_first
from .sse import SseEvent

__all__ = ["TERMINAL", "ApiError", "Follow", "SseEvent", "TreadleClient", "follow", "parse_sse"]

T = TypeVar("T")
POLL = 0.5  # how often a wait reads again when no event has woken it (a state no event of the thread moves)


class TreadleClient:
    def __init__(
        self, base_url: str, token: str, timeout: float = 10, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        # Reads never go back in time for this client: each thread's read asks for (``min_seq``) the highest
        # sequence the client wrote or saw on it, and a run's read for its thread's (the typed clients' Seen).
        self.seen = Seen()
        # Runs this client sent: the sequence each was accepted at, when it was not ended (``wait_run``)
        self._accepted: dict[str, int] = {}

    def saw(self, thread_id: str, seq: int | None) -> None:
        """Record that this client has seen ``thread_id`` at ``seq`` (a write's answer, an event's id)."""
        self.seen.saw(thread_id, seq)

    def _learn(self, answer: T) -> T:
        """Remember the thread and sequence a write answered with, and the thread of any run it names."""
        if isinstance(answer, dict) and isinstance(answer.get("thread_id"), str):
            thread = answer.get("parent_thread_id") or answer["thread_id"]  # a fork's seq is its parent's
            if isinstance(answer.get("seq"), int):
                self.saw(thread, answer["seq"])
            run_id = answer.get("run_id") or (answer["id"] if str(answer.get("id", "")).startswith("run_") else None)
            if isinstance(run_id, str):
                self.seen.run_of(run_id, answer["thread_id"])
        return answer

    def _min_seq(self, thread_id: str | None) -> dict[str, Any]:
        seq = self.seen.seq(thread_id)
        return {"min_seq": seq} if seq else {}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> TreadleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
        content: bytes | None = None,
        timeout: float | httpx.Timeout | None = None,
    ) -> httpx.Response:
        """One raw request, whatever its status: for endpoints without a method here and for callers that look at
        the status themselves. An answered write's thread and sequence are remembered like the methods' are.
        Raises :class:`Unreachable` when the gateway does not answer."""
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = await self._http.request(
                method, path, json=json, params=params, headers=headers, content=content, **extra
            )
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        except AttributeError as exc:
            # anyio under uvloop: a connection the gateway drops while it is being opened has no socket left
            # when its peer is asked for (a gateway restarting): that is a connection failure too.
            if "getpeername" not in str(exc):
                raise
            raise self._unreachable(exc) from None
        if method != "GET" and response.is_success:
            with contextlib.suppress(ValueError):
                self._learn(response.json())
        return response

    def stream(self, method: str, path: str, **kw: Any) -> contextlib.AbstractAsyncContextManager[httpx.Response]:
        """A raw streamed request (``async with client.stream(…) as response``), whatever its status: for a
        caller reading an SSE stream's lines or status itself. ``kw`` are httpx's (``headers``, ``timeout``)."""
        return self._http.stream(method, path, **kw)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Every endpoint answers a JSON object (a resource, a page, a receipt)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        response = await self.request(method, path, json=body, headers=headers, params=params)
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        answer: dict[str, Any] = response.json()
        return answer

    def _unreachable(self, exc: Exception) -> Unreachable:
        return Unreachable(0, "unreachable", f"cannot reach {self.base_url}: {exc or exc.__class__.__name__}")

    # --- threads, messages, runs ------------------------------------------------------------------

    async def create_thread(
        self,
        title: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        runtime_mode: str | None = None,
        workspace: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body = _present(title=title, provider=provider, model=model, runtime_mode=runtime_mode, workspace=workspace)
        return await self._call("POST", "/v1/threads", body=body, idempotency_key=idempotency_key)

    async def page(
        self, path: str, *, limit: int | None = None, cursor: str | None = None, **params: Any
    ) -> dict[str, Any]:
        """One page of a list (``{"items", "next_cursor", "seq"}``); a thread's list asks for what this client
        has seen of the thread (``min_seq``). Pass the page's ``next_cursor`` back as ``cursor`` for the next."""
        thread_id = path.split("/")[3] if path.startswith("/v1/threads/") else None
        query = {**_present(limit=limit, cursor=cursor, **params), **self._min_seq(thread_id)}
        page = await self._call("GET", path, params=query)
        if thread_id is not None:
            self.saw(thread_id, page.get("seq"))
        return page

    async def every(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a list, page after page (for short lists: a thread's requests, checkpoints)."""
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self.page(path, limit=200, cursor=cursor, **params)
            items += page["items"]
            if (cursor := page["next_cursor"]) is None:
                return items

    async def list_threads(self, limit: int = 50, cursor: str | None = None, q: str | None = None) -> dict[str, Any]:
        """A page of the tenant's threads, newest first (``q``: only those whose title contains it, any case)."""
        return await self.page("/v1/threads", limit=limit, cursor=cursor, q=q)

    async def get_thread(self, thread_id: str, runs: int | None = None) -> dict[str, Any]:
        params = {**_present(runs=runs), **self._min_seq(thread_id)}
        return await self._call("GET", f"/v1/threads/{thread_id}", params=params)

    async def send(
        self,
        thread_id: str,
        text: str,
        mode: str = "auto",
        provider: str | None = None,
        script: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        target_run_id: str | None = None,
        model: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "text": text,
            "mode": mode,
            **_present(provider=provider, script=script, target_run_id=target_run_id, model=model),
        }
        accepted = await self._call(
            "POST", f"/v1/threads/{thread_id}/messages", body=body, idempotency_key=idempotency_key
        )
        if isinstance(accepted.get("run_id"), str) and isinstance(accepted.get("seq"), int):
            if len(self._accepted) >= MAX_REMEMBERED:
                self._accepted.clear()  # bounded memory: a forgotten run is waited for the longer way
            self._accepted[accepted["run_id"]] = accepted["seq"]
        return accepted

    async def get_run(self, run_id: str) -> dict[str, Any]:
        run = await self._call("GET", f"/v1/runs/{run_id}", params=self._min_seq(self.seen.thread_of(run_id)))
        return self._learn(run)

    # --- lineage (L5-L7): fork, handoffs, the tree; merge-back and clean context are ``send_with_context`` --

    async def fork(
        self,
        thread_id: str,
        source_type: str,
        source_id: str,
        *,
        turn: str | None = None,
        title: str | None = None,
        on_active: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "source": {"type": source_type, "id": source_id, **_present(turn=turn)},
            **_present(title=title, on_active=on_active),
        }
        return await self._call("POST", f"/v1/threads/{thread_id}/fork", body=body, idempotency_key=idempotency_key)

    async def send_with_context(
        self,
        thread_id: str,
        text: str,
        *,
        merge_back_from: str | None = None,
        clean_context: bool = False,
        provider: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "text": text,
            **_present(merge_back_from=merge_back_from, provider=provider, clean_context=clean_context or None),
        }
        return await self._call("POST", f"/v1/threads/{thread_id}/messages", body=body, idempotency_key=idempotency_key)

    async def get_handoff(self, handoff_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/handoffs/{handoff_id}")

    async def lineage(self, thread_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/threads/{thread_id}/lineage", params=self._min_seq(thread_id))

    # --- events -----------------------------------------------------------------------------------

    async def events(
        self,
        thread_id: str,
        last_event_id: int | None = None,
        *,
        connected: asyncio.Event | None = None,
        live: bool = True,
    ) -> AsyncGenerator[SseEvent, None]:
        """The thread's events after ``last_event_id`` (from the start when None), then live until closed.

        ``connected`` is set when the gateway's first line arrives: it sends one only once it is subscribed,
        so anything published after that (a reply to a message sent then) is in this stream. ``live=False``: the
        durable events alone (the gateway sends no ``live.delta``).
        """
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        # The stream is quiet between events (keepalives every 15 s): no read timeout.
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        try:
            async with self._http.stream(
                "GET",
                f"/v1/threads/{thread_id}/events",
                headers=headers,
                timeout=timeout,
                params=None if live else {"live": "false"},
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ApiError.from_response(response)
                async for event in parse_sse(signal_first(response.aiter_lines(), connected)):
                    self.saw(thread_id, event.id)
                    yield event
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    # --- runtime requests (L11) ------------------------------------------------------------------

    async def list_requests(self, thread_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """The thread's runtime requests (``status="pending"``: those waiting for an answer)."""
        return await self.every(f"/v1/threads/{thread_id}/requests", **_present(status=status))

    async def respond(
        self, request_id: str, response: dict[str, Any], idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Answer a runtime request (an approval's ``{"decision": …}``, a question's answer)."""
        return await self._call(
            "POST", f"/v1/requests/{request_id}/respond", body=response, idempotency_key=idempotency_key
        )

    # --- waiting ----------------------------------------------------------------------------------
    # Each wait reads the state once, then follows the thread's events from the sequence it read at and reads
    # again when one arrives; the reads ask for what this client has seen (min_seq), so none goes back in time.
    # A gateway restarting meanwhile is waited out. All raise TimeoutError after ``timeout`` seconds.

    async def wait_run(self, run_id: str, timeout: float | None, statuses: Iterable[str] = TERMINAL) -> dict[str, Any]:
        """The run once its status is one of ``statuses`` (by default, once it has ended)."""
        wanted = frozenset(statuses)

        def reached(run: dict[str, Any]) -> dict[str, Any] | None:
            return run if run["status"] in wanted else None

        def run() -> Awaitable[dict[str, Any]]:
            # Read once the thread has shown the run: a 404 is only the run's index behind (a projector restarting)
            return self._retrying(lambda: self._fresh_run(run_id, grace=None))

        async with asyncio.timeout(timeout):
            thread_id = self.seen.thread_of(run_id)
            accepted = self._accepted.get(run_id)
            if thread_id is not None and accepted is not None and wanted <= TERMINAL:
                # A run this client sent had not ended at the sequence it was accepted at: its end is an event
                # after it, so the run is read first when that comes (no read of the run, nor of the thread's
                # sequence, before the stream, nor on its start: three requests fewer per wait, mid-turn).
                return await self._wait(
                    thread_id, reached, read=run, wake=lambda event: event.event in ENDING_EVENTS, poll=None,
                    after=accepted,
                )  # fmt: skip
            if thread_id is None:  # a run this client did not start: its own read names the thread
                found = await self._retrying(lambda: self._fresh_run(run_id))
                if found["status"] in wanted:
                    return found
                thread_id = found["thread_id"]
            # The run alone is read, first and after each event: never the whole thread, whose cost is its length.
            return await self._wait(
                thread_id, reached, read=run, wake=lambda event: wakes(RUN_EVENTS, event.event, event.data), poll=None
            )

    async def wait_thread(
        self,
        thread_id: str,
        predicate: Callable[[dict[str, Any]], Any],
        timeout: float | None,
        *,
        poll: float | None = POLL,
    ) -> Any:
        """``predicate(thread document)`` once it is truthy. The document is read again on each new event of
        the thread and, for states no event of the thread moves, every ``poll`` seconds."""
        async with asyncio.timeout(timeout):
            return await self._wait(thread_id, predicate, poll=poll)

    async def wait_request(
        self, thread_id: str, timeout: float | None, *, besides: Iterable[str] = ()
    ) -> dict[str, Any]:
        """The thread's first pending runtime request other than ``besides`` (ids), once there is one."""
        skip = frozenset(besides)

        def fresh(requests: list[dict[str, Any]]) -> dict[str, Any] | None:
            return next((r for r in requests if r["id"] not in skip), None)

        async with asyncio.timeout(timeout):
            return await self._wait(thread_id, fresh, read=lambda: self.list_requests(thread_id, "pending"))

    async def _wait(
        self,
        thread_id: str,
        predicate: Callable[[Any], T | None],
        *,
        read: Callable[[], Awaitable[Any]] | None = None,
        wake: Callable[[SseEvent], bool] | None = None,
        poll: float | None = POLL,
        after: int | None = None,
    ) -> T:
        """``predicate(read())`` (``read`` defaults to the thread's document) once truthy; read again when an
        event ``wake`` accepts arrives, and every ``poll`` seconds. ``after``: a sequence at which the caller knows
        the predicate is false: the events after it are followed, with no read before the first."""
        if after is not None:
            seq, first = after, None
        elif read is None:
            # The document is one consistent snapshot at its ``seq``: whatever changes the state later has a later
            # sequence, so following from ``seq`` misses nothing.
            doc = await self._retrying(lambda: self.get_thread(thread_id))
            seq, first = doc["seq"], doc
        else:
            # The sequence from a one-item page (the whole document costs the thread's length): what ``read`` finds
            # next reflects at least that much, so following from it misses nothing as well.
            seq = (await self._retrying(lambda: self._first_run_page(thread_id)))["seq"]
            first = await self._retrying(read)
        if first is not None and (found := predicate(first)):
            return found
        changed = asyncio.Event()

        async def watch() -> None:
            try:
                async with contextlib.aclosing(aiter(follow(self, thread_id, seq))) as events:
                    async for event in events:
                        if wake is None or wake(event):
                            changed.set()  # the client saw its sequence: the next read reflects it
            finally:
                changed.set()  # ended: the loop below looks at why

        watcher = asyncio.create_task(watch())
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await changed.wait()
                if watcher.done() and (failure := watcher.exception()) is not None:
                    if not isinstance(failure, RateLimited):
                        raise failure  # the stream failed for good (the thread is gone, the token revoked)
                    poll = poll or POLL  # no stream left in the tenant's quota: read on a timer instead
                changed.clear()
                again = read or (lambda: self.get_thread(thread_id))
                if found := predicate(await self._retrying(again)):
                    return found
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)  # its failure, if any, is reported above

    async def _first_run_page(self, thread_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/threads/{thread_id}/runs", params={"limit": 1, **self._min_seq(thread_id)})

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, asked again while the gateway is unreachable or unavailable (restarting, overloaded)."""
        delay = 0.05
        while True:
            try:
                return await call()
            except ApiError as exc:
                if not exc.retryable:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _fresh_run(self, run_id: str, grace: float | None = 5.0) -> dict[str, Any]:
        """The run, allowing for a run accepted a moment ago that the read model does not show yet (for up to
        ``grace`` seconds; None: for as long as the caller waits)."""
        deadline = asyncio.get_running_loop().time() + (grace if grace is not None else float("inf"))
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

    async def run_diff(self, run_id: str, max_bytes: int | None = None) -> dict[str, Any]:
        """What a run changed: unified diff (``truncated`` when cut at ``max_bytes``) and per-file stats."""
        params = {**_present(max_bytes=max_bytes), **self._min_seq(self.seen.thread_of(run_id))}
        return await self._call("GET", f"/v1/runs/{run_id}/diff", params=params)

    async def thread_diff(
        self,
        thread_id: str,
        from_ordinal: int | None = None,
        to_ordinal: int | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        params = {
            **_present(max_bytes=max_bytes, **{"from": from_ordinal, "to": to_ordinal}),
            **self._min_seq(thread_id),
        }
        return await self._call("GET", f"/v1/threads/{thread_id}/diff", params=params)

    async def rollback(
        self, thread_id: str, to_run_ordinal: int, interrupt_active: bool = False, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """L10.5: restore run ``to_run_ordinal``'s files; later runs become ``rolled_back``."""
        body = {"to_run_ordinal": to_run_ordinal, "interrupt_active": interrupt_active}
        return await self._call("POST", f"/v1/threads/{thread_id}/rollback", body=body, idempotency_key=idempotency_key)

    async def rollback_node(
        self, node_id: str, checkpoint_id: str, thread_id: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """L10.6: restore a child node's checkpoint; the answer says whether the parent's workspace is touched."""
        body = {"checkpoint_id": checkpoint_id, **_present(thread_id=thread_id)}
        return await self._call("POST", f"/v1/nodes/{node_id}/rollback", body=body, idempotency_key=idempotency_key)


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}
