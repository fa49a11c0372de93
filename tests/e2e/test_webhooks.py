"""Signed webhooks on a real stack (docs/webhooks.md), with a receiver on loopback that the operator's
allow-list opens: events arrive once, in order per thread, signed (checked with the SDK's verifier); a failing
receiver gets retries, then a dead letter that is replayed; private addresses are refused at registration; a
member and another tenant can neither see nor touch an endpoint."""

from __future__ import annotations

import asyncio
import itertools
from asyncio.subprocess import PIPE

import msgspec
import nats
import pytest

from tests.support.api import Api
from tests.support.helpers import quiet, wait_for
from tests.support.receiver import Receiver, answer
from tests.support.scripts import script, text
from treadle.cli.stack import Stack
from treadle.client.webhooks import verify
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

SETTINGS = {
    "TREADLE_WEBHOOKS_ALLOW_HOSTS": '["127.0.0.1/32"]',
    "TREADLE_WEBHOOKS_BACKOFF_BASE": "0.2",
    "TREADLE_WEBHOOKS_BACKOFF_MAX": "0.4",
    "TREADLE_WEBHOOKS_RETRY_FOR": "1.5",
    "TREADLE_WEBHOOKS_READ_TIMEOUT": "2",
    "TREADLE_WEBHOOKS_MAX_ENDPOINTS_PER_TENANT": "3",
}
_tenants = itertools.count(1)


@pytest.fixture(scope="module")
async def hooks_stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("hooks-stack"), env=SETTINGS, on_output=quiet)
    try:
        await s.start(timeout=180)
        yield s
    finally:
        await s.stop()


@pytest.fixture(scope="module")
async def nc(hooks_stack):
    conn = await nats.connect(hooks_stack.nats_url)
    yield conn
    await conn.close()


async def _client(stack: Stack, nc, tenant: str, role: str = "admin") -> Api:
    token = await TokenStore(nc.jetstream()).create(tenant, f"{role}-user", role)
    return Api(stack.api_url, token, tenant)


@pytest.fixture
async def admin(hooks_stack, nc):
    api = await _client(hooks_stack, nc, f"hooks{next(_tenants)}")
    yield api
    await api.close()


@pytest.fixture
async def receiver():
    r = await Receiver().start()
    yield r
    await r.stop()


async def _register(api: Api, url: str, events: list[str], **extra) -> dict:
    r = await api.request("POST", "/v1/webhooks", json={"url": url, "events": events, **extra})
    assert r.status_code == 201, r.text
    return r.json()


async def _deliveries(api: Api, hook: str, status: str | None = None) -> list[dict]:
    r = await api.request("GET", f"/v1/webhooks/{hook}/deliveries", params={"status": status} if status else {})
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def _run(api: Api, thread: str, words: str = "done") -> str:
    run_id = (await api.send(thread, "go", script=script(text(words))))["run_id"]
    await api.wait_run(run_id)
    return run_id


async def test_events_arrive_once_signed_and_in_order_per_thread(admin: Api, receiver: Receiver) -> None:
    made = await _register(admin, receiver.url(), ["thread.created", "run.completed"])
    secret, hook = made["secret"], made["webhook"]["id"]
    assert secret.startswith("whsec_")
    shown = (await admin.request("GET", f"/v1/webhooks/{hook}")).json()
    listed = (await admin.request("GET", "/v1/webhooks")).json()["items"]
    assert "secret" not in shown and [h["id"] for h in listed] == [hook] and secret not in str(listed)

    thread = await admin.create_thread(title="hooks")
    first, second = await _run(admin, thread, "one"), await _run(admin, thread, "two")
    got = await receiver.wait(3)
    bodies = []
    for request in got:
        verify(secret, request.headers["treadle-signature"], request.body)
        bodies.append(msgspec.json.decode(request.body))
    assert [b["type"] for b in bodies] == ["thread.created", "run.completed", "run.completed"]
    assert [b["data"].get("run_id") for b in bodies[1:]] == [first, second]
    assert all(b["thread_id"] == thread for b in bodies)
    assert [b["seq"] for b in bodies] == sorted(b["seq"] for b in bodies)
    assert [r.headers["treadle-delivery"] for r in got] == [b["delivery_id"] for b in bodies]

    records = await wait_for(lambda: _all_delivered(admin, hook, 3), timeout=10, what="three delivered records")
    assert {r["attempts"] for r in records} == {1}
    assert len(receiver.requests) == 3  # once each


async def test_L2_3_a_receiver_of_message_completed_gets_the_reply_a_run_end_carries(
    admin: Api, receiver: Receiver
) -> None:
    """A run's end may carry its turn's last message (``RunEnded.message``, no ``message.completed`` stored for
    it): the receiver still gets that message as a ``message.completed``, then the run's end, both signed."""
    made = await _register(admin, receiver.url(), ["message.completed", "run.completed"])
    thread = await admin.create_thread(title="carried")
    run_id = await _run(admin, thread, "the reply")
    got = await receiver.wait(2)
    bodies = [msgspec.json.decode(r.body) for r in got]
    for request in got:
        verify(made["secret"], request.headers["treadle-signature"], request.body)
    assert [b["type"] for b in bodies] == ["message.completed", "run.completed"]
    assert bodies[0]["data"]["text"] == "the reply" and bodies[0]["data"]["run_id"] == run_id
    assert bodies[0]["seq"] <= bodies[1]["seq"] and bodies[0]["delivery_id"] != bodies[1]["delivery_id"]
    await wait_for(lambda: _all_delivered(admin, made["webhook"]["id"], 2), timeout=10, what="two delivered records")


async def _all_delivered(api: Api, hook: str, count: int) -> list[dict] | None:
    records = await _deliveries(api, hook)
    return records if len(records) == count and all(r["status"] == "delivered" for r in records) else None


async def test_a_failing_receiver_is_retried_until_it_acknowledges(admin: Api, receiver: Receiver) -> None:
    receiver.answers = [answer(500, "Oops"), answer(200, "OK")]
    made = await _register(admin, receiver.url(), ["run.completed"])
    thread = await admin.create_thread()
    await _run(admin, thread)
    first, again = await receiver.wait(2)
    assert first.headers["treadle-delivery"] == again.headers["treadle-delivery"] and first.body == again.body
    verify(made["secret"], again.headers["treadle-signature"], again.body)
    (record,) = await wait_for(lambda: _all_delivered(admin, made["webhook"]["id"], 1), timeout=10, what="delivered")
    assert record["attempts"] == 2 and record["response_status"] == 200


async def test_a_receiver_down_past_the_bound_gets_a_dead_letter_then_a_replay(admin: Api, receiver: Receiver) -> None:
    port = receiver.port
    await receiver.stop()  # nothing listens: every attempt fails to connect
    made = await _register(admin, f"http://127.0.0.1:{port}/hook", ["run.completed"])
    hook = made["webhook"]["id"]
    thread = await admin.create_thread()
    await _run(admin, thread)

    async def dead() -> list[dict] | None:
        return await _deliveries(admin, hook, "failed") or None

    (letter,) = await wait_for(dead, timeout=20, what="a dead letter")
    assert letter["attempts"] >= 2 and "connect" in letter["error"]
    assert await _deliveries(admin, hook, "pending") == []

    back = await Receiver().start(port)
    try:
        r = await admin.request("POST", f"/v1/webhooks/{hook}/deliveries/{letter['id']}/replay")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "delivered" and r.json()["attempts"] == letter["attempts"] + 1
        (got,) = back.requests
        verify(made["secret"], got.headers["treadle-signature"], got.body)
        assert msgspec.json.decode(got.body)["type"] == "run.completed"
    finally:
        await back.stop()


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/hook",
        "http://[::1]:8080/hook",
        "http://[::ffff:10.0.0.1]/",
        "http://user:pw@127.0.0.1/",
        "ftp://127.0.0.1/",
    ],
)
async def test_a_private_or_odd_url_is_refused_at_registration(admin: Api, url: str) -> None:
    r = await admin.request("POST", "/v1/webhooks", json={"url": url, "events": ["run.completed"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_webhook", r.text
    assert (await admin.request("GET", "/v1/webhooks")).json()["items"] == []


async def test_bad_input_is_refused_and_nothing_is_stored(admin: Api, receiver: Receiver) -> None:
    for body in (
        {"url": receiver.url(), "events": ["no.such"]},
        {"url": receiver.url(), "events": []},
        {"url": receiver.url(), "events": ["run.completed"], "threads": ["not-a-thread"]},
        {"url": receiver.url(), "events": ["run.completed"], "secret": "short"},
        {"url": receiver.url(), "events": ["run.completed"], "unknown": 1},
    ):
        r = await admin.request("POST", "/v1/webhooks", json=body)
        assert r.status_code == 400, (body, r.text)
    assert (await admin.request("GET", "/v1/webhooks")).json()["items"] == []
    hook = (await _register(admin, receiver.url(), ["run.completed"]))["webhook"]["id"]
    for method, path, params, code in (
        ("GET", "/v1/webhooks/whk.>", {}, "invalid_id"),
        ("DELETE", "/v1/webhooks/thr_01kbq0v8y3f6x5n2w9c4h7j1ad", {}, "invalid_id"),
        ("POST", f"/v1/webhooks/{hook}/deliveries/dlv_x*/replay", {}, "invalid_id"),
        ("GET", f"/v1/webhooks/{hook}/deliveries", {"status": "lost"}, "invalid_webhook"),
        ("GET", f"/v1/webhooks/{hook}/deliveries", {"limit": "1e9"}, "invalid_parameter"),
    ):
        r = await admin.request(method, path, params=params)
        assert r.status_code == 400 and r.json()["error"]["code"] == code, (path, r.text)
    r = await admin.request("PATCH", f"/v1/webhooks/{hook}", json={"url": "http://169.254.169.254/"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_webhook"
    assert (await admin.request("GET", f"/v1/webhooks/{hook}")).json()["url"] == receiver.url()  # unchanged


async def test_another_tenant_and_a_member_can_neither_see_nor_touch_an_endpoint(
    hooks_stack, nc, admin: Api, receiver: Receiver
) -> None:
    made = await _register(admin, receiver.url(), ["run.completed"], secret="given-secret-0123456789")
    assert made["secret"] == "given-secret-0123456789"
    hook = made["webhook"]["id"]
    other = await _client(hooks_stack, nc, f"hooks{next(_tenants)}")
    member = await _client(hooks_stack, nc, admin.tenant, "member")
    try:
        assert (await other.request("GET", "/v1/webhooks")).json()["items"] == []
        for method, path in (
            ("GET", f"/v1/webhooks/{hook}"),
            ("PATCH", f"/v1/webhooks/{hook}"),
            ("DELETE", f"/v1/webhooks/{hook}"),
            ("GET", f"/v1/webhooks/{hook}/deliveries"),
            ("POST", f"/v1/webhooks/{hook}/deliveries/dlv_x/replay"),
        ):
            kw = {"json": {"enabled": False}} if method == "PATCH" else {}
            r = await other.request(method, path, **kw)
            assert r.status_code == 404 and r.json()["error"]["code"] == "webhook_not_found", (method, r.text)
            assert (await member.request(method, path, **kw)).status_code == 403
        assert (await admin.request("GET", f"/v1/webhooks/{hook}")).json()["enabled"] is True

        changed = await admin.request("PATCH", f"/v1/webhooks/{hook}", json={"enabled": False, "events": ["*"]})
        assert changed.status_code == 200 and changed.json()["events"] == ["*"] and "secret" not in changed.json()
        assert (await admin.request("DELETE", f"/v1/webhooks/{hook}")).json()["id"] == hook
        assert (await admin.request("GET", f"/v1/webhooks/{hook}")).status_code == 404
    finally:
        await other.close()
        await member.close()


async def test_a_tenant_past_its_endpoint_quota_is_refused(admin: Api, receiver: Receiver) -> None:
    for n in range(3):
        await _register(admin, receiver.url(f"/{n}"), ["run.completed"])
    r = await admin.request("POST", "/v1/webhooks", json={"url": receiver.url("/4"), "events": ["run.completed"]})
    assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded", r.text
    assert len((await admin.request("GET", "/v1/webhooks")).json()["items"]) == 3


async def test_the_sdk_and_the_cli_manage_endpoints_and_read_deliveries(
    hooks_stack, admin: Api, receiver: Receiver, tmp_path
) -> None:
    import json
    import os
    import sys
    from pathlib import Path

    from treadle.client import AsyncTreadle

    async with AsyncTreadle(hooks_stack.api_url, admin.token, timeout=30) as client:
        made = await client.create_webhook(receiver.url(), ["run.completed"], description="sdk")
        hook = made.webhook.id
        assert [w.id for w in (await client.list_webhooks()).items] == [hook]
        assert (await client.update_webhook(hook, description="changed")).description == "changed"
        thread = await admin.create_thread()
        await _run(admin, thread)
        (got,) = await receiver.wait(1)
        verify(made.secret, got.headers["treadle-signature"], got.body)
        (record,) = await wait_for(lambda: _all_delivered(admin, hook, 1), timeout=10, what="delivered")
        listed = (await client.list_deliveries(hook, status="delivered")).items
        assert [d.id for d in listed] == [record["id"]] and listed[0].event_type == "run.completed"
        again = await client.replay_delivery(hook, record["id"])
        assert again.status == "delivered" and again.attempts == 2 and len(receiver.requests) == 2

    treadle = Path(sys.executable).parent / "treadle"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    api = ["--api", hooks_stack.api_url, "--token", admin.token, "--output", "json"]

    async def cli(*args: str) -> dict:
        proc = await asyncio.create_subprocess_exec(
            str(treadle), "webhooks", *args, *api, cwd=tmp_path, env=clean, stdout=PIPE, stderr=PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return json.loads(out)

    assert (await cli("show", hook))["description"] == "changed"
    assert [d["id"] for d in (await cli("deliveries", hook))["items"]] == [record["id"]]
    assert (await cli("update", hook, "--disable"))["enabled"] is False
    created = await cli("create", receiver.url("/cli"), "--event", "run.failed", "--event", "request.opened")
    assert created["secret"].startswith("whsec_") and created["webhook"]["events"] == ["run.failed", "request.opened"]
    assert (await cli("delete", created["webhook"]["id"]))["id"] == created["webhook"]["id"]


async def test_a_delivery_cut_short_by_a_worker_crash_is_sent_again(
    hooks_stack, admin: Api, receiver: Receiver
) -> None:
    receiver.stall = True  # the first attempt is in flight when the worker dies
    made = await _register(admin, receiver.url(), ["run.completed"])
    thread = await admin.create_thread()
    await _run(admin, thread)
    await receiver.wait(1)
    restarts = hooks_stack.processes.restarts("webhooks")
    await hooks_stack.processes.kill("webhooks")
    receiver.stall = False
    await wait_for(lambda: hooks_stack.processes.restarts("webhooks") > restarts, timeout=20, what="webhooks back")
    first, again = await receiver.wait(2, timeout=25)
    assert first.headers["treadle-delivery"] == again.headers["treadle-delivery"]  # at least once, same id
    verify(made["secret"], again.headers["treadle-signature"], again.body)
    (record,) = await wait_for(lambda: _all_delivered(admin, made["webhook"]["id"], 1), timeout=10, what="delivered")
    assert record["status"] == "delivered"


async def test_a_redirect_at_delivery_is_not_followed_and_ends_in_a_dead_letter(admin: Api, receiver: Receiver) -> None:
    receiver.answers = [answer(307, "Temporary Redirect", "Location: http://169.254.169.254/latest/meta-data\r\n")]
    made = await _register(admin, receiver.url(), ["run.completed"])
    hook = made["webhook"]["id"]
    thread = await admin.create_thread()
    await _run(admin, thread)

    async def dead() -> list[dict] | None:
        return await _deliveries(admin, hook, "failed") or None

    (letter,) = await wait_for(dead, timeout=20, what="a dead letter")
    assert letter["response_status"] == 307 and "redirect" in letter["error"]
    assert len(receiver.requests) == letter["attempts"] and {r.path for r in receiver.requests} == {"/hook"}
