"""Schemathesis against the OpenAPI document a running gateway serves: schema-valid and schema-violating
requests to every operation, bounded. No request may get a 5xx, and every response is what the document says:
a documented status, content type and headers, a body conforming to the schema, and for a failure the one
error shape with a code the document lists for that operation and status, without a stack trace."""

from __future__ import annotations

import asyncio
import collections

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation.modes import GenerationMode

from tests.support.api import make_api

pytestmark = pytest.mark.e2e

EXAMPLES = 60  # per operation and generation mode: ~3,500 requests over the 29 operations


def documented_error_codes_without_traces(ctx, response, case) -> bool | None:
    text = response.text or ""
    assert "Traceback (most recent call last)" not in text and 'File "/' not in text, text[:500]
    if response.status_code >= 400:
        error = response.json().get("error")
        assert isinstance(error, dict) and {"code", "message", "details"} <= error.keys(), text[:500]
        documented = case.operation.definition.raw["responses"].get(str(response.status_code), {})
        codes = documented.get("content", {}).get("application/json", {}).get("examples", {})
        assert error["code"] in codes, (
            f"{case.operation.label} answered {response.status_code} {error['code']!r}; the document lists {sorted(codes)}"
        )
    return None


CHECKS = dict(
    checks=[
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_headers_conformance,
        schemathesis.checks.response_schema_conformance,
    ],
    additional_checks=[schemathesis.check(documented_error_codes_without_traces)],
)


def fuzz(document: dict, base_url: str, token: str) -> tuple[collections.Counter, list[str]]:
    """Run every operation in both modes; returns the status codes seen and the failures (one per operation
    and mode, shrunk by hypothesis)."""
    statuses: collections.Counter = collections.Counter()
    failures: list[str] = []
    for result in schemathesis.openapi.from_dict(document).get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def one(case) -> None:
                response = case.call(base_url=base_url, headers={"Authorization": token}, timeout=15)
                statuses[response.status_code] += 1
                case.validate_response(response, **CHECKS)

            try:
                one()
            except Unsatisfiable:  # no schema-violating value exists (a free-form string path parameter)
                continue
            except Exception as exc:  # hypothesis re-raises the shrunk failure of this operation
                failures.append(f"{operation.label} ({mode}): {exc}")
    return statuses, failures


@pytest.mark.timeout(400)  # about 130 s alone on 2 cores, more while other tests share them
async def test_every_response_is_what_the_document_says(stack, stack_nc):
    api = await make_api(stack, stack_nc, "schemathesis")
    try:
        async with httpx.AsyncClient() as http:
            document = (await http.get(f"{stack.api_url}/schema/openapi.json")).json()
        token = api.headers["Authorization"]
        # In a thread: the event loop keeps reading the workers' output meanwhile.
        statuses, failures = await asyncio.to_thread(fuzz, document, stack.api_url, token)
    finally:
        await api.close()
    print(f"\nschemathesis: {sum(statuses.values())} requests, by status {dict(sorted(statuses.items()))}")
    assert not failures, "\n\n".join(failures)
    assert not any(status >= 500 for status in statuses)
