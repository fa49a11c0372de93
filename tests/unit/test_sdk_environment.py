"""``Treadle()`` and ``AsyncTreadle()`` without a URL or token read TREADLE_API_URL and TREADLE_TOKEN; an argument
wins over the variable, and a missing or malformed value is a typed error before any request is made."""

from __future__ import annotations

import httpx
import pytest

from treadle.client import AsyncTreadle, ClientConfigError, Treadle
from treadle.client.settings import resolve


def _seen(requests: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"items": [], "next_cursor": None, "seq": None})

    return httpx.MockTransport(answer)


def test_the_sync_client_takes_its_gateway_and_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_API_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("TREADLE_TOKEN", "trd_from_env")
    requests: list[httpx.Request] = []
    with Treadle(transport=_seen(requests)) as client:
        assert client.base_url == "http://127.0.0.1:9"
        client.list_threads()
    assert str(requests[0].url).startswith("http://127.0.0.1:9/v1/threads")
    assert requests[0].headers["authorization"] == "Bearer trd_from_env"


async def test_the_async_client_takes_them_too_and_an_argument_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TREADLE_TOKEN", "trd_from_env")
    requests: list[httpx.Request] = []
    async with AsyncTreadle(token="trd_given", transport=_seen(requests)) as client:
        await client.list_threads()
    assert requests[0].headers["authorization"] == "Bearer trd_given"
    assert requests[0].url.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "no gateway URL"),
        ({"TREADLE_API_URL": "http://127.0.0.1:9"}, "no API token"),
        ({"TREADLE_API_URL": "file:///etc/passwd", "TREADLE_TOKEN": "t"}, "TREADLE_API_URL must be an http(s) URL"),
        ({"TREADLE_API_URL": "http://", "TREADLE_TOKEN": "t"}, "must be an http(s) URL with a host"),
        ({"TREADLE_API_URL": "http://127.0.0.1:9", "TREADLE_TOKEN": "t\r\nX-Injected: 1"}, "TREADLE_TOKEN holds"),
        ({"TREADLE_API_URL": "http://127.0.0.1:9", "TREADLE_TOKEN": "a b"}, "TREADLE_TOKEN holds"),
    ],
    ids=["no url", "no token", "not http", "no host", "header injection", "space"],
)
def test_a_missing_or_malformed_value_is_a_typed_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ClientConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(None, None, environ)


def test_a_bad_environment_stops_the_client_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_API_URL", "ftp://127.0.0.1:9")
    monkeypatch.setenv("TREADLE_TOKEN", "t")
    requests: list[httpx.Request] = []
    with pytest.raises(ClientConfigError):
        Treadle(transport=_seen(requests))
    assert requests == []
