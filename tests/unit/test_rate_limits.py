"""Issue 9, item 4: per-token rate limits answer 429 with Retry-After, per token, and refill over time; issue 36:
on every route that takes a credential or a sign-in."""

from __future__ import annotations

from litestar import Litestar, get, post
from litestar.handlers import asgi
from litestar.middleware import DefineMiddleware
from litestar.testing import AsyncTestClient
from litestar.types import Receive, Scope, Send

from treadle.gateway.limits import RateLimitMiddleware, TokenBuckets


class KnownTokens:
    """The one method the limiter asks of the token store: who a bearer token is, if anyone."""

    def __init__(self, *known: str) -> None:
        self.known = set(known)

    async def resolve(self, token: str):
        return token if token in self.known else None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_its_burst_then_says_how_long_to_wait_and_refills():
    clock = Clock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == 0.5
    assert buckets.take("b") == 0.0  # another token has its own bucket
    clock.now = 0.5
    assert buckets.take("a") == 0.0


async def test_the_api_answers_429_with_retry_after_per_token():
    @get("/v1/ping")
    async def ping() -> dict:
        return {"ok": True}

    @get("/healthz")
    async def healthz() -> dict:
        return {"ok": True}

    app = Litestar([ping, healthz], middleware=[DefineMiddleware(RateLimitMiddleware, buckets=TokenBuckets(0.1, 2))])
    app.state.tokens = KnownTokens("alice", "bob")
    async with AsyncTestClient(app) as client:
        alice = {"Authorization": "Bearer alice"}
        assert [(await client.get("/v1/ping", headers=alice)).status_code for _ in range(2)] == [200, 200]
        limited = await client.get("/v1/ping", headers=alice)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "10"
        assert limited.json()["error"]["code"] == "rate_limited"
        assert (await client.get("/v1/ping", headers={"Authorization": "Bearer bob"})).status_code == 200
        assert [(await client.get("/healthz", headers=alice)).status_code for _ in range(5)] == [200] * 5


async def test_garbage_authorization_headers_share_their_address_bucket_and_mint_none():
    @get("/v1/ping")
    async def ping() -> dict:
        return {"ok": True}

    buckets = TokenBuckets(0.1, 3)
    app = Litestar([ping], middleware=[DefineMiddleware(RateLimitMiddleware, buckets=buckets)])
    app.state.tokens = KnownTokens("alice")
    async with AsyncTestClient(app) as client:
        garbage = [{"Authorization": f"Bearer junk{i}"} for i in range(5)] + [{"Authorization": "Basic YTpi"}, {}]
        statuses = [(await client.get("/v1/ping", headers=h)).status_code for h in garbage]
        assert statuses == [200, 200, 200, 429, 429, 429, 429]  # one bucket for the address, however they vary
        assert (await client.get("/v1/ping", headers={"Authorization": "Bearer alice"})).status_code == 200
    assert len(buckets._buckets) == 2  # the address and alice's token id: garbage minted nothing


async def test_issue36_every_route_taking_a_credential_or_a_sign_in_is_limited():
    """``/mcp`` (a session's credential keyed by its digest, unknown ones by the address) and the console's
    sign-in (its token is in the body: always the address), as ``/v1/`` is."""

    @asgi("/mcp", is_mount=True, copy_scope=True)
    async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    @post("/console/session", status_code=401)
    async def sign_in() -> dict:
        return {"error": "unauthorized"}

    app = Litestar([mcp, sign_in], middleware=[DefineMiddleware(RateLimitMiddleware, buckets=TokenBuckets(0.1, 2))])
    app.state.tokens = KnownTokens("alice")
    app.state.session_credentials = KnownTokens("trs_live", "trs_other")
    async with AsyncTestClient(app) as client:

        async def statuses(path: str, tokens: list[str]) -> list[int]:
            heads = [{"Authorization": f"Bearer {t}"} for t in tokens]
            return [(await client.post(path, headers=h, json={"token": "x"})).status_code for h in heads]

        assert await statuses("/mcp", ["trs_live"] * 3) == [200, 200, 429]
        assert await statuses("/mcp", ["trs_other", "alice"]) == [200, 200]  # each credential its own bucket
        assert await statuses("/mcp", [f"trs_guess{i}" for i in range(3)]) == [200, 200, 429]  # the address's
        limited = await client.post("/console/session", json={"token": "wrong"})
        assert limited.status_code == 429 and limited.headers["retry-after"] == "10"
        assert limited.json()["error"]["code"] == "rate_limited"
