"""Issue 9, item 4: hostile HTTP input gets a typed 4xx in the one error shape, never a 5xx or a trace."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.e2e


def _error(response: httpx.Response) -> dict:
    assert "Traceback" not in response.text
    return response.json()["error"]


async def test_oversized_malformed_and_unexpected_bodies_get_typed_4xx(api):
    cases = {
        "too large": (dict(content=b'{"title": "' + b"x" * (1024 * 1024 + 10) + b'"}'), 413, "too_large"),
        "deeply nested": (dict(content=b'{"title": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 400, None),
        "invalid utf-8": (dict(content=b'{"title": "\xff\xfe"}'), 400, None),
        "not json": (dict(content=b"title=x"), 400, None),
        "unknown field": (dict(json={"title": "x", "owner": "root"}), 400, None),
        "wrong type": (dict(json={"title": 5}), 400, None),
        "huge integer": (dict(content=b'{"title": "x", "model": 1' + b"0" * 5000 + b"}"), 400, None),
        "unknown provider": (dict(json={"provider": "skynet"}), 400, None),
    }
    seen = {}
    for name, (kw, status, code) in cases.items():
        response = await api.request("POST", "/v1/threads", headers={"Content-Type": "application/json"}, **kw)
        seen[name] = (response.status_code, _error(response)["code"])
        assert response.status_code == status, (name, response.status_code, response.text[:300])
        if code:
            assert seen[name][1] == code
    print(json.dumps(seen, indent=1))


async def test_missing_or_malformed_credentials_and_ids_are_refused(api, stack):
    async with httpx.AsyncClient(base_url=stack.api_url) as anonymous:
        for headers in (
            {},
            {"Authorization": "Basic YTpi"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer " + "x" * 8000},
            {"Authorization": "Bearer trd_revoked"},
        ):
            response = await anonymous.get("/v1/threads", headers=headers)
            assert response.status_code == 401 and _error(response)["code"] == "unauthorized", response.text
            assert response.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/threads/thr_x.%3E", "/v1/threads/..%2F..%2Fetc", "/v1/runs/run_*", "/v1/threads/" + "a" * 500):
        response = await api.request("GET", path)
        assert response.status_code in (400, 404), (path, response.status_code)
        assert _error(response)["code"] in ("invalid_id", "not_found")
