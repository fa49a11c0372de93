"""The async client of the HTTP API v1: one method per operation (named after its operation id), answers decoded
into the views of :mod:`treadle.views`, lists as pages to iterate, the thread's events as a stream that resumes
by itself, and waits for a run or a runtime request. Requests are built by :mod:`treadle.client.calls`, shared
with the sync client :class:`treadle.client.Treadle`.

Failures are :class:`~treadle.client.errors.ApiError` subclasses (a gateway that cannot be reached is
:class:`~treadle.client.errors.Unreachable`). Writes carry an Idempotency-Key, and a call the gateway could not
serve right now (503, 429 rate_limited, no answer) is asked again within the client's :class:`RetryPolicy`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

import httpx

from treadle.api.lineage import SourceType
from treadle.api.requests import Decision

from . import calls, results
from .calls import RUN_EVENTS, TERMINAL, Call, RetryPolicy, Seen, decode, keyed, retryable, unreachable, wakes
from .errors import ApiError, NotFound, QuotaExceeded
from .schedules import AsyncScheduleMethods
from .settings import resolve
from .sse import Resume, SseEvent, SseParser, stream_headers

T = TypeVar("T")
POLL = 0.5  # how often a wait reads when the tenant has no event stream left to follow
ACCEPTED_GRACE = 5.0  # seconds a run this client started may be unknown to the read model


class AsyncPage(Generic[T]):
    """One page of a list (``items``, ``next_cursor``, ``seq``); ``async for item in page`` goes through its
    items and those of every following page, fetched as needed."""

    def __init__(self, client: AsyncTreadle, call: Call[results.Page[T]], page: results.Page[T]) -> None:
        self._client, self._call = client, call
        self.items, self.next_cursor, self.seq = page.items, page.next_cursor, page.seq

    async def next_page(self) -> AsyncPage[T] | None:
        if self.next_cursor is None:
            return None
        call = self._call.with_cursor(self.next_cursor)
        return AsyncPage(self._client, call, await self._client.call(call))

    async def __aiter__(self) -> AsyncIterator[T]:
        page: AsyncPage[T] | None = self
        while page is not None:
            for item in page.items:
                yield item
            page = await page.next_page()


class AsyncTreadle(AsyncScheduleMethods):
    """``async with AsyncTreadle(url, token) as client: ...``; ``AsyncTreadle()`` reads TREADLE_API_URL and
    TREADLE_TOKEN."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url, token = resolve(base_url, token)  # unnamed: TREADLE_API_URL, TREADLE_TOKEN
        self.retry = retry or RetryPolicy()
        self.seen = Seen()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTreadle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(self, call: Call[T]) -> T:
        """Send one operation's request (retried within the policy) and decode its answer."""
        call = keyed(call)
        loop = asyncio.get_running_loop()
        began, attempt = loop.time(), 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params={**call.params, **self.seen.min_seq(call)},
                    json=call.body,
                    headers=calls.headers(call),
                )
                result = decode(call, response)
            except httpx.TransportError as exc:
                error: ApiError = unreachable(self.base_url, exc)
            except ApiError as exc:
                error = exc
            else:
                self.seen.learn(call, result)
                return result
            wait = self.retry.delay(attempt, loop.time() - began, error)
            if wait is None:
                raise error
            await asyncio.sleep(wait)

    async def _page(self, call: Call[results.Page[T]]) -> AsyncPage[T]:
        return AsyncPage(self, call, await self.call(call))

    # --- threads, messages, runs ---------------------------------------------------------------------

    async def create_thread(self, **kw: Any) -> results.ThreadCreated:
        """``title``, ``provider``, ``model``, ``runtime_mode``, ``workspace``, ``idempotency_key``."""
        return await self.call(calls.create_thread(**kw))

    async def list_threads(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        q: str | None = None,
        archived: Literal["exclude", "include", "only"] | None = None,
    ) -> AsyncPage[results.ThreadSummary]:
        """``archived``: archived threads left out (the default), included, or alone."""
        return await self._page(calls.list_threads(limit=limit, cursor=cursor, q=q, archived=archived))

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        archived: bool | None = None,
        idempotency_key: str | None = None,
    ) -> results.ThreadUpdated:
        """Rename, archive or unarchive (L1.3); ``changed`` is False when the thread already was so."""
        return await self.call(
            calls.update_thread(thread_id, title=title, archived=archived, idempotency_key=idempotency_key)
        )

    async def archive_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadUpdated:
        return await self.update_thread(thread_id, archived=True, idempotency_key=idempotency_key)

    async def unarchive_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadUpdated:
        return await self.update_thread(thread_id, archived=False, idempotency_key=idempotency_key)

    async def delete_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadDeleted:
        """Delete the thread and erase its data (L1.4): refused (409 ``thread_busy``) while a run is active or
        queued; a repeat answers the same and finishes an erasure that stopped."""
        return await self.call(calls.delete_thread(thread_id, idempotency_key=idempotency_key))

    async def get_thread(self, thread_id: str, *, runs: int | None = None) -> results.ThreadView:
        """The thread's document; with ``runs``, only its last N runs (see ``calls.get_thread``)."""
        return await self.call(calls.get_thread(thread_id, runs=runs))

    async def send_message(self, thread_id: str, text: str, **kw: Any) -> results.MessageAccepted:
        """``mode``, ``provider``, ``model``, ``script``, ``target_run_id``, ``clean_context``,
        ``merge_back_from``, ``idempotency_key``."""
        return await self.call(calls.send_message(thread_id, text, **kw))

    async def get_run(self, run_id: str) -> results.RunView:
        return await self.call(calls.get_run(run_id))

    async def list_runs(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.Run]:
        return await self._page(calls.list_runs(thread_id, limit=limit, cursor=cursor))

    async def list_messages(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.Message]:
        return await self._page(calls.list_messages(thread_id, limit=limit, cursor=cursor))

    # --- life inside a run ---------------------------------------------------------------------------

    async def interrupt_run(
        self, run_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return await self.call(
            calls.interrupt_run(run_id, allow_destructive=allow_destructive, idempotency_key=idempotency_key)
        )

    async def interrupt_node(
        self, node_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return await self.call(
            calls.interrupt_node(node_id, allow_destructive=allow_destructive, idempotency_key=idempotency_key)
        )

    async def respond(
        self,
        request_id: str,
        *,
        decision: Decision | None = None,
        answers: dict[str, str] | None = None,
        message: str | None = None,
        idempotency_key: str | None = None,
    ) -> results.Acknowledged:
        """Answer an approval (``decision``) or a question (``answers``, ``message``)."""
        return await self.call(
            calls.respond(
                request_id, decision=decision, answers=answers, message=message, idempotency_key=idempotency_key
            )
        )

    async def list_requests(
        self, thread_id: str, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.RuntimeRequest]:
        return await self._page(calls.list_requests(thread_id, status=status, limit=limit, cursor=cursor))

    async def list_activity(
        self, thread_id: str, *, run_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.Activity]:
        return await self._page(calls.list_activity(thread_id, run_id=run_id, limit=limit, cursor=cursor))

    async def get_queue(self, thread_id: str) -> results.QueueView:
        return await self.call(calls.get_queue(thread_id))

    async def reorder_queue(
        self, thread_id: str, order: list[str], *, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return await self.call(calls.reorder_queue(thread_id, order, idempotency_key=idempotency_key))

    async def edit_queued(
        self,
        thread_id: str,
        run_id: str,
        text: str,
        *,
        script: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> results.Acknowledged:
        return await self.call(
            calls.edit_queued(thread_id, run_id, text, script=script, idempotency_key=idempotency_key)
        )

    async def cancel_queued(
        self, thread_id: str, run_id: str, *, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return await self.call(calls.cancel_queued(thread_id, run_id, idempotency_key=idempotency_key))

    async def implement_plan(
        self, plan_id: str, *, as_: Literal["run", "thread"] = "run", idempotency_key: str | None = None
    ) -> results.Implemented:
        return await self.call(calls.implement_plan(plan_id, as_=as_, idempotency_key=idempotency_key))

    # --- checkpoints ---------------------------------------------------------------------------------

    async def list_checkpoints(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.Checkpoint]:
        return await self._page(calls.list_checkpoints(thread_id, limit=limit, cursor=cursor))

    async def run_diff(self, run_id: str, *, max_bytes: int | None = None) -> results.Diff:
        return await self.call(calls.run_diff(run_id, max_bytes=max_bytes))

    async def thread_diff(
        self,
        thread_id: str,
        *,
        from_ordinal: int | None = None,
        to_ordinal: int | None = None,
        max_bytes: int | None = None,
    ) -> results.Diff:
        return await self.call(
            calls.thread_diff(thread_id, from_ordinal=from_ordinal, to_ordinal=to_ordinal, max_bytes=max_bytes)
        )

    async def rollback_thread(
        self,
        thread_id: str,
        to_run_ordinal: int,
        *,
        interrupt_active: bool = False,
        idempotency_key: str | None = None,
    ) -> results.RollbackView:
        return await self.call(
            calls.rollback_thread(
                thread_id, to_run_ordinal, interrupt_active=interrupt_active, idempotency_key=idempotency_key
            )
        )

    async def rollback_node(
        self,
        node_id: str,
        checkpoint_id: str,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> results.RollbackView:
        return await self.call(
            calls.rollback_node(node_id, checkpoint_id, thread_id=thread_id, idempotency_key=idempotency_key)
        )

    # --- lineage -------------------------------------------------------------------------------------

    async def fork_thread(
        self,
        thread_id: str,
        source_type: SourceType,
        source_id: str,
        **kw: Any,
    ) -> results.Forked:
        """``turn``, ``title``, ``on_active`` (latest_checkpoint, refuse), ``idempotency_key``."""
        return await self.call(calls.fork_thread(thread_id, source_type, source_id, **kw))

    async def list_handoffs(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncPage[results.ContextHandoff]:
        return await self._page(calls.list_handoffs(thread_id, limit=limit, cursor=cursor))

    async def get_handoff(self, handoff_id: str) -> results.HandoffView:
        return await self.call(calls.get_handoff(handoff_id))

    async def get_lineage(self, thread_id: str) -> results.LineageView:
        return await self.call(calls.get_lineage(thread_id))

    # --- policy (admins) -----------------------------------------------------------------------------

    async def get_policy(self) -> results.Policy:
        return await self.call(calls.get_policy())

    async def put_policy(
        self,
        *,
        allowed_modes: list[str] | None = None,
        max_threads: int | None = None,
        max_queued_runs: int | None = None,
        max_delegation_depth: int | None = None,
        max_children_per_run: int | None = None,
        max_running_children: int | None = None,
        cascade_interrupts: bool | None = None,
        max_disk_bytes: int | None = None,
        max_disk_files: int | None = None,
        max_schedules: int | None = None,
    ) -> results.Policy:
        return await self.call(
            calls.put_policy(
                allowed_modes=allowed_modes,
                max_threads=max_threads,
                max_queued_runs=max_queued_runs,
                max_delegation_depth=max_delegation_depth,
                max_children_per_run=max_children_per_run,
                max_running_children=max_running_children,
                cascade_interrupts=cascade_interrupts,
                max_disk_bytes=max_disk_bytes,
                max_disk_files=max_disk_files,
                max_schedules=max_schedules,
            )
        )

    # --- webhooks (admins; docs/webhooks.md) ---------------------------------------------------------

    async def create_webhook(
        self,
        url: str,
        events: list[str],
        *,
        threads: list[str] | None = None,
        secret: str | None = None,
        description: str = "",
    ) -> results.CreatedWebhook:
        """Register an endpoint; the answer's ``secret`` is shown this once."""
        return await self.call(
            calls.create_webhook(url, events, threads=threads, secret=secret, description=description)
        )

    async def list_webhooks(self) -> results.WebhookList:
        return await self.call(calls.list_webhooks())

    async def get_webhook(self, webhook_id: str) -> results.Webhook:
        return await self.call(calls.get_webhook(webhook_id))

    async def update_webhook(
        self,
        webhook_id: str,
        *,
        url: str | None = None,
        events: list[str] | None = None,
        threads: list[str] | None = None,
        secret: str | None = None,
        description: str | None = None,
        enabled: bool | None = None,
    ) -> results.Webhook:
        return await self.call(
            calls.update_webhook(
                webhook_id,
                url=url,
                events=events,
                threads=threads,
                secret=secret,
                description=description,
                enabled=enabled,
            )
        )

    async def delete_webhook(self, webhook_id: str) -> results.Webhook:
        return await self.call(calls.delete_webhook(webhook_id))

    async def list_deliveries(
        self, webhook_id: str, *, status: str | None = None, limit: int | None = None
    ) -> results.WebhookDeliveryList:
        """The endpoint's deliveries, newest first; ``status="failed"``: its dead letters."""
        return await self.call(calls.list_deliveries(webhook_id, status=status, limit=limit))

    async def replay_delivery(self, webhook_id: str, delivery_id: str) -> results.WebhookDelivery:
        """Send a delivered or dead-lettered delivery once more, now."""
        return await self.call(calls.replay_delivery(webhook_id, delivery_id))

    # --- the event stream ----------------------------------------------------------------------------

    async def stream_events(
        self,
        thread_id: str,
        after: int | None = None,
        *,
        live: bool = True,
        reconnect: bool = True,
        connected: asyncio.Event | None = None,
        on_retry: Callable[[ApiError | None], None] | None = None,
    ) -> AsyncGenerator[SseEvent, None]:
        """The thread's events after stream sequence ``after`` (from its start when None), then live until the
        caller stops. A dropped connection, a gateway restarting or ending the stream is resumed with
        ``Last-Event-ID`` of the last durable event handed out: none is missed and none handed out twice.
        ``live``: the text deltas too (they carry no id and are not replayed). ``connected`` is set once the
        gateway is subscribed (anything published after that is in the stream). ``on_retry`` hears of each
        reconnect (None: the gateway ended the stream). Failures that retrying cannot fix are raised."""
        state = Resume(after, live=live)
        while True:
            error: ApiError | None = None
            try:
                async with contextlib.aclosing(self._events_once(thread_id, state.last_id, connected)) as events:
                    async for event in events:
                        if state.accept(event):
                            self.seen.saw(thread_id, event.id)
                            yield event
            except ApiError as exc:
                if not reconnect or not retryable(exc):
                    raise
                error = exc
            if not reconnect:
                return
            if on_retry is not None:
                on_retry(error)
            await asyncio.sleep(state.backoff())

    async def _events_once(
        self, thread_id: str, last_id: int, connected: asyncio.Event | None
    ) -> AsyncGenerator[SseEvent, None]:
        # The stream is quiet between events (keepalives every 15 s): no read timeout.
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        parser = SseParser()
        try:
            async with self._http.stream(
                "GET", calls.events_path(thread_id), headers=stream_headers(last_id), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ApiError.from_response(response)
                async for line in response.aiter_lines():
                    if connected is not None:
                        connected.set()
                    if (event := parser.feed(line)) is not None:
                        yield event
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from None

    # --- waiting -------------------------------------------------------------------------------------

    async def wait_run(
        self, run_id: str, timeout: float | None = None, statuses: Iterable[str] = TERMINAL
    ) -> results.RunView:
        """The run once its status is one of ``statuses`` (by default, once it has ended). TimeoutError after
        ``timeout`` seconds."""
        wanted = frozenset(statuses)

        async def read() -> results.RunView | None:
            run = await self.get_run(run_id)
            return run if run.status in wanted else None

        async with asyncio.timeout(timeout):
            run = await self._accepted_run(run_id)
            if run.status in wanted:
                return run
            return await self._until(run.thread_id, read, RUN_EVENTS)

    async def _accepted_run(self, run_id: str) -> results.RunView:
        """The run; one this client was just told of (a send's answer) may not be in the read model's index
        for a moment: a 404 is asked again for up to ACCEPTED_GRACE seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (ACCEPTED_GRACE if self.seen.thread_of(run_id) else 0)
        while True:
            try:
                return await self.get_run(run_id)
            except NotFound:
                if loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.05)

    async def wait_request(
        self, thread_id: str, timeout: float | None = None, *, besides: Iterable[str] = ()
    ) -> results.RuntimeRequest:
        """The thread's first pending runtime request other than ``besides`` (ids), once there is one."""
        skip = frozenset(besides)

        async def read() -> results.RuntimeRequest | None:
            page = await self.list_requests(thread_id, status="pending")
            async for request in page:
                if request.id not in skip:
                    return request
            return None

        async with asyncio.timeout(timeout):
            return await self._until(thread_id, read, frozenset({"request.opened"}))

    async def _until(self, thread_id: str, read: Callable[[], Awaitable[T | None]], wake: frozenset[str]) -> T:
        """``read()`` once it finds something: read again on each event of ``wake`` (on a timer when the
        tenant has no event stream left)."""
        # The thread's sequence from a one-item page (its whole document costs the thread's length): what is
        # read next reflects at least that much, and following from there misses nothing.
        seq = (await self.list_runs(thread_id, limit=1)).seq
        if (found := await read()) is not None:
            return found
        try:
            async with contextlib.aclosing(self.stream_events(thread_id, seq, live=False)) as events:
                async for event in events:
                    if wakes(wake, event.event, event.data) and (found := await read()) is not None:
                        return found
        except QuotaExceeded:
            pass
        while True:  # no stream for this tenant now: poll
            await asyncio.sleep(POLL)
            if (found := await read()) is not None:
                return found
