"""Issue 6, item 4: the whole stack on a 3-node JetStream cluster (every stream and bucket R3). One node, the
leader of TREADLE_EVENTS, is SIGKILLed in the middle of streaming runs and restarted later, twice; messages
keep arriving meanwhile. The workers fail over to the other nodes, and every message still becomes exactly one
completed run with its whole reply, in one attempt; the log passes its invariant check and every projection
equals a replay of its thread's log. A tenant's credential (from the CLI) lists every node and keeps working
while one is down; revoking it reaches every node."""

from __future__ import annotations

import itertools
import json
import uuid

import nats
import pytest

from tests.e2e.test_cli import treadle
from tests.support.api import Api
from tests.support.helpers import quiet, wait_for
from tests.support.replicas import wait_caught_up
from treadle.cli.stack import Stack
from treadle.core import events as ev
from treadle.core.state import fold
from treadle.eventlog.log import EventLog
from treadle.eventlog.subjects import EVENTS_STREAM
from treadle.ops.tokens import TokenStore
from treadle.projections.check import check_log
from treadle.projections.store import encode_state
from treadle.runtime import broker_urls

pytestmark = pytest.mark.e2e

THREADS = 4
REPLY = "".join(f"part {i:02d}. " for i in range(24))
SCRIPT = {"steps": [{"type": "text", "text": REPLY, "chunk": 8, "delay_ms": 40}]}
_tenants = itertools.count(1)


@pytest.fixture(scope="module")
async def cluster_stack(tmp_path_factory):
    # Two provider hosts: each watches the other's heartbeats, which stall while their bucket elects a leader.
    async with Stack(tmp_path_factory.mktemp("cluster-stack"), on_output=quiet, nats_cluster=3, provider_hosts=2) as s:
        yield s


@pytest.fixture(scope="module")
async def cluster_nc(cluster_stack):
    # Like a worker: every node's URL, reconnecting for as long as it takes.
    nc = await nats.connect(
        **broker_urls.parse(cluster_stack.nats_url).connect_options(),
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        name="test-cluster",
    )
    yield nc
    await nc.close()


@pytest.fixture
async def cluster_api(cluster_stack, cluster_nc):
    tenant = f"cluster{next(_tenants)}"
    token = await TokenStore(cluster_nc.jetstream()).create(tenant, "alice")
    client = Api(cluster_stack.api_url, token, tenant)
    yield client
    await client.close()


async def send_until_accepted(api: Api, thread: str, text: str) -> str:
    """What a client does when the API is briefly unavailable: repeat the request with the same
    Idempotency-Key until it is accepted. The key makes every repeat the same message."""
    key = uuid.uuid4().hex

    async def accepted():
        r = await api.request(
            "POST",
            f"/v1/threads/{thread}/messages",
            headers={"Idempotency-Key": key},
            json={"text": text, "script": SCRIPT, "mode": "queue_after_active"},
        )
        if r.status_code >= 500:  # a typed, retryable refusal while the broker recovers, never an internal error
            assert (r.status_code, r.json()["error"]["code"]) in ((503, "unavailable"),), r.text
            return None
        assert r.status_code == 202, r.text
        return r.json()["run_id"]

    return await wait_for(accepted, timeout=60, interval=0.1, what=f"message {text!r} accepted")


async def _readable(log: EventLog, tenant: str, thread: str):
    try:
        return await log.read(tenant, thread)
    except Exception:  # the test's own connection fails over too
        return None


async def test_runs_complete_exactly_once_while_a_nats_node_is_killed_and_restarted(
    cluster_api, cluster_stack, cluster_nc
):
    api, cluster, js = cluster_api, cluster_stack.nats, cluster_nc.jetstream()
    log = EventLog(cluster_nc)
    threads = [await api.create_thread(title=f"failover {i}") for i in range(THREADS)]
    runs: dict[str, str] = {}
    for n, thread in enumerate(threads):
        for i in range(2):
            runs[await send_until_accepted(api, thread, f"before {n}.{i}")] = thread

    async def streaming():
        events = await _readable(log, api.tenant, threads[0]) or []
        return any(isinstance(e.data, ev.MessageDelta) for e in events)

    await wait_for(streaming, timeout=30, what="the first durable delta")

    for round_ in range(2):  # the second kill takes the new leader: the restarted node must have rejoined fully
        leader = (await js.stream_info(EVENTS_STREAM)).cluster.leader
        victim = cluster.node(leader)
        victim.kill()  # the node every append goes through: the stream must elect another leader
        for n, thread in enumerate(threads):  # while it is down
            runs[await send_until_accepted(api, thread, f"during {round_}.{n}")] = thread

        async def moved_on(leader=leader):
            try:
                info = await js.stream_info(EVENTS_STREAM)
            except Exception:
                return None
            return info.cluster.leader not in (None, leader)

        await wait_for(moved_on, timeout=60, what="a new TREADLE_EVENTS leader")
        await victim.start()  # the node comes back with its data and catches up
        await cluster.wait_healthy(timeout=60)

        await wait_caught_up(js)  # TREADLE_EVENTS whole on all three nodes again
        for n, thread in enumerate(threads):
            runs[await send_until_accepted(api, thread, f"after {round_}.{n}")] = thread

    for run_id in runs:
        await api.wait_run(run_id, timeout=120)
    await wait_caught_up(js)  # the reads below may go to any replica

    for thread in threads:
        events = await log.read(api.tenant, thread)
        assert len({e.id for e in events}) == len(events), "an event was appended twice"
        state = fold(events)
        ended = [e.data.run_id for e in events if isinstance(e.data, ev.RunEnded)]
        assert sorted(ended) == sorted(r.id for r in state.runs), "a run ended twice or never"
        assert sorted(r.id for r in state.runs) == sorted(r for r, t in runs.items() if t == thread)
        for run in state.runs:
            assert run.status == "completed", (run.id, run.status, run.error)
            # The failover cost time, not work: no provider host was taken for dead, no attempt was redone.
            assert [a.status for a in run.attempts] == ["completed"], (run.id, run.attempts)
            final = [m for m in state.messages if m.role == "assistant" and m.attempt_id == run.attempt.id]
            assert [m.text for m in final] == [REPLY]
        replay = encode_state(state)

        async def projected(thread=thread, replay=replay):
            r = await api.request("GET", f"/v1/threads/{thread}")
            return r.status_code == 200 and r.content == replay

        await wait_for(projected, timeout=60, what=f"projection of {thread} equals its log")

    report = await check_log(cluster_nc, api.tenant)
    assert report.ok, report.summary()
    assert report.runs == len(runs) == report.terminal_runs


async def test_a_tenant_credential_from_the_cli_works_while_a_node_is_down_and_is_revoked_on_every_node(
    cluster_api, cluster_stack, tmp_path
):
    api, cluster = cluster_api, cluster_stack.nats
    nats_args = ["--nats-dir", str(cluster.dir), "--nats-url", cluster_stack.nats_url]
    creds = tmp_path / "creds.json"
    code, out, err = await treadle(
        "consumers", "create", "--tenant", api.tenant, "--out", str(creds), *nats_args, cwd=tmp_path
    )
    assert code == 0, err
    issued = json.loads(creds.read_text())
    assert broker_urls.parse(issued["url"]).servers == [node.address for node in cluster.nodes]
    assert "treadle:" not in issued["url"]  # the service user's password is not handed out

    thread = await api.create_thread(title="tail on a cluster")
    down = cluster.nodes[0]
    down.kill()  # the credential lists every node: the tail connects to one that is up
    tail = ["events", "tail", "--creds", str(creds), "--type", "thread.created", "--idle-timeout", "5", "--limit", "1"]

    async def tailed():
        # Until the survivors have elected new leaders for what the dead node led, the JetStream API times out
        # and the tail says so and exits (run it again, as its help says); after that it reads.
        code, out, err = await treadle(*tail, cwd=tmp_path)
        assert code == 0 or ("timeout" in err and "Traceback" not in err), err
        return out if code == 0 else None

    out = await wait_for(tailed, timeout=90, interval=0.2, what="the tail through a surviving node")
    assert [json.loads(line)["thread"] for line in out.splitlines()] == [thread]

    # Revoked while a node is down: the running nodes reload now, the other reads auth.conf when it starts.
    code, out, err = await treadle("consumers", "revoke", issued["user"], *nats_args, cwd=tmp_path)
    assert code == 0, err
    await down.start()
    await cluster.wait_healthy(timeout=60)
    for node in cluster.nodes:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(
                node.address, user=issued["user"], password=issued["password"], allow_reconnect=False, connect_timeout=2
            )
