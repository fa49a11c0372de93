"""Issue 9, item 2: a tenant's consumer credential reads that tenant's events and nothing else; every
denial is the server's own answer. Revoked credentials and API tokens stop working within a bound."""

from __future__ import annotations

import json
import time

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from conftest import make_api
from helpers import wait_for
from treadle.client.tenant_events import TenantCredential, follow_tenant
from treadle.runtime.partitions import DEFAULT_PARTITIONS, partition_of
from treadle.runtime.tokens import TokenStore

pytestmark = pytest.mark.e2e

STREAM = "TREADLE_EVENTS"


class Probe:
    """A connection as one tenant credential that records the server's asynchronous errors."""

    def __init__(self, creds: TenantCredential) -> None:
        self.creds = creds
        self.errors: list[str] = []
        self.nc: nats.NATS | None = None

    async def __aenter__(self) -> "Probe":
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        self.nc = await nats.connect(self.creds.url, user=self.creds.user, password=self.creds.password,
                                     inbox_prefix=self.creds.inbox_prefix, error_cb=on_error,
                                     allow_reconnect=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.nc and not self.nc.is_closed:
            await self.nc.close()

    async def denied(self, verb: str, subject: str) -> str:
        """Wait for the server's permissions violation naming this subject; returns its text. (nats-py
        lowercases the server's -ERR line, so the comparison ignores case.)"""
        expected = f'Permissions Violation for {verb} to "{subject}"'.lower()
        return await wait_for(lambda: next((e for e in self.errors if expected in e.lower()), None), timeout=5,
                              what=expected)


async def _issue(stack, tenant: str) -> TenantCredential:
    issued = stack.nats.auth.issue(tenant, stack.nats_address)
    await stack.nats.reload()
    return TenantCredential(**{f: getattr(issued, f) for f in TenantCredential.__struct_fields__})


async def _completed_run(stack, stack_nc, tenant: str) -> tuple[str, str]:
    api = await make_api(stack, stack_nc, tenant)
    try:
        thread = await api.create_thread(title="isolation")
        run_id = (await api.send(thread, "hello"))["run_id"]
        await api.wait_run(run_id)
        return thread, run_id
    finally:
        await api.close()


async def test_tenant_consumer_reads_its_own_run_completed_and_is_denied_everything_else(stack, stack_nc):
    a, b = f"iso-a-{time.time_ns()}", f"iso-b-{time.time_ns()}"
    thread_a, run_a = await _completed_run(stack, stack_nc, a)
    await _completed_run(stack, stack_nc, b)
    creds_a, creds_b = await _issue(stack, a), await _issue(stack, b)

    # Allowed: A's durable consumer, filtered on run.completed, delivers A's run and only A's.
    async with creds_a.connect() as nc:
        seen = []
        async for event in follow_tenant(nc, creds_a, types=["run.completed"], idle_timeout=2):
            seen.append(event)
        assert [(e.tenant, e.thread, e.data.run_id) for e in seen] == [(a, thread_a, run_a)]

    matrix: dict[str, str] = {}
    async with Probe(creds_a) as probe:
        nc = probe.nc
        # Live subscriptions outside treadle.evt.A.>
        for subject in (f"treadle.evt.{b}.>", "treadle.evt.>", "treadle.cmd.>", "treadle.prov.>", "_INBOX.>",
                        f"{creds_b.inbox_prefix}.>", "$KV.treadle-tokens.>", "treadle.audit.>"):
            await nc.subscribe(subject)
            matrix[f"subscribe {subject}"] = await probe.denied("Subscription", subject)
        # Publishing anywhere: events (even its own tenant's), commands, provider events, KV, live deltas.
        for subject in (f"treadle.evt.{a}.{thread_a}.run.completed", f"treadle.cmd.{a}.thread.create",
                        f"treadle.prov.{a}.{thread_a}.pth_x", f"treadle.live.{a}.{thread_a}",
                        "$KV.treadle-tokens.x", "treadle.host.place", "$JS.API.STREAM.INFO." + STREAM,
                        f"$JS.API.DIRECT.GET.{STREAM}", "$JS.API.DIRECT.GET.KV_treadle-tokens"):
            await nc.publish(subject, b'{"forged": true}')
            # the broker checks (and names) the subject after its partition mapping (runtime/partitions.py)
            mapped = f"{subject}.{partition_of(thread_a, DEFAULT_PARTITIONS)}" \
                if subject.startswith(("treadle.evt.", "treadle.prov.")) else subject
            matrix[f"publish {subject}"] = await probe.denied("Publish", mapped)
        # Consumers: filtered on B, on everything, multi-filter (plain subject), under another name, and
        # pulling from a worker's durable consumer.
        body = {"stream_name": STREAM, "config": {"name": creds_a.consumer, "ack_policy": "explicit"}}
        for subject in (f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.{b}.>",
                        f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.>",
                        f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}",
                        f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_b.consumer}.treadle.evt.{a}.>",
                        f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{creds_a.consumer}",
                        f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.supervisor-dispatch-p0",
                        f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{creds_b.consumer}",
                        f"$JS.API.CONSUMER.DELETE.{STREAM}.coordinator-run-ended-p0"):
            with pytest.raises((NatsTimeout, NoRespondersError)):
                await nc.request(subject, json.dumps(body).encode(), timeout=0.5)
            matrix[f"request {subject}"] = await probe.denied("Publish", subject)
        # The one create subject it may use, with a body asking for B's events: JetStream refuses it.
        sneaky = {"stream_name": STREAM, "config": {"name": creds_a.consumer, "filter_subject": f"treadle.evt.{b}.>",
                                                    "ack_policy": "explicit"}}
        reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.{a}.>",
                                 json.dumps(sneaky).encode(), timeout=5)
        error = json.loads(reply.data)["error"]
        assert error["err_code"] == 10131, error  # "did not match filtered subject from create subject"
        matrix["create own name, subject A, body filter B"] = error["description"]

    for attempt, answer in sorted(matrix.items()):
        print(f"{attempt:<90} -> {answer}")
    forged = await stack_nc.jetstream().get_last_msg(STREAM, f"treadle.evt.{a}.{thread_a}.>")
    assert b"forged" not in forged.data


async def test_revoked_consumer_credential_is_disconnected_and_refused_at_once(stack, stack_nc):
    tenant = f"iso-r-{time.time_ns()}"
    creds = await _issue(stack, tenant)
    async with Probe(creds) as probe:
        await probe.nc.subscribe(f"treadle.evt.{tenant}.>")
        await probe.nc.flush()
        began = time.monotonic()
        stack.nats.auth.revoke(creds.user)
        await stack.nats.reload()
        await wait_for(lambda: not probe.nc.is_connected, timeout=5, what="the revoked connection closed")
        elapsed = time.monotonic() - began
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(creds.url, user=creds.user, password=creds.password, allow_reconnect=False,
                           connect_timeout=2)
    print(f"revoked consumer credential disconnected {elapsed:.2f}s after the revoke began")


async def test_revoked_api_token_is_refused_within_the_cache_time(stack, stack_nc):
    tenant = f"iso-t-{time.time_ns()}"
    api = await make_api(stack, stack_nc, tenant)
    try:
        assert (await api.request("GET", "/v1/threads")).status_code == 200
        token = api.http.headers["Authorization"].split(" ", 1)[1]
        began = time.monotonic()
        who = await TokenStore(stack_nc.jetstream()).revoke(token)
        assert who.tenant == tenant
        await wait_for(lambda: _refused(api), timeout=10, interval=0.2, what="the revoked token refused")
        print(f"revoked API token refused {time.monotonic() - began:.2f}s after the revoke")
    finally:
        await api.close()
    audit = stack_nc.jetstream()
    last = await audit.get_last_msg("TREADLE_AUDIT", f"treadle.audit.{tenant}.token.revoked")
    assert json.loads(last.data)["target"] == token_id_of(token)


async def _refused(api) -> bool:
    return (await api.request("GET", "/v1/threads")).status_code == 401


def token_id_of(token: str) -> str:
    from treadle.runtime.tokens import token_id

    return token_id(token)
