"""The OpenAPI document as the contract a client generator builds on: one error shape with the codes each
route can answer, a bearer scheme on every operation, operation ids that are the handlers' names, and the
SSE stream described as ``text/event-stream``.

A route declares its failures with ``responses=errors(...)``: the groups below (each names where in the code
its codes come from) plus the route's own ``{status: (code, ...)}``. ``BASE`` is added to every route.
``finish`` completes the generated document (headers sent with a status, the event payloads), for the JSON
the gateway serves and for ``schemas/openapi.json`` alike."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, Contact, Example, SecurityScheme, Tag

Codes = Mapping[int, tuple[str, ...]]


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: str  # stable and machine-readable; each response lists the codes it carries
    message: str  # for people; may change
    details: dict[str, Any]  # what the code needs to be acted on, e.g. {field, limit} or {quota, limit, current}


class ErrorResponse(msgspec.Struct, kw_only=True):
    """Every failure of the API has this shape (``errors.body``); never a stack trace."""

    error: ErrorDetail


# --- where codes come from ------------------------------------------------------------------------

# Every /v1 route: deps.principal (401, 403 a role that means nothing), limits.RateLimitMiddleware (429),
# errors.on_unexpected (500), errors.on_broker_unavailable / on_store_unavailable (503).
BASE: Codes = {
    401: ("unauthorized",),
    403: ("forbidden",),
    429: ("rate_limited",),
    500: ("internal",),
    503: ("unavailable",),
}
# Query and header parameters: Litestar's own validation (errors.on_http_error), params.number.
PARAMS: Codes = {400: ("bad_request", "invalid_parameter")}
PATH_ID: Codes = {400: ("invalid_id",)}  # deps.path_id
# A JSON body: not JSON, unknown or mistyped fields, nested too deep (400); over max_body_bytes (413).
BODY: Codes = {400: ("bad_request",), 413: ("too_large",)}
THREAD_READ: Codes = {404: ("thread_not_found",)}  # deps.thread_doc
# commands.Commands.send, any verb: the Idempotency-Key, the broker's message limit, the coordinator's
# answers (a command it cannot decode, a bug, no answer in time, the thread busy past the timeout).
COMMAND: Codes = {
    400: ("bad_request", "invalid_idempotency_key"),
    409: ("idempotency_conflict",),
    413: ("too_large",),
    422: ("idempotency_key_reused",),
    500: ("internal",),
    503: ("unavailable", "busy"),
}
# The coordinator, per command (treadle.core deciders; coordinator.admission: policy and quotas).
ON_THREAD: Codes = {404: ("thread_not_found",)}  # core.decide.require_thread: every command but a create
ADMITTED: Codes = {403: ("mode_not_allowed",), 429: ("quota_exceeded",)}  # core.policy, core.quotas
CREATE: Codes = {  # treadle.api.limits (the body's constraints), core.thread.decide.create_thread; placement
    400: ("invalid_title", "invalid_provider", "invalid_model", "invalid_runtime_mode", "invalid_workspace"),
    409: ("thread_exists",),
    503: ("no_volume",),
}
SEND: Codes = {  # treadle.api.limits, core.thread.decide.send_message, core.lineage.context_sends, decide
    400: (
        "text_too_long",
        "script_too_large",
        "empty_text",
        "invalid_mode",
        "invalid_provider",
        "invalid_model",
        "invalid_script",
        "invalid_target",
        "invalid_id",
    ),
    404: ("run_not_found", "thread_not_found"),
    409: (
        "run_active",
        "steering_unavailable",
        "steers_pending",
        "rollback_in_progress",
        "invalid_mode",
        "nothing_to_merge",
        "thread_archived",
    ),
    422: ("steering_unavailable", "not_a_fork"),
}
UPDATE: Codes = {400: ("invalid_title", "empty_update"), 409: ("thread_busy",)}  # core.thread.manage
DELETE: Codes = {409: ("thread_busy",), 503: ("erasure_incomplete",)}  # core.thread.manage, coordinator.erasure
INTERRUPT: Codes = {  # core.run.interrupts
    400: ("invalid_target", "invalid_id"),
    404: ("run_not_found", "node_not_found"),
    409: ("run_not_active", "node_not_active", "interrupt_unsupported"),
    422: ("node_interrupt_unsupported",),
}
RESPOND: Codes = {  # core.requests.decide, core.requests.answers
    400: ("invalid_response", "invalid_id"),
    404: ("request_not_found",),
    409: ("not_resumable", "request_not_pending"),
}
REORDER: Codes = {400: ("invalid_order", "invalid_id"), 409: ("queue_changed",)}  # core.thread.queue
QUEUED_RUN: Codes = {404: ("run_not_found",), 409: ("run_not_queued",)}  # core.thread.queue
EDIT: Codes = {400: ("text_too_long", "script_too_large", "empty_text", "invalid_script")}
PLAN: Codes = {400: ("invalid_as",), 404: ("plan_not_found",), 409: ("plan_implemented",)}  # core.plans.decide
FORK: Codes = {  # core.lineage.decide and forks
    400: ("invalid_title", "invalid_id"),
    404: ("source_not_found",),
    409: ("unstable_source", "workspace_unavailable", "thread_exists"),
}
ROLLBACK: Codes = {  # core.rollback.decide; checkpoints._outcome
    409: ("rollback_in_progress", "checkpoint_unavailable", "rollback_failed"),
    503: ("unavailable",),
}
# checkpoints._diff: the checkpoint service's failure codes as the route maps them.
DIFF: Codes = {
    400: ("bad_request", "path_escape", "git_error", "internal"),
    409: ("checkpoint_unavailable", "unknown_commit", "workspace_missing"),
    503: ("store_unavailable",),
}

_EXAMPLE_MESSAGES = {
    "unauthorized": "a bearer token is required",
    "rate_limited": "too many requests for this token; retry later",
    "unavailable": "the message broker is briefly unavailable; retry",
    "invalid_id": "'thr_x' is not a valid thr id",
    "thread_not_found": "thread thr_01kbq0v8y3f6x5n2w9c4h7j1ad not found",
    "quota_exceeded": "this thread already has 100 queued runs; wait for some to start or cancel some",
}


def merge(*groups: Codes) -> dict[int, tuple[str, ...]]:
    merged: dict[int, list[str]] = {}
    for group in groups:
        for status, codes in group.items():
            merged.setdefault(status, []).extend(c for c in codes if c not in merged.get(status, []))
    return {status: tuple(merged[status]) for status in sorted(merged)}


def errors(*groups: Codes) -> dict[int, ResponseSpec]:
    """The error responses of a route (``BASE`` and ``groups``), for its decorator's ``responses=``: one
    schema, the codes in the description and one example per code (a client can switch on them)."""
    return {
        status: ResponseSpec(
            data_container=ErrorResponse,
            description=f"{HTTPStatus(status).phrase}; `error.code` is one of: " + ", ".join(f"`{c}`" for c in codes),
            generate_examples=False,
            examples=[
                Example(
                    id=code,
                    summary=code,
                    value={
                        "error": {
                            "code": code,
                            "message": _EXAMPLE_MESSAGES.get(code, code.replace("_", " ")),
                            "details": {},
                        }
                    },
                )
                for code in codes
            ],
        )
        for status, codes in merge(BASE, *groups).items()
    }


# --- the document ---------------------------------------------------------------------------------

TAGS = {
    "threads": "Threads: create, list, read (L1); rename, archive, delete (L1.3, L1.4)",
    "messages": "Messages: each starts or queues a run (L2, L3)",
    "runs": "Runs and their nodes: read, interrupt (L8), activity (L12.4)",
    "events": "The thread's events as Server-Sent Events",
    "queue": "Runs waiting behind the active one (L3.6)",
    "requests": "Approvals and questions a run asks (L11)",
    "plans": "Proposed plans (L12.3)",
    "checkpoints": "Diffs and rollbacks (L10)",
    "lineage": "Forks, handoffs and the lineage tree (L5.5, L6)",
    "policy": "The tenant's policy (admin)",
    "schedules": "Messages sent on a cron expression or an interval (docs/schedules.md)",
    "webhooks": "Signed webhooks: endpoints and their deliveries (admin; docs/webhooks.md)",
}

RETRY_AFTER = {
    "description": "seconds to wait before retrying",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
HEADERS = {
    "401": {"WWW-Authenticate": {"description": "`Bearer`", "required": True, "schema": {"type": "string"}}},
    "429": {"Retry-After": RETRY_AFTER},
    "503": {"Retry-After": RETRY_AFTER},
}

SSE_DESCRIPTION = """\
A stream of Server-Sent Events, UTF-8, one frame per event, frames separated by a blank line:

* a stored event: `id: <stream sequence>`, `event: <type>` (e.g. `run.completed`), `data: <EventEnvelope JSON>`;
  a client resumes after the last `id` with the `Last-Event-ID` header (or `?after=`).
* a live text delta (best effort, not stored, no `id`): `event: live.delta`, `data: <LiveDelta JSON>`.
* comments (`: connected`, `: keepalive` every 15 s) that carry nothing.

The `data` of each frame is one line of JSON: `EventEnvelope` (its `type` names the payload in `data`;
schemas/events.json describes every payload) or `LiveDelta`. The stream stays open until the client closes it;
a client too slow to read is cut off and resumes with `Last-Event-ID`."""

SSE_EXAMPLE = (
    ": connected\n\n"
    "id: 42\nevent: run.completed\n"
    'data: {"id":"evt_01kbq0v8y3f6x5n2w9c4h7j1ad","type":"run.completed","tenant":"acme",'
    '"thread":"thr_01kbq0v8y3f6x5n2w9c4h7j1ad","at":"2026-12-04T09:00:00Z","command_id":"cmd_01kbq0v8y3f6x5n2w9c4h7j1ad",'
    '"actor":"system","schema_version":1,"seq":42,"data":{"run_id":"run_01kbq0v8y3f6x5n2w9c4h7j1ad"}}\n\n'
    "event: live.delta\n"
    'data: {"run_id":"run_01kbq0v8y3f6x5n2w9c4h7j1ad","attempt_id":"att_01kbq0v8y3f6x5n2w9c4h7j1ad",'
    '"message_id":"msg_01kbq0v8y3f6x5n2w9c4h7j1ad","node_id":"node_01kbq0v8y3f6x5n2w9c4h7j1ad","text":"Hel"}\n\n'
)


def event_stream() -> dict[int, ResponseSpec]:
    """The success response of an SSE route (its payload schemas are added by ``finish``)."""
    return {
        200: ResponseSpec(
            data_container=str,
            media_type="text/event-stream",
            description=SSE_DESCRIPTION,
            generate_examples=False,
            examples=[Example(id="run", summary="a stored event and a live delta", value=SSE_EXAMPLE)],
        )
    }


def _event_schemas() -> dict[str, Any]:
    from treadle.core.envelope import Envelope
    from treadle.core.provider_events import LiveDelta

    class EventEnvelope(Envelope, kw_only=True):
        """A stored event (schemas/events.json has a schema per type): `type` names the payload in `data`."""

        data: dict[str, Any]

    _, schemas = msgspec.json.schema_components([EventEnvelope, LiveDelta], ref_template="#/components/schemas/{name}")
    return schemas


PARAMETERS = {
    "Idempotency-Key": "1..255 characters; a retry with the same key and body gets the first answer (kept 24 h), "
    "with another body a 422 `idempotency_key_reused`",
    "Last-Event-ID": "resume after this stream sequence (the `id:` of the last event read); ASCII digits",
    "status": "only requests with this status (e.g. `pending`)",
    "run_id": "only entries of this run",
}
PATH_IDS = {
    "thread": "thr",
    "run": "run",
    "node": "node",
    "request": "req",
    "plan": "plan",
    "handoff": "hoff",
    "webhook": "whk",
    "delivery": "dlv",
}


# Numbers in query strings and headers are strings of ASCII digits (params.number), read as such
DIGITS = {
    "min_seq",
    "X-Treadle-Min-Seq",
    "after",
    "limit",
    "offset",
    "max_bytes",
    "from",
    "to",
    "runs",
    "Last-Event-ID",
}


def _describe(parameter: dict[str, Any]) -> None:
    name = parameter["name"]
    schema = parameter.get("schema", {})
    variants = schema.get("oneOf", [])
    if not parameter.get("required") and len(variants) == 2 and {"type": "null"} in variants:
        # an optional parameter is absent, never null: Litestar's `str | None` says more than the wire can
        schema = parameter["schema"] = {**next(v for v in variants if v != {"type": "null"})}
    if name in DIGITS and schema.get("type") == "string":
        schema["pattern"] = "^[0-9]{1,19}$"
    if name == "Idempotency-Key" and schema.get("type") == "string":
        schema.update(minLength=1, maxLength=255)
    if parameter.get("description"):
        return
    if parameter["in"] == "path" and name.endswith("_id") and name[:-3] in PATH_IDS:
        parameter["description"] = f"a {name[:-3]} id: `{PATH_IDS[name[:-3]]}_` and 26 lower-case base32 characters"
    elif name in PARAMETERS:
        parameter["description"] = PARAMETERS[name]


_THR, _RUN, _MSG, _REQ = (f"{p}_01kbq0v8y3f6x5n2w9c4h7j1ad" for p in ("thr", "run", "msg", "req"))
# operation id -> (request body, success body): what a client sends and gets on the main operations
EXAMPLES: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
    "create_thread": (
        {"title": "Fix the login bug", "provider": "codex", "runtime_mode": "approval_required"},
        {"thread_id": _THR, "seq": 1},
    ),
    "send_message": (
        {"text": "Add a test for the login form", "mode": "auto"},
        {"thread_id": _THR, "message_id": _MSG, "run_id": _RUN, "disposition": "started", "seq": 2},
    ),
    "respond": (
        {"decision": "accept"},
        {"thread_id": _THR, "run_id": _RUN, "disposition": "resolved", "seq": 9},
    ),
    "interrupt_run": (
        {"allow_destructive": True},
        {"thread_id": _THR, "run_id": _RUN, "disposition": "interrupting", "seq": 12},
    ),
    "fork_thread": (
        {"source": {"type": "run", "id": _RUN}, "title": "Try another approach"},
        {"thread_id": "thr_01kbq0v8y3f6x5n2w9c4h7j1ae", "parent_thread_id": _THR, "seq": 14},
    ),
    "put_policy": ({"allowed_modes": ["approval_required", "full_access"], "max_threads": 100}, None),
}


def _examples(operation: dict[str, Any]) -> None:
    request, answer = EXAMPLES.get(operation.get("operationId", ""), (None, None))
    if request is not None:
        operation["requestBody"]["content"]["application/json"]["examples"] = {"example": {"value": request}}
    if answer is not None:
        success = next(r for status, r in sorted(operation["responses"].items()) if status.startswith("2"))
        success["content"]["application/json"]["examples"] = {"example": {"value": answer}}


def finish(document: dict[str, Any]) -> dict[str, Any]:
    """What Litestar cannot say through a route's decorator: the headers sent with a status, the schemas
    of the SSE frames' ``data``, the parameters' meaning (path ids, shared headers)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_event_schemas())
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            operation.setdefault("description", operation.get("summary", ""))
            _examples(operation)
            for parameter in operation.get("parameters", []):
                _describe(parameter)
            for status, response in operation["responses"].items():
                if status in HEADERS:
                    response.setdefault("headers", {}).update(HEADERS[status])
                for content in response.get("content", {}).values():
                    for example in content.get("examples", {}).values():
                        example.pop("id", None)  # Litestar's key for the example, not a field of the spec's
                stream = response.get("content", {}).get("text/event-stream")
                if stream is not None:
                    stream["schema"] = {
                        "type": "string",
                        "description": "SSE frames; each `data:` line is an EventEnvelope or a LiveDelta",
                        "x-event-data": {
                            "oneOf": [
                                {"$ref": "#/components/schemas/EventEnvelope"},
                                {"$ref": "#/components/schemas/LiveDelta"},
                            ]
                        },
                    }
    return document


class _FinishedJson(JsonRenderPlugin):
    """Serves the finished document (rendered once, like Litestar's own)."""

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if getattr(self, "_bytes", None) is None:
            self._bytes = self.render_json(request, finish(msgspec.json.decode(msgspec.json.encode(openapi_schema))))
        return self._bytes


def config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Treadle",
        version="1.0.0",
        description="Orchestration backend for hosted coding agents. Every /v1 operation takes a bearer token; "
        'every failure is `{"error": {code, message, details}}` with the codes each response lists.',
        contact=Contact(name="Treadle"),
        path="/schema",
        render_plugins=[_FinishedJson(path=["/openapi.json"])],
        security=[{"bearer": []}],
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(
                    type="http", scheme="bearer", description="an API token (`treadle tokens create`)"
                )
            }
        ),
        tags=[Tag(name=name, description=text) for name, text in sorted(TAGS.items())],
        operation_id_creator=lambda handler, method, path: handler.handler_name,
        use_handler_docstrings=False,
    )


def document(app: Any) -> dict[str, Any]:
    """The finished document of ``app`` (a Litestar app made by ``create_app``)."""
    return finish(app.openapi_schema.to_schema())
