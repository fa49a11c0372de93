"""Issue 9, item 2: the broker Treadle starts refuses anonymous clients; the service user survives restarts;
a tenant credential lives in an account of its own that imports exactly its consumer's pull, info and ack
subjects and its tenant's events; its consumer is the operator's to create and reposition."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from treadle.cli.asyncapi import event_example
from treadle.eventlog import streams
from treadle.ops import tenant_consumers
from treadle.ops.broker_auth import SERVICE_ACCOUNT, BrokerAuth, tenant_permissions
from treadle.ops.servers import NatsServer
from treadle.ops.tenant_events import API_PREFIX, CannotReposition, ConsumerMissing, TenantCredential, follow_tenant
from treadle.runtime.partitions import PartitionsChanged

STREAM = "TREADLE_EVENTS"


async def _refused(url: str, **kw) -> str:
    with pytest.raises(nats.errors.Error) as caught:
        await nats.connect(url, allow_reconnect=False, connect_timeout=2, **kw)
    return str(caught.value)


async def test_no_anonymous_or_wrong_password_client_connects_and_the_service_user_survives_a_restart(tmp_path):
    server = NatsServer(tmp_path / "nats")
    async with server:
        assert "Authorization Violation" in await _refused(server.address)
        assert "Authorization Violation" in await _refused(server.address, user="treadle", password="guess")
        url = server.url
        nc = await nats.connect(url)
        await nc.close()
        await server.stop()
        await server.start()
        assert server.url == url  # the same service password after a restart (the chaos tests rely on it)
        nc = await nats.connect(url)
        await nc.close()
    assert server.auth.service().password not in (tmp_path / "nats" / "auth.conf").read_text()  # a hash only


def test_a_tenant_credential_may_only_read_its_tenant_and_use_its_own_consumer():
    permissions = tenant_permissions("acme", "tc_1")
    assert permissions["subscribe"]["allow"] == ["treadle.evt.acme.>", "_INBOX_tc_1.>"]
    assert permissions["publish"]["allow"] == [  # no CONSUMER.CREATE or DELETE: the operator's
        "treadle.js.CONSUMER.INFO.TREADLE_EVENTS.tc_1",
        "treadle.js.CONSUMER.MSG.NEXT.TREADLE_EVENTS.tc_1",
        "$JS.ACK.TREADLE_EVENTS.tc_1.>",
    ]


def test_each_credential_gets_an_account_importing_only_its_own_consumer_and_tenant(tmp_path):
    from treadle.ops.broker_auth import BrokerAuth

    auth = BrokerAuth(tmp_path)
    acme, other = auth.issue("acme", "nats://x"), auth.issue("other", "nats://x")
    accounts = json.loads((tmp_path / "auth.conf").read_text().split("accounts ", 1)[1])
    assert set(accounts) == {SERVICE_ACCOUNT, acme.user, other.user}
    exports = accounts[SERVICE_ACCOUNT]["exports"]
    assert all(e["accounts"] in ([acme.user], [other.user]) for e in exports)  # never to everyone
    mine = [e.get("service") or e.get("stream") for e in exports if e["accounts"] == [acme.user]]
    assert mine == [
        f"$JS.API.CONSUMER.INFO.{STREAM}.{acme.consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{acme.consumer}",
        f"$JS.ACK.{STREAM}.{acme.consumer}.>",
        "treadle.evt.acme.>",
    ]
    assert "jetstream" not in accounts[acme.user]  # its $JS.API answers "not enabled", never the stream's
    assert [u["user"] for u in accounts[acme.user]["users"]] == [acme.user]
    assert acme.api_prefix == API_PREFIX


async def _server_with_events(tmp_path, events: dict[str, int]):
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await streams.ensure(js)
    for tenant, count in events.items():
        for _ in range(count):
            body = {**event_example("run.completed"), "tenant": tenant, "thread": "thr_1"}
            await js.publish(f"treadle.evt.{tenant}.thr_1.run.completed", json.dumps(body).encode())
    return server, nc


async def _issue(server, nc, tenant: str, **consumer) -> TenantCredential:
    issued = server.auth.issue(tenant, server.address)
    await tenant_consumers.create(nc.jetstream(), issued.consumer, tenant, **consumer)
    await server.reload()
    return issued


async def _pull_status(server, creds: TenantCredential) -> str:
    """One pull request as the credential: the first answer's status, or "event"."""
    async with creds.connect(allow_reconnect=False) as tenant:
        answers: asyncio.Queue = asyncio.Queue()
        await tenant.subscribe(f"{creds.inbox_prefix}.probe", cb=answers.put)
        await tenant.publish(
            f"{API_PREFIX}.CONSUMER.MSG.NEXT.{STREAM}.{creds.consumer}",
            b'{"batch": 1}',
            reply=f"{creds.inbox_prefix}.probe",
        )
        answer = await asyncio.wait_for(answers.get(), timeout=10)
        return (answer.headers or {}).get("Status", "event")


async def test_a_new_credential_needs_the_second_reload_and_others_keep_working_across_reloads(tmp_path):
    """Why BrokerAuth.reload reloads twice: after ONE reload adding its account, nats-server answers the
    new credential's pull requests 503 (no responders); a second reload without changes resolves its
    imports. Existing credentials keep working across reloads that add or remove others."""
    server, nc = await _server_with_events(tmp_path, {"acme": 3, "other": 1})
    try:
        first = await _issue(server, nc, "acme")
        assert await _pull_status(server, first) == "event"
        second = server.auth.issue("other", server.address)
        await tenant_consumers.create(nc.jetstream(), second.consumer, "other")
        await asyncio.to_thread(server.auth._reload_once, 15.0)
        assert await _pull_status(server, second) == "503"  # the server's own answer, until reloaded again
        assert await _pull_status(server, first) == "event"
        await asyncio.to_thread(server.auth._reload_once, 15.0)
        assert await _pull_status(server, second) == "event"
        server.auth.revoke(second.user)
        await server.reload()
        assert await _pull_status(server, first) == "event"
    finally:
        await nc.close()
        await server.stop()


async def test_follower_resumes_skips_ahead_and_going_back_is_the_operators_reset(tmp_path):
    server, nc = await _server_with_events(tmp_path, {"acme": 5, "other": 2})
    try:
        creds = await _issue(server, nc, "acme")

        async def read(**kw) -> list[int]:
            async with creds.connect() as tenant:
                return [e.seq async for e in follow_tenant(tenant, creds, idle_timeout=1, **kw)]

        acme_seqs = [1, 2, 3, 4, 5]
        assert await read(from_seq=3) == [3, 4, 5]  # skipping ahead is the follower's own business
        assert await read() == []  # everything acked
        with pytest.raises(CannotReposition, match=r"treadle consumers reset .* --from-seq 2"):
            await read(from_seq=2)
        await tenant_consumers.reset(nc.jetstream(), creds.consumer, "acme", type_="run.completed")
        with pytest.raises(CannotReposition, match="run.completed only"):
            await read(types=["message.created"])
        await tenant_consumers.reset(nc.jetstream(), creds.consumer, "acme", from_seq=2, keep_type=False)
        assert await read() == acme_seqs[1:]
        await nc.jetstream().delete_consumer(STREAM, creds.consumer)
        with pytest.raises(ConsumerMissing, match="treadle consumers reset"):
            await read()
        await tenant_consumers.reset(nc.jetstream(), creds.consumer, "acme")  # a missing one is created
        assert await read() == acme_seqs
        with pytest.raises(ValueError, match="unknown event type"):
            await tenant_consumers.reset(nc.jetstream(), creds.consumer, "acme", type_="no.such")
        assert (
            await nc.jetstream().consumer_info(STREAM, creds.consumer)
        ).config.filter_subject == "treadle.evt.acme.>"
    finally:
        await nc.close()
        await server.stop()


async def test_reset_turns_a_consumer_made_before_accounts_into_a_pull_consumer_where_it_was(tmp_path):
    """Before accounts a credential created its own consumer, possibly a push consumer delivering anywhere;
    `treadle consumers reset --all` recreates each as the operator's pull consumer, keeping its position."""
    server, nc = await _server_with_events(tmp_path, {"acme": 4})
    try:
        js = nc.jetstream()
        creds = server.auth.issue("acme", server.address)
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                name=creds.consumer,
                durable_name=creds.consumer,
                filter_subject="treadle.evt.acme.>",
                deliver_subject="treadle.cmd.other.thread.create",
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=3,
            ),
        )
        await server.reload()
        pulled = await tenant_consumers.reset(js, creds.consumer, "acme")
        info = await js.consumer_info(STREAM, creds.consumer)
        assert info.config.deliver_subject is None and pulled.opt_start_seq == 3
        async with creds.connect() as tenant:
            assert [e.seq async for e in follow_tenant(tenant, creds, idle_timeout=1)] == [3, 4]
    finally:
        await nc.close()
        await server.stop()


async def test_streams_written_before_accounts_survive_the_upgrade(tmp_path):
    """Before accounts, the service user lived in the global account; its JetStream files move with it."""
    old = NatsServer(tmp_path / "nats", auth=False)
    async with old:
        nc = await nats.connect(old.url)
        await streams.ensure(nc.jetstream())
        await nc.jetstream().publish("treadle.evt.acme.thr_1.run.completed", b"{}")
        await nc.close()
    assert (tmp_path / "nats" / "jetstream" / "$G").is_dir()
    server = NatsServer(tmp_path / "nats", port=old.port)
    async with server:
        nc = await nats.connect(server.url)
        try:
            assert (await nc.jetstream().stream_info(STREAM)).state.messages == 1
        finally:
            await nc.close()
    assert not (tmp_path / "nats" / "jetstream" / "$G").exists()


def test_the_partition_count_is_kept_from_the_first_render_and_a_different_one_is_refused(tmp_path, monkeypatch):
    """A render by a process without TREADLE_PARTITIONS (issuing a tenant credential) fell back to the default
    and silently re-mapped every thread of a deployment partitioned otherwise."""
    auth = BrokerAuth(tmp_path)
    monkeypatch.setenv("TREADLE_PARTITIONS", "4")
    auth.init()
    conf = auth.server_dir / "auth.conf"
    assert "partition(4,2)" in conf.read_text()
    monkeypatch.delenv("TREADLE_PARTITIONS")
    auth.issue("acme", "nats://127.0.0.1:4222")  # renders again
    assert "partition(4,2)" in conf.read_text()
    before = conf.read_text()
    monkeypatch.setenv("TREADLE_PARTITIONS", "16")
    with pytest.raises(PartitionsChanged, match="partitioned 4 ways"):
        auth.issue("globex", "nats://127.0.0.1:4222")
    assert conf.read_text() == before and [c.tenant for c in auth.credentials()] == ["acme"]
    monkeypatch.setenv("TREADLE_PARTITIONS", "4")  # the same count again is fine
    auth.render()


def test_the_embedded_stack_pins_a_count_for_the_machine_and_a_stack_made_before_keeps_its_own(tmp_path, monkeypatch):
    """Issue 38: ``treadle up`` on 2 cores does not need 32 durable consumers; a broker partitioned otherwise
    (before this default, or by the operator) keeps its count, and asking for another one is refused."""
    monkeypatch.delenv("TREADLE_PARTITIONS", raising=False)
    fresh = BrokerAuth(tmp_path / "fresh", default_partitions=2)
    fresh.init()
    assert "partition(2,2)" in (fresh.server_dir / "auth.conf").read_text()
    older = BrokerAuth(tmp_path / "older")  # made with the deployment default
    older.init()
    again = BrokerAuth(tmp_path / "older", default_partitions=2)  # started again by the new embedded stack
    again.render()
    assert "partition(8,2)" in (again.server_dir / "auth.conf").read_text()
    monkeypatch.setenv("TREADLE_PARTITIONS", "2")
    with pytest.raises(PartitionsChanged, match="partitioned 8 ways"):
        again.render()
    monkeypatch.setenv("TREADLE_PARTITIONS", "16")  # the operator's setting wins over the machine's on a new broker
    chosen = BrokerAuth(tmp_path / "chosen", default_partitions=2)
    chosen.init()
    assert "partition(16,2)" in (chosen.server_dir / "auth.conf").read_text()
