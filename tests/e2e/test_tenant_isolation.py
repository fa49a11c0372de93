"""Issue 9, item 2: a tenant's consumer credential reads that tenant's events and nothing else; every
denial is the server's own answer. Nothing a credential asks for makes the server deliver onto a worker or
event subject (push consumers, reply subjects). Revoked credentials and API tokens stop working within a
bound."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.api import make_api
from tests.support.helpers import wait_for
from treadle.ops import tenant_consumers
from treadle.ops.tenant_events import API_PREFIX, TenantCredential, follow_tenant
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

STREAM = "TREADLE_EVENTS"
PROVIDER_STREAM = "TREADLE_PROVIDER"


class Probe:
    """A connection as one tenant credential that records the server's asynchronous errors."""

    def __init__(self, creds: TenantCredential) -> None:
        self.creds = creds
        self.errors: list[str] = []
        self._answered: dict[str, int] = {}  # violations already claimed by denied(), per expected text
        self.nc: nats.NATS | None = None

    async def __aenter__(self) -> Probe:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        self.nc = await nats.connect(
            self.creds.url,
            user=self.creds.user,
            password=self.creds.password,
            inbox_prefix=self.creds.inbox_prefix,
            error_cb=on_error,
            allow_reconnect=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.nc and not self.nc.is_closed:
            await self.nc.close()

    async def denied(self, verb: str, subject: str) -> str:
        """Wait for the server's permissions violation naming this subject, one more than were seen for it
        before; returns its text. (nats-py lowercases the server's -ERR line: the comparison ignores case.)"""
        expected = f'Permissions Violation for {verb} to "{subject}"'.lower()
        seen = self._answered.get(expected, 0)

        def answer() -> str | None:
            found = [e for e in self.errors if expected in e.lower()]
            return found[seen] if len(found) > seen else None

        text = await wait_for(answer, timeout=5, what=expected)
        self._answered[expected] = seen + 1
        return text


async def _issue(stack, stack_nc, tenant: str) -> TenantCredential:
    """What `treadle consumers create` does: the credential, its pull consumer (created by the operator
    with the service user), and a reload."""
    issued = stack.nats.auth.issue(tenant, stack.nats_address)
    await tenant_consumers.create(stack_nc.jetstream(), issued.consumer, tenant)
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
    creds_a, creds_b = await _issue(stack, stack_nc, a), await _issue(stack, stack_nc, b)

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
        for subject in (
            f"treadle.evt.{b}.>",
            "treadle.evt.>",
            "treadle.cmd.>",
            "treadle.prov.>",
            "_INBOX.>",
            f"{creds_b.inbox_prefix}.>",
            "$KV.treadle-tokens.>",
            "treadle.audit.>",
        ):
            await nc.subscribe(subject)
            matrix[f"subscribe {subject}"] = await probe.denied("Subscription", subject)
        # Publishing anywhere: events (even its own tenant's), commands, provider events, KV, live deltas.
        for subject in (
            f"treadle.evt.{a}.{thread_a}.run.completed",
            f"treadle.cmd.{a}.thread.create",
            f"treadle.prov.{a}.{thread_a}.pth_x",
            f"treadle.live.{a}.{thread_a}",
            "$KV.treadle-tokens.x",
            "treadle.host.place",
            "$JS.API.STREAM.INFO." + STREAM,
            f"$JS.API.DIRECT.GET.{STREAM}",
            "$JS.API.DIRECT.GET.KV_treadle-tokens",
        ):
            await nc.publish(subject, b'{"forged": true}')
            matrix[f"publish {subject}"] = await probe.denied("Publish", subject)
        # Consumers: a credential creates none (its own name included: a create body could make it a push
        # consumer), deletes none, and pulls from no other consumer; neither under $JS.API (its account has no
        # JetStream) nor under the prefix its own consumer's API is imported at.
        body = {"stream_name": STREAM, "config": {"name": creds_a.consumer, "ack_policy": "explicit"}}
        for subject in (
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.{b}.>",
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.{a}.>",
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}",
            f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds_b.consumer}.treadle.evt.{a}.>",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{creds_a.consumer}",
            f"{API_PREFIX}.CONSUMER.CREATE.{STREAM}.{creds_a.consumer}.treadle.evt.{a}.>",
            f"$JS.API.CONSUMER.DELETE.{STREAM}.{creds_a.consumer}",
            f"{API_PREFIX}.CONSUMER.DELETE.{STREAM}.{creds_a.consumer}",
            f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{creds_a.consumer}",
            f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.supervisor-dispatch-p0",
            f"{API_PREFIX}.CONSUMER.MSG.NEXT.{STREAM}.supervisor-dispatch-p0",
            f"{API_PREFIX}.CONSUMER.MSG.NEXT.{STREAM}.{creds_b.consumer}",
            f"$JS.API.CONSUMER.DELETE.{STREAM}.coordinator-run-ended-p0",
        ):
            with pytest.raises((NatsTimeout, NoRespondersError)):
                await nc.request(subject, json.dumps(body).encode(), timeout=0.5)
            matrix[f"request {subject}"] = await probe.denied("Publish", subject)

    for attempt, answer in sorted(matrix.items()):
        print(f"{attempt:<90} -> {answer}")
    forged = await stack_nc.jetstream().get_last_msg(STREAM, f"treadle.evt.{a}.{thread_a}.>")
    assert b"forged" not in forged.data


async def test_tenant_cannot_make_the_server_deliver_onto_worker_or_event_subjects(stack, stack_nc):
    """Subject permissions never see a request's body or reply subject. A push consumer's deliver_subject,
    or the reply subject of a pull or info request, names where the SERVER publishes: each attempt here
    targets a worker request subject, an event subject (stream TREADLE_EVENTS would store it) or a provider
    subject (stream TREADLE_PROVIDER would). A service-side spy subscribed to every target (literally, so
    a push consumer would count it as interest) must receive nothing, and no stream may grow."""
    a, b = f"dlv-a-{time.time_ns()}", f"dlv-b-{time.time_ns()}"
    await _completed_run(stack, stack_nc, a)
    thread_b, _ = await _completed_run(stack, stack_nc, b)
    creds = await _issue(stack, stack_nc, a)
    js = stack_nc.jetstream()
    forged = f"treadle.evt.{a}.thr_forged.run.completed"  # its own tenant: the credential may subscribe to it
    targets = [
        f"treadle.cmd.{b}.thread.create",
        f"treadle.cmd.{b}.thread.send",
        f"treadle.cmd.{a}.thread.send",
        f"treadle.evt.{b}.{thread_b}.run.completed",
        f"treadle.prov.{b}.{thread_b}.pth_x",
        "treadle.place.local",
        "treadle.host.host-1.turn.start",
        "treadle.ckpt.local.capture",
        f"treadle.live.{b}.{thread_b}",
        "treadle.audit.x.token.created",
        forged,
    ]
    stored = f"{targets[3]}.*"  # the broker appends the thread's partition (runtime/partitions.py)
    b_completed = (await js.get_last_msg(STREAM, stored, direct=True)).seq

    eavesdropped: list[tuple[str, bytes]] = []

    async def overheard(msg) -> None:
        eavesdropped.append((msg.subject, msg.data))

    spy = await nats.connect(stack.nats_url)
    attempts: dict[str, str] = {}
    try:
        for subject in {*targets, "treadle.cmd.>", "treadle.evt.>", "treadle.prov.>"}:
            await spy.subscribe(subject, cb=overheard)
        await spy.flush()
        async with Probe(creds) as probe:
            nc = probe.nc
            landed: asyncio.Queue = asyncio.Queue()
            await nc.subscribe(forged, cb=landed.put)  # in the credential's own account
            # 1. Push consumers delivering onto each target: the create request itself is refused.
            for target in targets:
                config = {
                    "name": creds.consumer,
                    "durable_name": creds.consumer,
                    "deliver_subject": target,
                    "filter_subject": f"treadle.evt.{a}.>",
                    "ack_policy": "none",
                }
                for subject in (
                    f"$JS.API.CONSUMER.CREATE.{STREAM}.{creds.consumer}.treadle.evt.{a}.>",
                    f"{API_PREFIX}.CONSUMER.CREATE.{STREAM}.{creds.consumer}.treadle.evt.{a}.>",
                ):
                    await nc.publish(subject, json.dumps({"stream_name": STREAM, "config": config}).encode())
                    attempts[f"push consumer -> {target} via {subject.split('.CONSUMER')[0]}"] = await probe.denied(
                        "Publish", subject
                    )
            # 2. Its own consumer's pull and info requests, answered onto each target (the forged event subject
            #    last): the server serves them, but into the credential's own account, where no worker or
            #    stream is. Only there can the credential see an answer, on the one target it may read.
            next_ = f"{API_PREFIX}.CONSUMER.MSG.NEXT.{STREAM}.{creds.consumer}"
            info = f"{API_PREFIX}.CONSUMER.INFO.{STREAM}.{creds.consumer}"
            for target in targets:
                await nc.publish(next_, b'{"batch": 1, "no_wait": true}', reply=target)
                await nc.publish(info, b"", reply=target)
            answers = [await asyncio.wait_for(landed.get(), timeout=10) for _ in range(2)]
            info_answer = next(m for m in answers if b"consumer_info_response" in m.data)
            pulled = next(m for m in answers if m is not info_answer)  # an event of A, with its own subject
            assert "Status" not in (pulled.headers or {}) and json.loads(pulled.data)["tenant"] == a, pulled
            attempts[f"pull and info answered onto {forged}"] = "delivered into the credential's own account"
            # The answers to the earlier attempts went out before these (one connection, one consumer, in
            # order); a ping round trip on the spy's connection flushes anything the server sent it.
            await spy.flush()
            assert all("permissions violation" in e.lower() for e in probe.errors), probe.errors
    finally:
        await spy.close()

    for attempt, answer in sorted(attempts.items()):
        print(f"{attempt:<100} -> {answer}")
    # The targets themselves are quiet subjects; on the wildcards, what an attempt could deliver is one of
    # A's events or a JetStream API answer (other traffic would be the workers' own).
    assert [
        m
        for m in eavesdropped
        if m[0] in targets or f'"tenant":"{a}"'.encode() in m[1] or b"io.nats.jetstream.api" in m[1]
    ] == [], eavesdropped
    for stream, subject in ((STREAM, forged), (PROVIDER_STREAM, targets[4])):
        for form in (subject, f"{subject}.*"):  # as published, and as the partition mapping stores it
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_last_msg(stream, form, direct=True)
    assert (await js.get_last_msg(STREAM, stored, direct=True)).seq == b_completed


async def test_revoked_consumer_credential_is_disconnected_and_refused_at_once(stack, stack_nc):
    tenant = f"iso-r-{time.time_ns()}"
    creds = await _issue(stack, stack_nc, tenant)
    async with Probe(creds) as probe:
        await probe.nc.subscribe(f"treadle.evt.{tenant}.>")
        await probe.nc.flush()
        began = time.monotonic()
        stack.nats.auth.revoke(creds.user)
        await stack.nats.reload()
        await wait_for(lambda: not probe.nc.is_connected, timeout=5, what="the revoked connection closed")
        elapsed = time.monotonic() - began
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            creds.url, user=creds.user, password=creds.password, allow_reconnect=False, connect_timeout=2
        )
    print(f"revoked consumer credential disconnected {elapsed:.2f}s after the revoke began")


async def test_revoked_api_token_is_refused_within_the_cache_time(stack, stack_nc):
    tenant = f"iso-t-{time.time_ns()}"
    api = await make_api(stack, stack_nc, tenant)
    try:
        assert (await api.request("GET", "/v1/threads")).status_code == 200
        token = api.token
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
    from treadle.ops.tokens import token_id

    return token_id(token)
