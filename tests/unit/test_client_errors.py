"""The SDK's errors: each status the API answers with is its own ApiError subclass, carrying the API's code,
message and details; a body that is not the API's error shape still gives a typed error."""

from __future__ import annotations

import httpx
import pytest

from treadle.client import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    Unprocessable,
    Unreachable,
)

ERROR = {"error": {"code": "some_code", "message": "what happened", "details": {"limit": 3}}}


@pytest.mark.parametrize(
    "status, kind",
    [
        (400, BadRequest),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, PayloadTooLarge),
        (422, Unprocessable),
        (429, RateLimited),
        (500, ServerError),
        (502, Unavailable),
        (503, Unavailable),
        (504, Unavailable),
        (418, ApiError),
    ],
)
def test_an_error_answer_is_the_class_of_its_status_with_the_apis_code_message_and_details(status, kind):
    error = ApiError.from_response(httpx.Response(status, json=ERROR))
    assert type(error) is kind and isinstance(error, ApiError)
    assert (error.status, error.code, error.message, error.details) == (
        status,
        "some_code",
        "what happened",
        {"limit": 3},
    )
    assert error.retryable == (status in (502, 503, 504))


def test_a_body_not_in_the_apis_shape_keeps_its_start_as_the_message():
    error = ApiError.from_response(httpx.Response(502, text="<html>Bad Gateway</html>" + "x" * 500))
    assert type(error) is Unavailable and error.code == "http_502" and error.message.startswith("<html>Bad Gateway")
    assert len(error.message) == 200 and error.retryable


def test_a_gateway_that_does_not_answer_is_unreachable_and_retryable():
    error = Unreachable(0, "unreachable", "cannot reach http://127.0.0.1:1")
    assert (
        isinstance(error, ApiError) and error.retryable and str(error) == "unreachable: cannot reach http://127.0.0.1:1"
    )
