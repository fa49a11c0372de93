"""Every operation of the HTTP API as a :class:`Call`: its method, path, query, body and the type its answer
decodes into, built without I/O. The async and the sync client both send these, so an operation is described
once; so are the pieces around a call that need no I/O: what a client has seen of each thread (``min_seq``),
when to retry, how an answer decodes.

Operation ids are the gateway's handler names (the ``operationId`` of the OpenAPI document); each builder below
is named after its operation and both clients have a method of that name.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from treadle.api.lineage import OnActive, SourceType
from treadle.api.modes import DispatchMode, RuntimeMode
from treadle.api.requests import Decision

from .errors import ApiError, Unreachable
from .results import (
    Acknowledged,
    Activity,
    Checkpoint,
    ContextHandoff,
    CreatedWebhook,
    Diff,
    Forked,
    HandoffView,
    Implemented,
    LineageView,
    Message,
    MessageAccepted,
    Page,
    Policy,
    QueueView,
    RollbackView,
    Run,
    RuntimeRequest,
    RunView,
    ThreadCreated,
    ThreadDeleted,
    ThreadSummary,
    ThreadUpdated,
    ThreadView,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryList,
    WebhookList,
)
from .schedule_ops import OPERATIONS as schedule_operations

T = TypeVar("T")

# A run in one of these statuses has ended (the same set as the domain's TERMINAL_RUN_STATUSES; a unit test
# keeps them equal without the SDK importing the domain).
TERMINAL = frozenset({"completed", "interrupted", "failed", "cancelled", "rolled_back"})
# The events that change a run's status or what it waits for: a wait reads again when one arrives.
RUN_EVENTS = frozenset(
    {
        "run.queued",
        "run.dispatched",
        "attempt.started",
        "run.started",
        "request.opened",
        "request.resolved",
        "run.completed",
        "run.failed",
        "run.interrupted",
        "run.cancelled",
        "rollback.completed",
    }
)
# The events after which a run not ended may have ended (the domain's run ends, and a rollback's end): a wait for
# a run's end reads it again on these alone, no read on its start or anything else mid-turn.
ENDING_EVENTS = frozenset({"run.completed", "run.failed", "run.interrupted", "run.cancelled", "rollback.completed"})
STARTED_BY_TEXT = b'"started":'  # a turn's first text carrying its run's start (``message.delta``'s ``started``)


def wakes(kinds: frozenset[str], kind: str, data: bytes) -> bool:
    """Whether an event (its type and JSON) is one of ``kinds``: a ``message.delta`` carrying its run's start counts
    as the ``run.started`` it replaced (logs written before have that event)."""
    return kind in kinds or (kind == "message.delta" and "run.started" in kinds and STARTED_BY_TEXT in data)


MAX_REMEMBERED = 10_000  # threads and runs whose last seen sequence a client keeps


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request of an operation. ``thread``/``run``: whose last seen sequence a read asks for (min_seq)."""

    op: str
    method: str
    path: str
    result: Any  # the type the answer decodes into
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    idempotency_key: str | None = None
    thread: str | None = None
    run: str | None = None

    @property
    def write(self) -> bool:
        return self.method != "GET"

    def with_cursor(self, cursor: str) -> Call[T]:
        return replace(self, params={**self.params, "cursor": cursor})


def _p(value: str) -> str:
    """A path segment: whatever the caller passes stays one segment (the gateway answers a typed 400)."""
    return quote(value, safe="")


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _page(limit: int | None, cursor: str | None, **more: Any) -> dict[str, Any]:
    return _present(limit=limit, cursor=cursor, **more)


# --- threads, messages, runs -------------------------------------------------------------------------


def create_thread(
    *,
    title: str | None = None,
    provider: str | None = None,
    model: str | None = None,
    runtime_mode: RuntimeMode | None = None,
    workspace: str | None = None,
    idempotency_key: str | None = None,
) -> Call[ThreadCreated]:
    body = _present(title=title, provider=provider, model=model, runtime_mode=runtime_mode, workspace=workspace)
    return Call("create_thread", "POST", "/v1/threads", ThreadCreated, body=body, idempotency_key=idempotency_key)


def list_threads(
    *,
    limit: int | None = None,
    cursor: str | None = None,
    q: str | None = None,
    archived: Literal["exclude", "include", "only"] | None = None,
) -> Call[Page[ThreadSummary]]:
    """``q``: only threads whose title contains it, ignoring case (the cursor continues the same search);
    ``archived``: archived threads left out (the default), included, or alone."""
    params = _page(limit, cursor, q=q, archived=archived)
    return Call("list_threads", "GET", "/v1/threads", Page[ThreadSummary], params=params)


def update_thread(
    thread_id: str, *, title: str | None = None, archived: bool | None = None, idempotency_key: str | None = None
) -> Call[ThreadUpdated]:
    """Rename (``title``), archive (``archived=True``) or unarchive (``False``) a thread (L1.3)."""
    path = f"/v1/threads/{_p(thread_id)}"
    body = _present(title=title, archived=archived)
    return Call("update_thread", "PATCH", path, ThreadUpdated, body=body, idempotency_key=idempotency_key)


def delete_thread(thread_id: str, *, idempotency_key: str | None = None) -> Call[ThreadDeleted]:
    """Delete a thread and erase its data (L1.4); a repeat answers the same."""
    path = f"/v1/threads/{_p(thread_id)}"
    return Call("delete_thread", "DELETE", path, ThreadDeleted, idempotency_key=idempotency_key)


def get_thread(thread_id: str, *, runs: int | None = None) -> Call[ThreadView]:
    """``runs``: only the last N runs with their messages, activity and checkpoints (a read that costs the same
    however long the thread is); every other field whole."""
    path = f"/v1/threads/{_p(thread_id)}"
    return Call("get_thread", "GET", path, ThreadView, params=_present(runs=runs), thread=thread_id)


def send_message(
    thread_id: str,
    text: str,
    *,
    mode: DispatchMode | None = None,
    provider: str | None = None,
    model: str | None = None,
    script: dict[str, Any] | None = None,
    target_run_id: str | None = None,
    clean_context: bool | None = None,
    merge_back_from: str | None = None,
    idempotency_key: str | None = None,
) -> Call[MessageAccepted]:
    body = {
        "text": text,
        **_present(
            mode=mode,
            provider=provider,
            model=model,
            script=script,
            target_run_id=target_run_id,
            clean_context=clean_context,
            merge_back_from=merge_back_from,
        ),
    }
    path = f"/v1/threads/{_p(thread_id)}/messages"
    return Call("send_message", "POST", path, MessageAccepted, body=body, idempotency_key=idempotency_key)


def get_run(run_id: str) -> Call[RunView]:
    return Call("get_run", "GET", f"/v1/runs/{_p(run_id)}", RunView, run=run_id)


def list_runs(thread_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[Page[Run]]:
    path = f"/v1/threads/{_p(thread_id)}/runs"
    return Call("list_runs", "GET", path, Page[Run], params=_page(limit, cursor), thread=thread_id)


def list_messages(thread_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[Page[Message]]:
    path = f"/v1/threads/{_p(thread_id)}/messages"
    return Call("list_messages", "GET", path, Page[Message], params=_page(limit, cursor), thread=thread_id)


# --- life inside a run: interrupts, requests, the queue, plans, activity ---------------------------------


def interrupt_run(
    run_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
) -> Call[Acknowledged]:
    body = _present(allow_destructive=allow_destructive)
    path = f"/v1/runs/{_p(run_id)}/interrupt"
    return Call("interrupt_run", "POST", path, Acknowledged, body=body, idempotency_key=idempotency_key)


def interrupt_node(
    node_id: str, *, allow_destructive: bool | None = None, idempotency_key: str | None = None
) -> Call[Acknowledged]:
    body = _present(allow_destructive=allow_destructive)
    path = f"/v1/nodes/{_p(node_id)}/interrupt"
    return Call("interrupt_node", "POST", path, Acknowledged, body=body, idempotency_key=idempotency_key)


def respond(
    request_id: str,
    *,
    decision: Decision | None = None,
    answers: dict[str, str] | None = None,
    message: str | None = None,
    idempotency_key: str | None = None,
) -> Call[Acknowledged]:
    body = _present(decision=decision, answers=answers, message=message)
    path = f"/v1/requests/{_p(request_id)}/respond"
    return Call("respond", "POST", path, Acknowledged, body=body, idempotency_key=idempotency_key)


def list_requests(
    thread_id: str, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[Page[RuntimeRequest]]:
    path = f"/v1/threads/{_p(thread_id)}/requests"
    params = _page(limit, cursor, status=status)
    return Call("list_requests", "GET", path, Page[RuntimeRequest], params=params, thread=thread_id)


def list_activity(
    thread_id: str, *, run_id: str | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[Page[Activity]]:
    path = f"/v1/threads/{_p(thread_id)}/activity"
    params = _page(limit, cursor, run_id=run_id)
    return Call("list_activity", "GET", path, Page[Activity], params=params, thread=thread_id)


def get_queue(thread_id: str) -> Call[QueueView]:
    return Call("get_queue", "GET", f"/v1/threads/{_p(thread_id)}/queue", QueueView, thread=thread_id)


def reorder_queue(thread_id: str, order: list[str], *, idempotency_key: str | None = None) -> Call[Acknowledged]:
    path = f"/v1/threads/{_p(thread_id)}/queue"
    return Call("reorder_queue", "PATCH", path, Acknowledged, body={"order": order}, idempotency_key=idempotency_key)


def edit_queued(
    thread_id: str, run_id: str, text: str, *, script: dict[str, Any] | None = None, idempotency_key: str | None = None
) -> Call[Acknowledged]:
    path = f"/v1/threads/{_p(thread_id)}/queue/{_p(run_id)}"
    body = {"text": text, **_present(script=script)}
    return Call("edit_queued", "PATCH", path, Acknowledged, body=body, idempotency_key=idempotency_key)


def cancel_queued(thread_id: str, run_id: str, *, idempotency_key: str | None = None) -> Call[Acknowledged]:
    path = f"/v1/threads/{_p(thread_id)}/queue/{_p(run_id)}"
    return Call("cancel_queued", "DELETE", path, Acknowledged, idempotency_key=idempotency_key)


def implement_plan(
    plan_id: str, *, as_: Literal["run", "thread"] = "run", idempotency_key: str | None = None
) -> Call[Implemented]:
    path = f"/v1/plans/{_p(plan_id)}/implement"
    return Call("implement_plan", "POST", path, Implemented, body={"as": as_}, idempotency_key=idempotency_key)


# --- checkpoints: lists, diffs, rollbacks ---------------------------------------------------------------


def list_checkpoints(thread_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[Page[Checkpoint]]:
    path = f"/v1/threads/{_p(thread_id)}/checkpoints"
    return Call("list_checkpoints", "GET", path, Page[Checkpoint], params=_page(limit, cursor), thread=thread_id)


def run_diff(run_id: str, *, max_bytes: int | None = None) -> Call[Diff]:
    path = f"/v1/runs/{_p(run_id)}/diff"
    return Call("run_diff", "GET", path, Diff, params=_present(max_bytes=max_bytes), run=run_id)


def thread_diff(
    thread_id: str,
    *,
    from_ordinal: int | None = None,
    to_ordinal: int | None = None,
    max_bytes: int | None = None,
) -> Call[Diff]:
    params = _present(max_bytes=max_bytes, **{"from": from_ordinal, "to": to_ordinal})
    return Call("thread_diff", "GET", f"/v1/threads/{_p(thread_id)}/diff", Diff, params=params, thread=thread_id)


def rollback_thread(
    thread_id: str, to_run_ordinal: int, *, interrupt_active: bool = False, idempotency_key: str | None = None
) -> Call[RollbackView]:
    body = {"to_run_ordinal": to_run_ordinal, "interrupt_active": interrupt_active}
    path = f"/v1/threads/{_p(thread_id)}/rollback"
    return Call("rollback_thread", "POST", path, RollbackView, body=body, idempotency_key=idempotency_key)


def rollback_node(
    node_id: str, checkpoint_id: str, *, thread_id: str | None = None, idempotency_key: str | None = None
) -> Call[RollbackView]:
    body = {"checkpoint_id": checkpoint_id, **_present(thread_id=thread_id)}
    path = f"/v1/nodes/{_p(node_id)}/rollback"
    return Call("rollback_node", "POST", path, RollbackView, body=body, idempotency_key=idempotency_key)


# --- lineage: forks, handoffs, the tree -------------------------------------------------------------------


def fork_thread(
    thread_id: str,
    source_type: SourceType,
    source_id: str,
    *,
    turn: str | None = None,
    title: str | None = None,
    on_active: OnActive | None = None,
    idempotency_key: str | None = None,
) -> Call[Forked]:
    body = {
        "source": {"type": source_type, "id": source_id, **_present(turn=turn)},
        **_present(title=title, on_active=on_active),
    }
    path = f"/v1/threads/{_p(thread_id)}/fork"
    return Call("fork_thread", "POST", path, Forked, body=body, idempotency_key=idempotency_key)


def list_handoffs(thread_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[Page[ContextHandoff]]:
    path = f"/v1/threads/{_p(thread_id)}/handoffs"
    return Call("list_handoffs", "GET", path, Page[ContextHandoff], params=_page(limit, cursor), thread=thread_id)


def get_handoff(handoff_id: str) -> Call[HandoffView]:
    return Call("get_handoff", "GET", f"/v1/handoffs/{_p(handoff_id)}", HandoffView)


def get_lineage(thread_id: str) -> Call[LineageView]:
    return Call("get_lineage", "GET", f"/v1/threads/{_p(thread_id)}/lineage", LineageView, thread=thread_id)


# --- the tenant's policy (admins) ---------------------------------------------------------------------


def get_policy() -> Call[Policy]:
    return Call("get_policy", "GET", "/v1/policy", Policy)


def put_policy(
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
) -> Call[Policy]:
    """The whole policy: a field left out (None) is the deployment's default, not the stored value."""
    body = _present(
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
    return Call("put_policy", "PUT", "/v1/policy", Policy, body=body)


# --- webhooks (admins; docs/webhooks.md) -------------------------------------------------------------


def create_webhook(
    url: str, events: list[str], *, threads: list[str] | None = None, secret: str | None = None, description: str = ""
) -> Call[CreatedWebhook]:
    body = _present(url=url, events=events, threads=threads, secret=secret, description=description or None)
    return Call("create_webhook", "POST", "/v1/webhooks", CreatedWebhook, body=body)


def list_webhooks() -> Call[WebhookList]:
    return Call("list_webhooks", "GET", "/v1/webhooks", WebhookList)


def get_webhook(webhook_id: str) -> Call[Webhook]:
    return Call("get_webhook", "GET", f"/v1/webhooks/{_p(webhook_id)}", Webhook)


def update_webhook(
    webhook_id: str,
    *,
    url: str | None = None,
    events: list[str] | None = None,
    threads: list[str] | None = None,
    secret: str | None = None,
    description: str | None = None,
    enabled: bool | None = None,
) -> Call[Webhook]:
    body = _present(url=url, events=events, threads=threads, secret=secret, description=description, enabled=enabled)
    return Call("update_webhook", "PATCH", f"/v1/webhooks/{_p(webhook_id)}", Webhook, body=body)


def delete_webhook(webhook_id: str) -> Call[Webhook]:
    return Call("delete_webhook", "DELETE", f"/v1/webhooks/{_p(webhook_id)}", Webhook)


def list_deliveries(
    webhook_id: str, *, status: str | None = None, limit: int | None = None
) -> Call[WebhookDeliveryList]:
    path = f"/v1/webhooks/{_p(webhook_id)}/deliveries"
    return Call("list_deliveries", "GET", path, WebhookDeliveryList, params=_present(status=status, limit=limit))


def replay_delivery(webhook_id: str, delivery_id: str) -> Call[WebhookDelivery]:
    path = f"/v1/webhooks/{_p(webhook_id)}/deliveries/{_p(delivery_id)}/replay"
    return Call("replay_delivery", "POST", path, WebhookDelivery)


def events_path(thread_id: str) -> str:
    """The thread's Server-Sent Events (operation ``stream_events``; the clients' ``stream_events``)."""
    return f"/v1/threads/{_p(thread_id)}/events"


# Every operation: the builders above, and the event stream, which the clients read with a loop of their own.
OPERATIONS: tuple[str, ...] = (
    "create_thread",
    "list_threads",
    "get_thread",
    "update_thread",
    "delete_thread",
    "send_message",
    "get_run",
    "list_runs",
    "list_messages",
    "stream_events",
    "interrupt_run",
    "interrupt_node",
    "respond",
    "list_requests",
    "list_activity",
    "get_queue",
    "reorder_queue",
    "edit_queued",
    "cancel_queued",
    "implement_plan",
    "list_checkpoints",
    "run_diff",
    "thread_diff",
    "rollback_thread",
    "rollback_node",
    "fork_thread",
    "list_handoffs",
    "get_handoff",
    "get_lineage",
    "get_policy",
    "put_policy",
    *schedule_operations,  # client/schedules.py
    "create_webhook",
    "list_webhooks",
    "get_webhook",
    "update_webhook",
    "delete_webhook",
    "list_deliveries",
    "replay_delivery",
)


# --- around a call: what the client has seen, retries, decoding ------------------------------------------


class Seen:
    """What one client has seen of each thread: reads never go back in time for it. Each thread's read asks
    for (``min_seq``) the highest sequence the client wrote or saw on it, and a run's read for its thread's."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}
        self._run_thread: dict[str, str] = {}

    def saw(self, thread_id: str, seq: int | None) -> None:
        if seq is None:
            return
        if len(self._seq) >= MAX_REMEMBERED and thread_id not in self._seq:
            self._seq.clear()  # bounded memory: forgetting only lets a read be as fresh as the projection
        self._seq[thread_id] = max(seq, self._seq.get(thread_id, 0))

    def run_of(self, run_id: str, thread_id: str) -> None:
        if len(self._run_thread) >= MAX_REMEMBERED:
            self._run_thread.clear()
        self._run_thread[run_id] = thread_id

    def seq(self, thread_id: str | None) -> int:
        return self._seq.get(thread_id or "", 0)

    def thread_of(self, run_id: str) -> str | None:
        return self._run_thread.get(run_id)

    def min_seq(self, call: Call[Any]) -> dict[str, int]:
        thread = call.thread or (self.thread_of(call.run) if call.run else None)
        seq = self.seq(thread)
        return {"min_seq": seq} if seq and not call.write else {}

    def learn(self, call: Call[Any], answer: Any) -> None:
        """Remember the thread and sequence an answer reflects, and the thread of any run it names."""
        if isinstance(answer, Page):
            if call.thread is not None:
                self.saw(call.thread, answer.seq)
            return
        if isinstance(answer, ThreadView):
            if answer.thread is not None:
                self.saw(answer.thread.id, answer.seq)
            return
        thread = getattr(answer, "thread_id", None)
        if not isinstance(thread, str):
            return
        seq = getattr(answer, "seq", None)
        self.saw(getattr(answer, "parent_thread_id", None) or thread, seq)  # a fork's seq is its parent's
        run_id = getattr(answer, "run_id", None) or (answer.id if isinstance(answer, RunView) else None)
        if isinstance(run_id, str) and run_id:
            self.run_of(run_id, thread)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most ``attempts`` tries within ``total`` seconds. A wait is the answer's
    ``Retry-After`` when it sent one, else an exponential backoff; never more than ``max_delay``."""

    attempts: int = 5
    total: float = 30.0
    max_delay: float = 5.0
    first_delay: float = 0.1

    def delay(self, attempt: int, elapsed: float, error: ApiError) -> float | None:
        """Seconds to wait before try ``attempt + 1`` after ``error`` on try ``attempt`` (None: give up)."""
        if not retryable(error) or attempt >= self.attempts:
            return None
        backoff = self.first_delay * 2 ** (attempt - 1)
        wait = min(error.retry_after if error.retry_after is not None else backoff, self.max_delay)
        return wait if elapsed + wait <= self.total else None


NO_RETRY = RetryPolicy(attempts=1)


def retryable(error: ApiError) -> bool:
    """Asking again (with the same Idempotency-Key) can succeed: no answer, the gateway or what it needs briefly
    unavailable, the token's rate used up, or the same key still being processed. A quota is not retried: it
    frees only when the tenant's own work ends."""
    return (
        error.status in (0, 502, 503, 504)
        or (error.status == 429 and error.code == "rate_limited")
        or (error.status == 409 and error.code == "idempotency_conflict")
    )


def headers(call: Call[Any]) -> dict[str, str]:
    return {"Idempotency-Key": call.idempotency_key} if call.idempotency_key else {}


def keyed(call: Call[T]) -> Call[T]:
    """A write with an Idempotency-Key (one of its own when the caller gave none): every retry of it is the
    same request to the gateway, so a write whose answer was lost is not done twice."""
    if not call.write or call.idempotency_key or call.op == "put_policy":
        return call
    return replace(call, idempotency_key=f"sdk-{uuid.uuid4().hex}")


def decode(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400:
        raise ApiError.from_response(response)
    try:
        decoded: T = msgspec.json.decode(response.content, type=call.result)
        return decoded
    except msgspec.DecodeError as exc:  # not the API's answer (a proxy's page): say so, typed
        raise ApiError(response.status_code, "invalid_answer", f"{call.op}: {exc}") from None


def unreachable(base_url: str, exc: BaseException) -> Unreachable:
    return Unreachable(0, "unreachable", f"cannot reach {base_url}: {exc or exc.__class__.__name__}")
