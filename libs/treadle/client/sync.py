"""The sync client of the HTTP API v1, on ``httpx.Client`` (no event loop): the same operations, answers, pages,
resuming event stream and waits as :class:`treadle.client.AsyncTreadle`, from the same request builders
(:mod:`treadle.client.calls`) and decoders; only the I/O differs.

Failures are :class:`~treadle.client.errors.ApiError` subclasses (a gateway that cannot be reached is
:class:`~treadle.client.errors.Unreachable`). Writes carry an Idempotency-Key, and a call the gateway could not
serve right now (503, 429 rate_limited, no answer) is asked again within the client's :class:`RetryPolicy`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Generic, Literal, TypeVar

import httpx

from treadle.api.lineage import SourceType
from treadle.api.requests import Decision

from . import calls, results
from .calls import RUN_EVENTS, TERMINAL, Call, RetryPolicy, Seen, decode, keyed, retryable, unreachable, wakes
from .errors import ApiError, NotFound, QuotaExceeded
from .schedules import ScheduleMethods
from .settings import resolve
from .sse import Resume, SseEvent, SseParser, stream_headers

T = TypeVar("T")
POLL = 0.5  # how often a wait reads when the tenant has no event stream left to follow
ACCEPTED_GRACE = 5.0  # seconds a run this client started may be unknown to the read model


class SyncPage(Generic[T]):
    """One page of a list (``items``, ``next_cursor``, ``seq``); ``for item in page`` goes through its
    items and those of every following page, fetched as needed."""

    def __init__(self, client: Treadle, call: Call[results.Page[T]], page: results.Page[T]) -> None:
        self._client, self._call = client, call
        self.items, self.next_cursor, self.seq = page.items, page.next_cursor, page.seq

    def next_page(self) -> SyncPage[T] | None:
        if self.next_cursor is None:
            return None
        call = self._call.with_cursor(self.next_cursor)
        return SyncPage(self._client, call, self._client.call(call))

    def __iter__(self) -> Iterator[T]:
        page: SyncPage[T] | None = self
        while page is not None:
            yield from page.items
            page = page.next_page()


class Treadle(ScheduleMethods):
    """``with Treadle(url, token) as client: ...``; ``Treadle()`` reads TREADLE_API_URL and TREADLE_TOKEN."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url, token = resolve(base_url, token)  # unnamed: TREADLE_API_URL, TREADLE_TOKEN
        self.retry = retry or RetryPolicy()
        self.seen = Seen()
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Treadle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, call: Call[T]) -> T:
        """Send one operation's request (retried within the policy) and decode its answer."""
        call = keyed(call)
        began, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
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
            wait = self.retry.delay(attempt, time.monotonic() - began, error)
            if wait is None:
                raise error
            time.sleep(wait)

    def _page(self, call: Call[results.Page[T]]) -> SyncPage[T]:
        return SyncPage(self, call, self.call(call))

    # --- threads, messages, runs ---------------------------------------------------------------------

    def create_thread(self, **kw: Any) -> results.ThreadCreated:
        """``title``, ``provider``, ``model``, ``runtime_mode``, ``workspace``, ``idempotency_key``."""
        return self.call(calls.create_thread(**kw))

    def list_threads(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        q: str | None = None,
        archived: Literal["exclude", "include", "only"] | None = None,
    ) -> SyncPage[results.ThreadSummary]:
        """``archived``: archived threads left out (the default), included, or alone."""
        return self._page(calls.list_threads(limit=limit, cursor=cursor, q=q, archived=archived))

    def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        archived: bool | None = None,
        idempotency_key: str | None = None,
    ) -> results.ThreadUpdated:
        """Rename, archive or unarchive (L1.3); ``changed`` is False when the thread already was so."""
        return self.call(
            calls.update_thread(thread_id, title=title, archived=archived, idempotency_key=idempotency_key)
        )

    def archive_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadUpdated:
        return self.update_thread(thread_id, archived=True, idempotency_key=idempotency_key)

    def unarchive_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadUpdated:
        return self.update_thread(thread_id, archived=False, idempotency_key=idempotency_key)

    def delete_thread(self, thread_id: str, *, idempotency_key: str | None = None) -> results.ThreadDeleted:
        """Delete the thread and erase its data (L1.4): refused (409 ``thread_busy``) while a run is active or
        queued; a repeat answers the same and finishes an erasure that stopped."""
        return self.call(calls.delete_thread(thread_id, idempotency_key=idempotency_key))

    def get_thread(self, thread_id: str, *, runs: int | None = None) -> results.ThreadView:
        """The thread's document; with ``runs``, only its last N runs (see ``calls.get_thread``)."""
        return self.call(calls.get_thread(thread_id, runs=runs))

    def send_message(self, thread_id: str, text: str, **kw: Any) -> results.MessageAccepted:
        """``mode``, ``provider``, ``model``, ``script``, ``target_run_id``, ``clean_context``,
        ``merge_back_from``, ``idempotency_key``."""
        return self.call(calls.send_message(thread_id, text, **kw))

    def get_run(self, run_id: str) -> results.RunView:
        return self.call(calls.get_run(run_id))

    def list_runs(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.Run]:
        return self._page(calls.list_runs(thread_id, limit=limit, cursor=cursor))

    def list_messages(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.Message]:
        return self._page(calls.list_messages(thread_id, limit=limit, cursor=cursor))

    # --- life inside a run ---------------------------------------------------------------------------

    def interrupt_run(
        self, run_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return self.call(
            calls.interrupt_run(run_id, allow_destructive=allow_destructive, idempotency_key=idempotency_key)
        )

    def interrupt_node(
        self, node_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return self.call(
            calls.interrupt_node(node_id, allow_destructive=allow_destructive, idempotency_key=idempotency_key)
        )

    def respond(
        self,
        request_id: str,
        *,
        decision: Decision | None = None,
        answers: dict[str, str] | None = None,
        message: str | None = None,
        idempotency_key: str | None = None,
    ) -> results.Acknowledged:
        """Answer an approval (``decision``) or a question (``answers``, ``message``)."""
        return self.call(
            calls.respond(
                request_id, decision=decision, answers=answers, message=message, idempotency_key=idempotency_key
            )
        )

    def list_requests(
        self, thread_id: str, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.RuntimeRequest]:
        return self._page(calls.list_requests(thread_id, status=status, limit=limit, cursor=cursor))

    def list_activity(
        self, thread_id: str, *, run_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.Activity]:
        return self._page(calls.list_activity(thread_id, run_id=run_id, limit=limit, cursor=cursor))

    def get_queue(self, thread_id: str) -> results.QueueView:
        return self.call(calls.get_queue(thread_id))

    def reorder_queue(
        self, thread_id: str, order: list[str], *, idempotency_key: str | None = None
    ) -> results.Acknowledged:
        return self.call(calls.reorder_queue(thread_id, order, idempotency_key=idempotency_key))

    def edit_queued(
        self,
        thread_id: str,
        run_id: str,
        text: str,
        *,
        script: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> results.Acknowledged:
        return self.call(calls.edit_queued(thread_id, run_id, text, script=script, idempotency_key=idempotency_key))

    def cancel_queued(self, thread_id: str, run_id: str, *, idempotency_key: str | None = None) -> results.Acknowledged:
        return self.call(calls.cancel_queued(thread_id, run_id, idempotency_key=idempotency_key))

    def implement_plan(
        self, plan_id: str, *, as_: Literal["run", "thread"] = "run", idempotency_key: str | None = None
    ) -> results.Implemented:
        return self.call(calls.implement_plan(plan_id, as_=as_, idempotency_key=idempotency_key))

    # --- checkpoints ---------------------------------------------------------------------------------

    def list_checkpoints(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.Checkpoint]:
        return self._page(calls.list_checkpoints(thread_id, limit=limit, cursor=cursor))

    def run_diff(self, run_id: str, *, max_bytes: int | None = None) -> results.Diff:
        return self.call(calls.run_diff(run_id, max_bytes=max_bytes))

    def thread_diff(
        self,
        thread_id: str,
        *,
        from_ordinal: int | None = None,
        to_ordinal: int | None = None,
        max_bytes: int | None = None,
    ) -> results.Diff:
        return self.call(
            calls.thread_diff(thread_id, from_ordinal=from_ordinal, to_ordinal=to_ordinal, max_bytes=max_bytes)
        )

    def rollback_thread(
        self,
        thread_id: str,
        to_run_ordinal: int,
        *,
        interrupt_active: bool = False,
        idempotency_key: str | None = None,
    ) -> results.RollbackView:
        return self.call(
            calls.rollback_thread(
                thread_id, to_run_ordinal, interrupt_active=interrupt_active, idempotency_key=idempotency_key
            )
        )

    def rollback_node(
        self,
        node_id: str,
        checkpoint_id: str,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> results.RollbackView:
        return self.call(
            calls.rollback_node(node_id, checkpoint_id, thread_id=thread_id, idempotency_key=idempotency_key)
        )

    # --- lineage -------------------------------------------------------------------------------------

    def fork_thread(
        self,
        thread_id: str,
        source_type: SourceType,
        source_id: str,
        **kw: Any,
    ) -> results.Forked:
        """``turn``, ``title``, ``on_active`` (latest_checkpoint, refuse), ``idempotency_key``."""
        return self.call(calls.fork_thread(thread_id, source_type, source_id, **kw))

    def list_handoffs(
        self, thread_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> SyncPage[results.ContextHandoff]:
        return self._page(calls.list_handoffs(thread_id, limit=limit, cursor=cursor))

    def get_handoff(self, handoff_id: str) -> results.HandoffView:
        return self.call(calls.get_handoff(handoff_id))

    def get_lineage(self, thread_id: str) -> results.LineageView:
        return self.call(calls.get_lineage(thread_id))

    # --- policy (admins) -----------------------------------------------------------------------------

    def get_policy(self) -> results.Policy:
        return self.call(calls.get_policy())

    def put_policy(
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
        return self.call(
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

    def create_webhook(
        self,
        url: str,
        events: list[str],
        *,
        threads: list[str] | None = None,
        secret: str | None = None,
        description: str = "",
    ) -> results.CreatedWebhook:
        """Register an endpoint; the answer's ``secret`` is shown this once."""
        return self.call(calls.create_webhook(url, events, threads=threads, secret=secret, description=description))

    def list_webhooks(self) -> results.WebhookList:
        return self.call(calls.list_webhooks())

    def get_webhook(self, webhook_id: str) -> results.Webhook:
        return self.call(calls.get_webhook(webhook_id))

    def update_webhook(
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
        return self.call(
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

    def delete_webhook(self, webhook_id: str) -> results.Webhook:
        return self.call(calls.delete_webhook(webhook_id))

    def list_deliveries(
        self, webhook_id: str, *, status: str | None = None, limit: int | None = None
    ) -> results.WebhookDeliveryList:
        """The endpoint's deliveries, newest first; ``status="failed"``: its dead letters."""
        return self.call(calls.list_deliveries(webhook_id, status=status, limit=limit))

    def replay_delivery(self, webhook_id: str, delivery_id: str) -> results.WebhookDelivery:
        """Send a delivered or dead-lettered delivery once more, now."""
        return self.call(calls.replay_delivery(webhook_id, delivery_id))

    # --- the event stream ----------------------------------------------------------------------------

    def stream_events(
        self,
        thread_id: str,
        after: int | None = None,
        *,
        live: bool = True,
        reconnect: bool = True,
        connected: threading.Event | None = None,
        on_retry: Callable[[ApiError | None], None] | None = None,
        deadline: float | None = None,
    ) -> Generator[SseEvent, None, None]:
        """The thread's events after stream sequence ``after`` (from its start when None), then live until the
        caller stops. A dropped connection, a gateway restarting or ending the stream is resumed with
        ``Last-Event-ID`` of the last durable event handed out: none is missed and none handed out twice.
        ``live``: the text deltas too (they carry no id and are not replayed). ``connected`` is set once the
        gateway is subscribed (anything published after that is in the stream). ``on_retry`` hears of each
        reconnect (None: the gateway ended the stream). Failures that retrying cannot fix are raised.
        ``deadline`` (``time.monotonic()``): raise TimeoutError once past it, even while no event comes."""
        state = Resume(after, live=live)
        while True:
            error: ApiError | None = None
            _check(deadline)
            try:
                with contextlib.closing(self._events_once(thread_id, state.last_id, connected, deadline)) as events:
                    for event in events:
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
            time.sleep(
                state.backoff() if deadline is None else min(state.backoff(), max(deadline - time.monotonic(), 0))
            )

    def _events_once(
        self, thread_id: str, last_id: int, connected: threading.Event | None, deadline: float | None
    ) -> Generator[SseEvent, None, None]:
        # The stream is quiet between events (keepalives every 15 s): no read timeout but a caller's deadline.
        read = None if deadline is None else max(deadline - time.monotonic(), 0.01)
        timeout = httpx.Timeout(self._http.timeout.connect, read=read)
        parser = SseParser()
        try:
            with self._http.stream(
                "GET", calls.events_path(thread_id), headers=stream_headers(last_id), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError.from_response(response)
                for line in response.iter_lines():
                    if connected is not None:
                        connected.set()
                    if (event := parser.feed(line)) is not None:
                        yield event
        except httpx.ReadTimeout as exc:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no event before the deadline") from None
            raise unreachable(self.base_url, exc) from None
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from None

    # --- waiting -------------------------------------------------------------------------------------

    def wait_run(
        self, run_id: str, timeout: float | None = None, statuses: Iterable[str] = TERMINAL
    ) -> results.RunView:
        """The run once its status is one of ``statuses`` (by default, once it has ended). TimeoutError after
        ``timeout`` seconds."""
        wanted = frozenset(statuses)

        def read() -> results.RunView | None:
            run = self.get_run(run_id)
            return run if run.status in wanted else None

        deadline = None if timeout is None else time.monotonic() + timeout
        run = self._accepted_run(run_id)
        if run.status in wanted:
            return run
        return self._until(run.thread_id, read, RUN_EVENTS, deadline)

    def _accepted_run(self, run_id: str) -> results.RunView:
        """The run; one this client was just told of (a send's answer) may not be in the read model's index
        for a moment: a 404 is asked again for up to ACCEPTED_GRACE seconds."""
        deadline = time.monotonic() + (ACCEPTED_GRACE if self.seen.thread_of(run_id) else 0)
        while True:
            try:
                return self.get_run(run_id)
            except NotFound:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)

    def wait_request(
        self, thread_id: str, timeout: float | None = None, *, besides: Iterable[str] = ()
    ) -> results.RuntimeRequest:
        """The thread's first pending runtime request other than ``besides`` (ids), once there is one."""
        skip = frozenset(besides)

        def read() -> results.RuntimeRequest | None:
            return next((r for r in self.list_requests(thread_id, status="pending") if r.id not in skip), None)

        deadline = None if timeout is None else time.monotonic() + timeout
        return self._until(thread_id, read, frozenset({"request.opened"}), deadline)

    def _until(self, thread_id: str, read: Callable[[], T | None], wake: frozenset[str], deadline: float | None) -> T:
        """``read()`` once it finds something: read again on each event of ``wake`` (on a timer when the
        tenant has no event stream left); TimeoutError past ``deadline``."""
        # The thread's sequence from a one-item page (its whole document costs the thread's length): what is
        # read next reflects at least that much, and following from there misses nothing.
        seq = self.list_runs(thread_id, limit=1).seq
        if (found := read()) is not None:
            return found
        try:
            events = self.stream_events(thread_id, seq, live=False, deadline=deadline)
            with contextlib.closing(events):
                for event in events:
                    if wakes(wake, event.event, event.data) and (found := read()) is not None:
                        return found
        except QuotaExceeded:
            pass
        while True:  # no stream for this tenant now: poll
            _check(deadline)
            time.sleep(POLL)
            if (found := read()) is not None:
                return found


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError("the wait's deadline passed")
