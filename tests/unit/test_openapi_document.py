"""The OpenAPI document a client generator builds on (issue 19): every /v1 operation named after its handler,
tagged, under the bearer scheme, with its failures in the one error shape and the headers sent with them; and
every error code the code can raise is documented on some operation (the e2e tests check each answer's code is
among those its operation lists)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from treadle.gateway.app import create_app
from treadle.gateway.mcp.errors import CODES as MCP_CODES
from treadle.gateway.openapi import TAGS, document

ROOT = Path(__file__).resolve().parents[2]
# Where the codes an HTTP answer can carry are raised: the gateway, the coordinator and the domain it runs,
# the checkpoint service (its failure codes reach the diff routes).
SOURCES = ["services/treadle/gateway", "services/treadle/coordinator", "libs/treadle/core", "libs/treadle/checkpoints"]


@pytest.fixture(scope="module")
def doc() -> dict:
    return document(create_app())


def operations(doc: dict):
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def codes_raised() -> dict[str, str]:
    """Every error code literal in SOURCES: ``code="…"`` arguments, ``ApiError(status, "…")``,
    ``CheckpointError("…")`` (code -> a file raising it)."""
    found: dict[str, str] = {}
    for root in SOURCES:
        for file in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                literals = [k.value for k in node.keywords if k.arg == "code"]
                if name == "ApiError" and len(node.args) >= 2:
                    literals.append(node.args[1])
                if name == "CheckpointError" and node.args:
                    literals.append(node.args[0])
                for literal in literals:
                    if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                        found.setdefault(literal.value, str(file.relative_to(ROOT)))
    return found


def test_every_operation_is_named_after_its_handler_and_tagged(doc):
    app = create_app()
    handlers = {
        (method.lower(), route.path_format): handler.handler_name
        for route in app.routes
        for method, (handler, _) in getattr(route, "route_handler_map", {}).items()
    }
    ids = []
    for label, operation in operations(doc):
        method, path = label.split(" ", 1)
        assert operation["operationId"] == handlers[(method.lower(), path)], label
        assert re.fullmatch(r"[a-z][a-z0-9_]*", operation["operationId"]), label
        assert operation.get("tags") and set(operation["tags"]) <= TAGS.keys(), label
        ids.append(operation["operationId"])
    assert len(ids) == len(set(ids))
    assert {"create_thread", "list_threads", "get_thread", "send_message", "get_run", "stream_events"} <= set(ids)


def test_every_operation_takes_the_bearer_token(doc):
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert doc["security"] == [{"bearer": []}]
    for label, operation in operations(doc):
        assert operation.get("security", doc["security"]) == [{"bearer": []}], label


def test_every_failure_is_the_one_error_shape_with_its_codes_and_headers(doc):
    assert doc["components"]["schemas"]["ErrorResponse"]["required"] == ["error"]
    for label, operation in operations(doc):
        failures = {status: r for status, r in operation["responses"].items() if status >= "400"}
        assert {"401", "429", "500", "503"} <= failures.keys(), label
        for status, response in failures.items():
            content = response["content"]["application/json"]
            assert content["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}, (label, status)
            assert content["examples"], (label, status)  # one per code: the codes this status carries
            for code, example in content["examples"].items():
                assert example["value"]["error"]["code"] == code and f"`{code}`" in response["description"]
        assert failures["401"]["headers"]["WWW-Authenticate"]["required"] is True, label
        for status in ("429", "503"):
            assert failures[status]["headers"]["Retry-After"]["required"] is True, (label, status)


def test_every_error_code_the_code_raises_is_documented(doc):
    documented = {
        code
        for _, operation in operations(doc)
        for status, response in operation["responses"].items()
        if status >= "400"
        for code in response["content"]["application/json"]["examples"]
    } | set(MCP_CODES)  # the codes only the MCP tools answer, documented in their schemas
    missing = {code: where for code, where in codes_raised().items() if code not in documented}
    assert not missing, f"error codes raised but documented on no operation: {missing}"


def test_the_event_stream_is_text_event_stream_with_its_frames_described(doc):
    operation = doc["paths"]["/v1/threads/{thread_id}/events"]["get"]
    ok = operation["responses"]["200"]["content"]
    assert list(ok) == ["text/event-stream"]
    refs = [s["$ref"].rsplit("/", 1)[1] for s in ok["text/event-stream"]["schema"]["x-event-data"]["oneOf"]]
    assert refs == ["EventEnvelope", "LiveDelta"] and all(r in doc["components"]["schemas"] for r in refs)
    assert "id: " in ok["text/event-stream"]["examples"]["run"]["value"]


@pytest.mark.parametrize("status,code", [(503, "busy"), (503, "unavailable"), (429, "quota_exceeded")])
def test_a_retryable_failure_always_says_when_to_retry(status, code):
    """The coordinator's 503 relayed after the command's deadline once went out without Retry-After."""
    from treadle.gateway.errors import ApiError, on_api_error

    response = on_api_error(None, ApiError(status, code, "retry"))  # it never reads the request
    assert response.status_code == status and response.headers["Retry-After"] == "1"
