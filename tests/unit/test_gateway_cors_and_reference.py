"""CORS is off unless origins are configured, and then answers only those (never with credentials); an origin
that is not exactly scheme://host[:port] stops the gateway's settings. The interactive API reference is the
gateway's own page under the console's Content-Security-Policy. The app is driven in-process over ASGI: neither
preflights nor the page touch NATS or Redis."""

from __future__ import annotations

import re

import httpx
import pytest
from pydantic import ValidationError

from treadle.gateway.app import create_app
from treadle.gateway.console import CSP
from treadle.runtime.settings import GatewaySettings

ALLOWED = "https://app.example"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}


def _client(origins: tuple[str, ...] = ()) -> httpx.AsyncClient:
    app = create_app(own=GatewaySettings(cors_origins=origins))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


async def test_no_origin_is_allowed_by_default() -> None:
    async with _client() as client:
        preflight = await client.options("/v1/threads", headers={"Origin": ALLOWED, **PREFLIGHT})
        plain = await client.get("/schema/openapi.json", headers={"Origin": ALLOWED})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in plain.headers


async def test_a_configured_origin_passes_its_preflight_without_credentials() -> None:
    async with _client((ALLOWED,)) as client:
        preflight = await client.options("/v1/threads", headers={"Origin": ALLOWED, **PREFLIGHT})
        plain = await client.get("/schema/openapi.json", headers={"Origin": ALLOWED})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in preflight.headers
    assert plain.headers["access-control-allow-origin"] == ALLOWED
    assert "retry-after" in plain.headers["access-control-expose-headers"].lower()


@pytest.mark.parametrize("origin", ["https://evil.example", "https://app.example.evil.example", "null"])
async def test_another_origin_is_refused_its_preflight(origin: str) -> None:
    async with _client((ALLOWED,)) as client:
        preflight = await client.options("/v1/threads", headers={"Origin": origin, **PREFLIGHT})
        plain = await client.get("/schema/openapi.json", headers={"Origin": origin})
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in plain.headers


@pytest.mark.parametrize(
    "origin",
    ["*", "null", "https://app.example/", "https://app.example/path", "https://user@app.example", "HTTPS://App.example"]
    + ["ftp://app.example", "app.example", "https://app.example:99999", "https://app.example?x=1"],
)
def test_an_origin_that_is_not_exact_is_refused_by_the_settings(origin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="CORS origin"):
        GatewaySettings(cors_origins=(origin,))
    monkeypatch.setenv("TREADLE_GATEWAY_CORS_ORIGINS", f'["{ALLOWED}", "{origin}"]')
    with pytest.raises(ValidationError, match="CORS origin"):
        GatewaySettings()


def test_origins_come_from_the_environment_as_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_GATEWAY_CORS_ORIGINS", '["https://app.example", "http://127.0.0.1:5173"]')
    assert GatewaySettings().cors_origins == ("https://app.example", "http://127.0.0.1:5173")


async def test_the_api_reference_is_served_from_this_origin_under_the_csp() -> None:
    async with _client() as client:
        page = await client.get("/schema/reference")
        assets = [
            await client.get(src) for src in re.findall(r'(?:src|href)="(/schema/reference/static/[^"]+)"', page.text)
        ]
        document = await client.get("/schema/openapi.json")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert len(assets) == 2 and all(asset.status_code == 200 for asset in assets)
    assert re.search(r"<script(?![^>]*\bsrc=)", page.text) is None  # no inline script
    assert "http://" not in page.text and "https://" not in page.text  # nothing from another origin
    script = next(asset.text for asset in assets if asset.headers["content-type"].startswith("text/javascript"))
    assert "innerHTML" not in script and 'fetch("/schema/openapi.json")' in script
    assert document.status_code == 200 and "/schema/reference" not in document.text
