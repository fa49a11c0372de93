"""Issue 9, items 2-4 from the command line: an operator issues and revokes a tenant's consumer credential
and API tokens; the tenant tails its events durably, resuming where it stopped."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.test_cli import treadle
from tests.support.api import make_api
from tests.support.helpers import wait_for

pytestmark = pytest.mark.e2e


async def test_consumers_create_events_tail_resume_and_revoke(stack, stack_nc, tmp_path):
    tenant = f"tail-{time.time_ns()}"
    nats = ["--nats-dir", str(stack.nats.dir), "--nats-url", stack.nats_url]
    creds = tmp_path / "creds.json"
    code, out, err = await treadle("consumers", "create", "--tenant", tenant, "--out", str(creds), *nats, cwd=tmp_path)
    assert code == 0, err
    issued = json.loads(creds.read_text())
    consumer = await stack_nc.jetstream().consumer_info("TREADLE_EVENTS", issued["consumer"])
    assert consumer.config.deliver_subject is None  # a pull consumer, created by the operator
    assert issued["tenant"] == tenant and issued["filter"] == f"treadle.evt.{tenant}.>"
    assert "treadle:" not in issued["url"]  # the service user's password is not handed out

    api = await make_api(stack, stack_nc, tenant)
    try:
        thread = await api.create_thread(title="tail")
        runs = [(await api.send(thread, f"message {i}", mode="queue_after_active"))["run_id"] for i in range(2)]
        for run in runs:
            await api.wait_run(run)
    finally:
        await api.close()

    tail = [
        "events",
        "tail",
        "--creds",
        str(creds),
        "--tenant",
        tenant,
        "--type",
        "run.completed",
        "--idle-timeout",
        "2",
    ]
    code, out, err = await treadle(*tail, "--limit", "1", cwd=tmp_path)
    assert code == 0, err
    first = [json.loads(line) for line in out.splitlines()]
    assert [(e["type"], e["data"]["run_id"]) for e in first] == [("run.completed", runs[0])]

    # The first tail stopped after one event: the next resumes after it, at the second run.
    code, out, err = await treadle(*tail, cwd=tmp_path)
    assert code == 0, err
    assert [json.loads(line)["data"]["run_id"] for line in out.splitlines()] == [runs[1]]
    code, out, err = await treadle(*tail, cwd=tmp_path)
    assert code == 0 and out == "", (out, err)  # everything acked: nothing left
    # Going back is the operator's: the credential cannot recreate its consumer (it could make it a push
    # consumer delivering anywhere). The tail says so and changes nothing; `consumers reset` does it.
    code, out, err = await treadle(*tail, "--from-seq", str(first[0]["seq"]), cwd=tmp_path)
    assert code == 1 and out == "" and f"treadle consumers reset {issued['user']}" in err, (code, out, err)
    code, out, err = await treadle(
        "consumers",
        "reset",
        issued["user"],
        "--from-seq",
        str(first[0]["seq"]),
        "--type",
        "run.completed",
        *nats,
        cwd=tmp_path,
    )
    assert code == 0, err
    code, out, err = await treadle(*tail, cwd=tmp_path)
    assert [json.loads(line)["data"]["run_id"] for line in out.splitlines()] == runs  # replayed from a seq
    code, out, err = await treadle(*tail, "--type", "message.created", cwd=tmp_path)
    assert code == 1 and "run.completed only" in err, err  # the consumer now filters on its one type
    reset = json.loads(
        (
            await stack_nc.jetstream().get_last_msg("TREADLE_AUDIT", f"treadle.audit.{tenant}.broker_credential.reset")
        ).data
    )
    assert reset["target"] == issued["user"] and reset["details"]["from_seq"] == str(first[0]["seq"])
    code, out, err = await treadle("consumers", "reset", "--all", *nats, cwd=tmp_path)  # each where it was
    assert code == 0 and issued["user"] in out, err
    code, out, err = await treadle(*tail, cwd=tmp_path)
    assert code == 0 and out == "", (out, err)
    code, out, err = await treadle("consumers", "reset", "tc_nosuch", *nats, cwd=tmp_path)
    assert code == 1 and "no consumer credential tc_nosuch" in err
    code, out, err = await treadle("consumers", "create", "--tenant", tenant, "--type", "no.such", *nats, cwd=tmp_path)
    assert code == 1 and "unknown event type" in err and "Traceback" not in err

    code, out, err = await treadle("consumers", "list", *nats, cwd=tmp_path)
    assert issued["user"] in out
    code, out, err = await treadle("consumers", "revoke", issued["user"], *nats, cwd=tmp_path)
    assert code == 0, err

    async def refused():
        # While the server reloads its users a connection may be reset before it is told why: ask again.
        code, out, err = await treadle(*tail, cwd=tmp_path)
        assert code == 1 and "Traceback" not in err, (code, err)
        return "authorization violation" in err.lower()

    await wait_for(refused, timeout=20, interval=0.2, what="the revoked credential refused by the server")


async def test_tokens_revoke_by_id_is_audited(stack, stack_nc, tmp_path):
    tenant = f"tok-{time.time_ns()}"
    nats = ["--nats-url", stack.nats_url]
    code, out, err = await treadle("tokens", "create", "--tenant", tenant, "--user", "dave", *nats, cwd=tmp_path)
    assert code == 0, err
    token_id = re.search(r"token ([0-9a-f]{16})", err).group(1)
    code, out, err = await treadle("tokens", "revoke", "--id", token_id, *nats, cwd=tmp_path)
    assert code == 0, err
    code, out, err = await treadle("tokens", "revoke", "--id", token_id, *nats, cwd=tmp_path)
    assert code == 1 and "no token" in err
    js = stack_nc.jetstream()
    for action in ("token.created", "token.revoked"):
        record = json.loads((await js.get_last_msg("TREADLE_AUDIT", f"treadle.audit.{tenant}.{action}")).data)
        assert record["target"] == token_id and record["details"]["user"] == "dave"
