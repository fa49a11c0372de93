"""Issue 16, items 3 and 4, attacked over HTTP on a real stack with low limits: runtime modes a tenant may use,
roles, quotas on queues, threads, stored text, message size and event streams, and the rate limiter's keys.
Every refusal is typed and changes nothing: no event appended, no broker consumer opened."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
import uuid
from pathlib import Path

import httpx
import msgspec
import nats
import pytest

from tests.support.api import Api
from tests.support.helpers import wait_for
from tests.support.scripts import HANG, script
from treadle.cli.stack import Stack
from treadle.eventlog.log import EventLog
from treadle.ops.session_credentials import SessionCredentials
from treadle.ops.tokens import Principal, TokenStore, digest

pytestmark = pytest.mark.e2e

STREAMS_PER_TOKEN, STREAMS_PER_TENANT = 2, 3
LIMITS = {
    "TREADLE_GATEWAY_MAX_STREAMS_PER_TOKEN": str(STREAMS_PER_TOKEN),
    "TREADLE_GATEWAY_MAX_STREAMS_PER_TENANT": str(STREAMS_PER_TENANT),
    "TREADLE_GATEWAY_MAX_TEXT_CHARS": "30000",
    "TREADLE_GATEWAY_MAX_SCRIPT_BYTES": "10000",
    "TREADLE_GATEWAY_RATE_LIMIT": "20",
    "TREADLE_GATEWAY_RATE_BURST": "300",
    "TREADLE_COORDINATOR_MAX_THREAD_TEXT_BYTES": "50000",
}
_tenants = itertools.count(1)


def _quiet(name: str, line: str) -> None:
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


@pytest.fixture(scope="module")
async def limited_stack(tmp_path_factory):
    # Two coordinator replicas: the quotas they decide must hold whichever replica answers. Nine workers take
    # longer than six to come up on a busy machine: a longer wait for readiness than the default.
    s = Stack(tmp_path_factory.mktemp("limited-stack"), env=LIMITS, replicas=2, on_output=_quiet)
    try:
        await s.start(timeout=180)
        yield s
    finally:
        await s.stop()


@pytest.fixture(scope="module")
async def nc(limited_stack):
    conn = await nats.connect(limited_stack.nats_url)
    yield conn
    await conn.close()


class Tenant:
    """A tenant with a member and an admin, each an Api over its own token."""

    def __init__(self, stack, nc, name: str) -> None:
        self.stack, self.nc, self.name = stack, nc, name
        self.clients: list[Api] = []

    async def client(self, user: str, role: str = "member") -> Api:
        token = await TokenStore(self.nc.jetstream()).create(self.name, user, role)
        api = Api(self.stack.api_url, token, self.name)
        self.clients.append(api)
        return api


@pytest.fixture
async def tenant(limited_stack, nc):
    t = Tenant(limited_stack, nc, f"limited{next(_tenants)}")
    yield t
    for api in t.clients:
        await api.close()


def error(response: httpx.Response) -> dict:
    assert "Traceback" not in response.text
    return response.json()["error"]


async def thread_count(nc, tenant: str) -> int:
    info = await nc.jetstream().stream_info(
        "TREADLE_EVENTS", subjects_filter=f"treadle.evt.{tenant}.*.thread.created.*"
    )
    return len(info.state.subjects or {})


async def audit_records(nc, tenant: str) -> list[dict]:
    js = nc.jetstream()
    sub = await js.subscribe(f"treadle.audit.{tenant}.policy.updated", ordered_consumer=True)
    out = []
    with contextlib.suppress(nats.errors.TimeoutError):
        while True:
            out.append(json.loads((await sub.next_msg(timeout=0.5)).data))
            if len(out) >= 10:
                break
    await sub.unsubscribe()
    return out


# --- roles and policy ------------------------------------------------------------------------------


async def test_a_member_is_refused_every_admin_operation_and_an_admin_may_do_them(tenant, nc):
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    for method, body in (("GET", None), ("PUT", {"allowed_modes": ["full_access"]})):
        refused = await member.request(method, "/v1/policy", json=body)
        assert refused.status_code == 403, refused.text
        assert error(refused) == {
            "code": "forbidden",
            "message": error(refused)["message"],
            "details": {"role": "member", "needed": "admin"},
        }
    shown = await admin.request("GET", "/v1/policy")
    assert shown.status_code == 200 and shown.json()["allowed_modes"] == ["approval_required", "auto_accept_edits"]
    assert await audit_records(nc, tenant.name) == []  # the member's PUT changed nothing
    bad = await admin.request("PUT", "/v1/policy", json={"allowed_modes": ["root_shell"]})
    assert bad.status_code == 400, bad.text
    assert (await member.request("POST", "/v1/threads", json={})).status_code == 201  # members: threads


async def test_full_access_is_refused_by_default_allowed_after_an_admin_allows_it_and_audited(tenant, nc):
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    refused = await member.request("POST", "/v1/threads", json={"runtime_mode": "full_access"})
    assert refused.status_code == 403 and error(refused)["code"] == "mode_not_allowed", refused.text
    assert error(refused)["details"] == {
        "runtime_mode": "full_access",
        "allowed": ["approval_required", "auto_accept_edits"],
    }
    not_a_mode = await member.request("POST", "/v1/threads", json={"runtime_mode": "god_mode"})
    assert not_a_mode.status_code == 400 and error(not_a_mode)["code"] == "invalid_runtime_mode", not_a_mode.text
    assert await thread_count(nc, tenant.name) == 0

    allowed = await admin.request("PUT", "/v1/policy", json={"allowed_modes": ["approval_required", "full_access"]})
    assert allowed.status_code == 200 and allowed.json()["updated_by"] == "user:root", allowed.text
    [record] = await audit_records(nc, tenant.name)
    assert record["actor"] == "user:root" and record["details"]["allowed_modes"] == ["approval_required", "full_access"]
    thread = await member.create_thread(runtime_mode="full_access")
    run = await member.wait_run((await member.send(thread, "hi"))["run_id"])
    assert run["status"] == "completed"
    narrowed = await member.request("POST", "/v1/threads", json={"runtime_mode": "auto_accept_edits"})
    assert narrowed.status_code == 403  # the admin's list is the whole list


async def test_no_path_escalates_once_full_access_is_withdrawn(tenant, nc):
    """A message (with or without its own runtime_mode), a fork and a plan's implementation (as a run or as a
    thread) of a full_access thread are refused once the admin withdraws full_access; nothing is appended."""
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    await admin.request("PUT", "/v1/policy", json={"allowed_modes": ["approval_required", "full_access"]})
    thread = await member.create_thread(runtime_mode="full_access")
    sent = await member.send(thread, "plan it", script=script({"type": "plan", "text": "1. escalate"}))
    await member.wait_run(sent["run_id"])
    plan = next(p for p in (await member.thread(thread))["plans"] if p["kind"] == "proposed_plan")
    assert (await admin.request("PUT", "/v1/policy", json={})).status_code == 200  # back to the default

    log = EventLog(nc)
    before, threads = await log.last_seq(tenant.name, thread), await thread_count(nc, tenant.name)
    attempts = {
        "message": ("POST", f"/v1/threads/{thread}/messages", {"text": "go on"}),
        "fork": ("POST", f"/v1/threads/{thread}/fork", {"source": {"type": "run", "id": sent["run_id"]}}),
        "plan as run": ("POST", f"/v1/plans/{plan['id']}/implement", {"as": "run"}),
        "plan as thread": ("POST", f"/v1/plans/{plan['id']}/implement", {"as": "thread"}),
    }
    for name, (method, path, body) in attempts.items():
        refused = await member.request(method, path, json=body)
        assert refused.status_code == 403 and error(refused)["code"] == "mode_not_allowed", (name, refused.text)
    smuggled = await member.request(
        "POST", f"/v1/threads/{thread}/messages", json={"text": "x", "runtime_mode": "full_access"}
    )
    assert smuggled.status_code == 400 and error(smuggled)["code"] == "bad_request"  # messages carry no mode
    assert await log.last_seq(tenant.name, thread) == before
    assert await thread_count(nc, tenant.name) == threads


# --- quotas decided by the coordinator ------------------------------------------------------------------


async def test_L3_6_a_queue_flood_is_refused_past_the_limit_with_nothing_appended(tenant, nc):
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    assert (await admin.request("PUT", "/v1/policy", json={"max_queued_runs": 3})).status_code == 200
    thread = await member.create_thread()
    active = await member.send(thread, "hang", script=script(HANG))
    await member.wait_running(active["run_id"])
    for i in range(3):
        assert (await member.send(thread, f"q{i}", mode="queue_after_active"))["disposition"] == "queued"
    log = EventLog(nc)
    before = await log.last_seq(tenant.name, thread)
    flood = [
        await member.request(
            "POST", f"/v1/threads/{thread}/messages", json={"text": f"flood {i}", "mode": "queue_after_active"}
        )
        for i in range(20)
    ]
    assert {r.status_code for r in flood} == {429}
    assert error(flood[0]) == {
        "code": "quota_exceeded",
        "message": error(flood[0])["message"],
        "details": {"quota": "queued_runs_per_thread", "limit": 3, "current": 3},
    }
    assert flood[0].headers["retry-after"] == "1"
    assert await log.last_seq(tenant.name, thread) == before
    queue = (await member.request("GET", f"/v1/threads/{thread}/queue")).json()["queue"]
    assert [q["text"] for q in queue] == ["q0", "q1", "q2"]
    cancelled = await member.request("DELETE", f"/v1/threads/{thread}/queue/{queue[0]['run_id']}")
    assert cancelled.status_code == 200  # a slot frees: the next one is taken
    assert (await member.send(thread, "after a cancel", mode="queue_after_active"))["disposition"] == "queued"
    await member.post(f"/v1/runs/{active['run_id']}/interrupt", expect=202)


async def test_threads_per_tenant_is_exact_and_a_fork_counts(tenant, nc):
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    assert (await admin.request("PUT", "/v1/policy", json={"max_threads": 2})).status_code == 200
    first = await member.create_thread()
    run = await member.wait_run((await member.send(first, "hi"))["run_id"])
    fork = await member.request("POST", f"/v1/threads/{first}/fork", json={"source": {"type": "run", "id": run["id"]}})
    assert fork.status_code == 201, fork.text
    for path, body in (
        ("/v1/threads", {}),
        (f"/v1/threads/{first}/fork", {"source": {"type": "run", "id": run["id"]}}),
    ):
        refused = await member.request("POST", path, json=body)
        assert refused.status_code == 429, refused.text
        assert error(refused)["details"] == {"quota": "threads_per_tenant", "limit": 2, "current": 2}
    assert await thread_count(nc, tenant.name) == 2


async def test_concurrent_creates_across_coordinator_replicas_never_pass_the_thread_limit(tenant, nc):
    member, admin = await tenant.client("alice"), await tenant.client("root", "admin")
    assert (await admin.request("PUT", "/v1/policy", json={"max_threads": 3})).status_code == 200
    answers = await asyncio.gather(*(member.request("POST", "/v1/threads", json={"title": f"t{i}"}) for i in range(12)))
    assert sorted(r.status_code for r in answers) == [201] * 3 + [429] * 9, [r.text for r in answers]
    assert await thread_count(nc, tenant.name) == 3
    # A thread fenced on its tenant's creations is an ordinary thread to every reader (projector, supervisor).
    for made in (r.json()["thread_id"] for r in answers if r.status_code == 201):
        assert (await member.wait_run((await member.send(made, "hi"))["run_id"]))["status"] == "completed"


async def test_a_thread_stored_text_is_bounded_and_oversized_text_or_script_is_refused_before_the_broker(tenant, nc):
    member = await tenant.client("alice")
    thread = await member.create_thread()
    log = EventLog(nc)
    for _ in range(2):
        await member.wait_run((await member.send(thread, "x" * 20_000))["run_id"])
    before = await log.last_seq(tenant.name, thread)
    full = await member.request("POST", f"/v1/threads/{thread}/messages", json={"text": "y" * 20_000})
    assert full.status_code == 429 and error(full)["details"]["quota"] == "thread_text_bytes", full.text
    assert error(full)["details"]["limit"] == 50_000
    too_long = await member.request("POST", f"/v1/threads/{thread}/messages", json={"text": "z" * 30_001})
    assert too_long.status_code == 400 and error(too_long)["code"] == "text_too_long"
    assert error(too_long)["details"] == {"field": "text", "limit": 30_000, "size": 30_001}
    big_script = script({"type": "text", "text": "w" * 10_000})
    too_big = await member.request("POST", f"/v1/threads/{thread}/messages", json={"text": "x", "script": big_script})
    assert too_big.status_code == 400 and error(too_big)["code"] == "script_too_large", too_big.text
    assert await log.last_seq(tenant.name, thread) == before


# --- event streams and the rate limiter (per gateway process) --------------------------------------------


async def _consumers(nc, thread: str) -> int:
    """The broker consumers reading ``thread``'s events: the stream's whole count also moves with other
    tests' consumers (a killed worker's ordered consumer is reaped when it goes inactive)."""
    infos = await nc.jetstream().consumers_info("TREADLE_EVENTS")
    filters = [[i.config.filter_subject or "", *(i.config.filter_subjects or [])] for i in infos]
    return sum(any(f".{thread}." in f for f in fs) for fs in filters)


async def test_an_sse_flood_on_one_token_is_refused_before_any_consumer_opens_and_closing_frees_a_slot(tenant, nc):
    alice, bob, carol = await tenant.client("alice"), await tenant.client("bob"), await tenant.client("carol")
    thread = await alice.create_thread()
    path = f"/v1/threads/{thread}/events"

    readers = []  # a line reader dropped would close its response: hold them while their streams are meant open

    async def open_stream(api: Api, streams: contextlib.AsyncExitStack) -> httpx.Response:
        response = await streams.enter_async_context(api.client.stream("GET", path, timeout=None))
        if response.status_code == 200:
            lines = response.aiter_lines()
            readers.append(lines)
            assert await lines.__anext__() == ": connected"  # its subscriptions are open now
        else:
            await response.aread()
        return response

    async with contextlib.AsyncExitStack() as streams:
        before = await _consumers(nc, thread)
        held = [await open_stream(alice, streams) for _ in range(STREAMS_PER_TOKEN)]
        assert all(r.status_code == 200 for r in held)
        consumers = await _consumers(nc, thread)
        assert consumers == before + STREAMS_PER_TOKEN  # each open stream has its ordered consumer
        for _ in range(10):
            over = await open_stream(alice, streams)
            assert over.status_code == 429 and error(over)["details"] == {
                "quota": "streams_per_token",
                "limit": STREAMS_PER_TOKEN,
                "current": STREAMS_PER_TOKEN,
            }
            assert over.headers["retry-after"] == "1"
        assert await _consumers(nc, thread) == consumers  # refused before any broker consumer was made
        assert (await open_stream(bob, streams)).status_code == 200  # another token of the tenant: 3 of 3
        over = await open_stream(carol, streams)
        assert over.status_code == 429 and error(over)["details"]["quota"] == "streams_per_tenant"

        await held[0].aclose()  # the client goes away mid-stream: its slot comes back once the gateway sees it

        async def reopened():
            async with contextlib.AsyncExitStack() as again:
                return (await open_stream(alice, again)).status_code == 200

        assert await wait_for(reopened, timeout=10, interval=0.05, what="a slot freed by a closed stream")


async def test_garbage_authorization_headers_share_the_address_bucket_and_tokens_keep_their_own(tenant, limited_stack):
    member = await tenant.client("alice")
    async with httpx.AsyncClient(base_url=limited_stack.api_url) as anonymous:
        statuses, started = [], time.monotonic()
        for i in range(2000):
            r = await anonymous.get("/v1/threads", headers={"Authorization": f"Bearer garbage-{i}"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                break
        assert statuses[-1] == 429 and set(statuses[:-1]) == {401}, statuses[-3:]
        rate, burst = float(LIMITS["TREADLE_GATEWAY_RATE_LIMIT"]), int(LIMITS["TREADLE_GATEWAY_RATE_BURST"])
        # one bucket (its burst and what refilled meanwhile), not a fresh one per header
        assert len(statuses) <= burst + (time.monotonic() - started) * rate + 2
        # Still empty for new garbage: only the address bucket's refill (RATE_LIMIT a second) lets any through.
        started = time.monotonic()
        more = [
            (await anonymous.get("/v1/threads", headers={"Authorization": f"Bearer more-{i}"})).status_code
            for i in range(50)
        ]
        refill = (time.monotonic() - started) * float(LIMITS["TREADLE_GATEWAY_RATE_LIMIT"]) + 1
        assert more.count(401) <= refill and more.count(429) >= 50 - refill, (more, refill)
    assert (await member.request("GET", "/v1/threads")).status_code == 200  # a real token has its own bucket


async def _until_limited(send, attempts: int = 2000) -> tuple[list[int], httpx.Response]:
    """Statuses of ``send()`` until the first 429 (the one answer returned), at most ``attempts`` calls."""
    statuses = []
    for i in range(attempts):
        r = await send(i)
        statuses.append(r.status_code)
        if r.status_code == 429:
            return statuses, r
    raise AssertionError(f"no 429 in {attempts} calls: {sorted(set(statuses))}")


async def test_issue36_mcp_calls_session_credentials_and_sign_ins_are_rate_limited(tenant, limited_stack, nc):
    """Found by the hostile-tenant run: 300 fast calls at 20/s on ``/mcp`` (a live credential, or unknown ones)
    and at the console's sign-in answered 300 x 200/401 and never 429."""
    member = await tenant.client("alice")
    thread = await member.create_thread(title="limited mcp")
    store = SessionCredentials(nc.jetstream())
    live, other = [
        await store.mint(
            tenant=tenant.name, thread=thread, session_id=f"ps_{n}_{tenant.name}", capabilities=("capabilities",)
        )
        for n in ("a", "b")
    ]
    probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=limited_stack.api_url) as http:

        def mcp(token: str):
            return http.post("/mcp", json=probe, headers={"Authorization": f"Bearer {token}"})

        statuses, first = await _until_limited(lambda _: mcp(live))  # the live credential's own bucket
        assert len(statuses) > 1 and set(statuses[:-1]) == {200}, statuses[-3:]
        # Guessed credentials and wrong sign-ins share the address's bucket (other tests here drain it too)
        guessed, second = await _until_limited(lambda i: mcp(f"trs_guessed-{i}"))
        signed, third = await _until_limited(lambda i: http.post("/console/session", json={"token": f"trd_x{i}"}))
        assert set(guessed[:-1]) <= {401} and set(signed[:-1]) <= {401}, (guessed[-3:], signed[-3:])
        for refused in (first, second, third):
            assert refused.headers["retry-after"].isdigit() and error(refused)["code"] == "rate_limited"
        assert (await mcp(other)).status_code == 200  # another session's credential has its own bucket


# --- the operator's CLI and tokens from before roles were checked ----------------------------------------


async def _treadle(*args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "treadle"),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_an_operator_sets_a_policy_with_the_cli_and_roles_are_checked_when_tokens_are_made(
    tenant, limited_stack, nc
):
    member = await tenant.client("alice")
    url = ["--nats-url", limited_stack.nats_url]
    code, out, err = await _treadle(
        "policy",
        "set",
        "--tenant",
        tenant.name,
        "--allow-mode",
        "approval_required",
        "--allow-mode",
        "full_access",
        "--max-queued-runs",
        "7",
        "--max-delegation-depth",
        "1",
        "--max-children-per-run",
        "3",
        "--max-running-children",
        "5",
        "--cascade-interrupts",
        *url,
    )
    assert code == 0, err
    stored = json.loads(out)
    assert stored["allowed_modes"] == ["approval_required", "full_access"]
    assert [stored[k] for k in ("max_delegation_depth", "max_children_per_run", "max_running_children")] == [1, 3, 5]
    assert stored["cascade_interrupts"] is True
    code, _, err = await _treadle("policy", "set", "--tenant", tenant.name, "--max-delegation-depth", "0", *url)
    assert code != 0 and "max_delegation_depth is 1.." in err, err  # refused, nothing stored
    [record] = await audit_records(nc, tenant.name)
    assert record["actor"].startswith("operator:") and record["details"]["max_queued_runs"] == 7
    assert (await member.request("POST", "/v1/threads", json={"runtime_mode": "full_access"})).status_code == 201
    code, out, _ = await _treadle("policy", "show", "--tenant", tenant.name, *url)
    assert code == 0 and json.loads(out)["max_queued_runs"] == 7

    code, _, err = await _treadle(
        "tokens", "create", "--tenant", tenant.name, "--user", "mallory", "--role", "root", *url
    )
    assert code == 2 and "invalid choice" in err  # argparse refuses it before anything is stored
    with pytest.raises(ValueError):
        await TokenStore(nc.jetstream()).create(tenant.name, "mallory", "superuser")


async def test_a_token_stored_with_a_role_that_means_nothing_is_refused_everywhere(tenant, limited_stack, nc):
    """Tokens made before roles were checked may carry any role: it grants nothing, not even member rights."""
    token = "trd_legacy-" + uuid.uuid4().hex
    kv = await nc.jetstream().key_value("treadle-tokens")
    await kv.put(digest(token), msgspec.json.encode(Principal(tenant=tenant.name, user="old", role="owner")))
    async with httpx.AsyncClient(base_url=limited_stack.api_url, headers={"Authorization": f"Bearer {token}"}) as old:
        for method, path in (("GET", "/v1/threads"), ("POST", "/v1/threads"), ("GET", "/v1/policy")):
            refused = await old.request(method, path, json={} if method == "POST" else None)
            assert refused.status_code == 403 and error(refused)["code"] == "forbidden", (path, refused.text)
    assert await thread_count(nc, tenant.name) == 0
