"""Console sign-in over plain HTTP: a token becomes an HttpOnly, SameSite=Strict cookie; writes with the cookie
need the CSRF token and a same-origin request; forged, expired, signed-out and other tenants' sessions get a
typed error and change nothing. Bearer clients are unaffected."""

from __future__ import annotations

import json
import re
import time

import msgspec

from tests.support.api import make_api
from tests.support.helpers import wait_for
from treadle.gateway import sessions
from treadle.ops.tokens import digest
from treadle.providers.registry import ADAPTERS, offered

COOKIE = sessions.COOKIE


def cookie(sid: str) -> dict[str, str]:
    """The session cookie as the browser sends it (per-request cookie jars are deprecated in httpx)."""
    return {"Cookie": f"{COOKIE}={sid}"}


async def sign_in(http, token: str) -> tuple[str, str]:
    r = await http.post("/console/session", json={"token": token})
    assert r.status_code == 201, r.text
    return r.cookies[COOKIE], r.json()["csrf_token"]


async def test_sign_in_sets_an_httponly_strict_cookie_and_answers_for_the_tenant(http, api):
    r = await http.post("/console/session", json={"token": api.token})
    assert r.status_code == 201, r.text
    set_cookie = r.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "path=/" in set_cookie
    assert "secure" not in set_cookie  # plain http here: a Secure cookie would never come back
    assert api.token not in r.headers["set-cookie"] and api.token not in r.text
    body = r.json()
    assert (body["tenant"], body["user"]) == (api.tenant, "alice") and len(body["csrf_token"]) == 64
    thread = await api.create_thread(title="mine")
    r = await http.get(f"/v1/threads/{thread}", headers=cookie(r.cookies[COOKIE]))
    assert r.status_code == 200 and r.json()["thread"]["title"] == "mine"


async def test_a_wrong_token_or_another_site_gets_no_session(http, api):
    r = await http.post("/console/session", json={"token": "trd_" + "x" * 43})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert COOKIE not in r.cookies
    r = await http.post("/console/session", json={"token": "t" * 10_000})
    assert r.status_code == 401 and COOKIE not in r.cookies
    r = await http.post("/console/session", json={"token": 5})
    assert r.status_code == 400
    for site in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):  # login CSRF
        r = await http.post("/console/session", json={"token": api.token}, headers=site)
        assert r.status_code == 403 and r.json()["error"]["details"] == {"csrf": "site"}
        assert COOKIE not in r.cookies


async def test_another_tenants_session_sees_none_of_its_threads(http, api, stack, stack_nc, tenant):
    thread = await api.create_thread(title="private")
    other = await make_api(stack, stack_nc, tenant + "x")
    try:
        sid, csrf = await sign_in(http, other.token)
        r = await http.get(f"/v1/threads/{thread}", headers=cookie(sid))
        assert r.status_code == 404 and r.json()["error"]["code"] == "thread_not_found"
        r = await http.post(
            f"/v1/threads/{thread}/messages",
            json={"text": "hi"},
            headers={**cookie(sid), "X-Treadle-CSRF": csrf},
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "thread_not_found"
        r = await http.get(f"/v1/threads/{thread}/events", headers=cookie(sid))
        assert r.status_code == 404
        assert thread not in [t["id"] for t in (await http.get("/v1/threads", headers=cookie(sid))).json()["items"]]
    finally:
        await other.close()
    assert (await api.thread(thread))["messages"] == []


async def test_a_write_without_the_csrf_token_or_from_another_site_is_refused(http, api):
    sid, csrf = await sign_in(http, api.token)
    refused = [
        {},  # no CSRF token
        {"X-Treadle-CSRF": "0" * 64},  # a wrong one
        {"X-Treadle-CSRF": csrf, "Origin": "http://evil.example"},  # the right one, from another site's page
        {"X-Treadle-CSRF": csrf, "Sec-Fetch-Site": "cross-site"},
    ]
    for headers in refused:
        r = await http.post("/v1/threads", json={"title": "forged"}, headers={**cookie(sid), **headers})
        assert r.status_code == 403, (headers, r.text)
        assert r.json()["error"]["code"] == "forbidden" and r.json()["error"]["details"]["csrf"] in ("token", "site")
    r = await http.delete("/console/session", headers=cookie(sid))  # signing out is a write too
    assert r.status_code == 403
    r = await http.post("/v1/threads", json={"title": "real"}, headers={**cookie(sid), "X-Treadle-CSRF": csrf})
    assert r.status_code == 201, r.text

    real = r.json()["thread_id"]

    async def listed() -> list[dict] | None:  # the tenant's list is projected: it shows a new thread soon
        r = await http.get("/v1/threads", params={"limit": "200"}, headers=cookie(sid))
        items = r.json()["items"]
        return items if real in {t["id"] for t in items} else None

    # The list is projected in the log's order: once the thread made after the refused writes is listed, a
    # thread any of them had made would be listed too (a count taken before could miss threads still projecting).
    items = await wait_for(listed, what="the real thread in the tenant's list")
    assert "forged" not in {t["title"] for t in items}


async def test_forged_expired_and_signed_out_cookies_are_refused(http, api, stack_nc):
    sid, csrf = await sign_in(http, api.token)
    forged = ["A" * 43, "not a session", sid[:-1] + ("A" if sid[-1] != "A" else "B"), "x" * 5000]
    for value in forged:
        r = await http.get("/v1/threads", headers=cookie(value))
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", value[:50]
    # an expired record (the bucket's TTL removes it later; the record's own expiry counts first)
    expired = "E" * 43
    kv = await stack_nc.jetstream().key_value(sessions.BUCKET)
    record = sessions.WebSession(token_digest=digest(api.token), expires_at=time.time() - 1)
    await kv.put(digest(expired), msgspec.json.encode(record))
    r = await http.get("/v1/threads", headers=cookie(expired))
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"]
    r = await http.post("/v1/threads", json={}, headers={**cookie(expired), "X-Treadle-CSRF": csrf})
    assert r.status_code == 401
    # signing out ends the session on the server, not only in the browser
    r = await http.delete("/console/session", headers={**cookie(sid), "X-Treadle-CSRF": csrf})
    assert r.status_code == 200 and "max-age=0" in r.headers["set-cookie"].lower()
    r = await http.get("/v1/threads", headers=cookie(sid))
    assert r.status_code == 401


async def test_bearer_clients_need_no_csrf_token_and_a_cookie_streams_events(http, api):
    sid, _ = await sign_in(http, api.token)
    r = await http.post("/v1/threads", json={"title": "api"}, headers={**api.headers, **cookie("A" * 43)})
    assert r.status_code == 201, r.text  # the Authorization header decides; the cookie is not looked at
    thread = r.json()["thread_id"]
    async with http.stream("GET", f"/v1/threads/{thread}/events", headers=cookie(sid)) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        async for line in stream.aiter_lines():
            if line.startswith("event: thread.created"):
                break


async def test_the_page_is_served_with_a_strict_content_security_policy(http):
    r = await http.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert "http" not in r.text.replace("http-equiv", "")  # every asset from this origin: no CDN
    for asset in ("app.js", "api.js", "thread.js", "console.css", "marked.esm.js", "purify.es.js"):
        r = await http.get(f"/console/static/{asset}")
        assert r.status_code == 200
        if asset.endswith(".js"):  # module scripts need a script type, and nothing they import is remote
            assert "javascript" in r.headers["content-type"]
            assert not re.search(r"""import[^;]*from\s*["']https?:""", r.text)


async def test_the_session_lists_the_providers_the_composer_offers(http, api):
    sid, _ = await sign_in(http, api.token)
    r = await http.get("/console/session", headers=cookie(sid))
    assert r.status_code == 200
    assert r.json()["providers"] == list(ADAPTERS)  # no ACP agent is configured on this stack


def test_the_offered_providers_include_the_configured_acp_agents(monkeypatch):
    """The composer offers a deployment's ACP agents by the name a caller uses (acp-<name>), as the MCP
    capabilities tool lists them; a name the registry would refuse is not offered."""
    agents = {"mine": {"preset": "codex-acp"}, "Bad Name": {"preset": "codex-acp"}}
    monkeypatch.setenv("TREADLE_ACP_AGENTS", json.dumps(agents))
    assert offered() == [*ADAPTERS, "acp-mine"]
