"""``treadle check`` against a live stack: a clean stack passes; a corrupted Redis document is named, with the
field that differs from the log's replay, and the command exits non-zero."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec
import pytest
from redis.asyncio import Redis

from tests.e2e.test_cli import treadle
from tests.support.scripts import script, text, write
from treadle.core import events as ev

pytestmark = pytest.mark.e2e


async def _two_runs(api) -> str:
    thread = await api.create_thread(title="checked")
    first = await api.send(thread, "write it", script=script(text("done."), write("a.txt", "one\n")))
    await api.wait_run(first["run_id"])
    second = await api.send(thread, "again", script=script(text("again done.")))
    await api.wait_run(second["run_id"])
    return thread


async def _check(stack, tenant: str, tmp_path, *more: str) -> tuple[int, str, str]:
    return await treadle(
        "check", "--nats-url", stack.nats_url, "--redis-url", stack.redis_url, "--tenant", tenant, *more, cwd=tmp_path
    )


async def test_check_passes_on_a_clean_stack(api, stack, tmp_path):
    thread = await _two_runs(api)
    code, out, err = await _check(stack, api.tenant, tmp_path, "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] and report["problems"] == []
    assert (report["threads"], report["runs"], report["terminal_runs"], report["projections"]) == (1, 2, 2, 1)
    assert thread


async def test_check_reports_a_corrupted_redis_document(api, stack, tmp_path):
    thread = await _two_runs(api)
    key = f"treadle:{{{api.tenant}}}:thread:{thread}"
    redis = Redis.from_url(stack.redis_url)
    try:
        original = await redis.hget(key, "l:runs:1")
        run = json.loads(original)
        # The scenario is a projection that drifted from the log: write the drift straight into Redis.
        await redis.hset(key, "l:runs:1", json.dumps({**run, "status": "failed"}, separators=(",", ":")))
        try:
            code, out, err = await _check(stack, api.tenant, tmp_path, "--settle", "0")
            assert code == 1, out + err
            assert "projection_mismatch" in out and "runs[1].status" in out and key in out, out
            code, out, _ = await _check(stack, api.tenant, tmp_path, "--settle", "0", "--json")
            problems = json.loads(out)["problems"]
            assert code == 1 and [p["kind"] for p in problems] == ["projection_mismatch"]
            assert '"completed"' in problems[0]["detail"] and '"failed"' in problems[0]["detail"]
        finally:
            await redis.hset(key, "l:runs:1", original)
        code, out, err = await _check(stack, api.tenant, tmp_path)
        assert code == 0 and "0 problem(s)" in out, out + err
    finally:
        await redis.aclose()


async def test_check_reports_a_document_the_log_does_not_know(api, stack, tmp_path):
    await _two_runs(api)
    redis = Redis.from_url(stack.redis_url)
    ghost = f"treadle:{{{api.tenant}}}:thread:thr_ghost"
    try:
        await redis.hset(ghost, mapping={"seq": 1, "f:seq": 1})
        code, out, err = await _check(stack, api.tenant, tmp_path, "--settle", "0", "--json")
        assert code == 1, out + err
        assert [p["kind"] for p in json.loads(out)["problems"]] == ["projection_orphan"]
    finally:
        await redis.delete(ghost)


async def test_check_reports_a_thread_whose_home_is_not_a_live_volume(api, stack, log, tmp_path):
    """Issue 35: a thread living on a volume no checkpoint service announces (a node lost) is named."""
    await _two_runs(api)  # on "local", which the stack's checkpoint service announces
    stranded = "thr_stranded"
    created = ev.ThreadCreated(thread_id=stranded, workspace=f"threads/{stranded}", created_by="u", volume="gone-node")
    envelope = ev.Envelope(
        id=f"evt_{api.tenant}_stranded", type=ev.ThreadCreated.TYPE, tenant=api.tenant, thread=stranded,
        at=datetime.now(UTC), command_id="cmd_stranded", actor="test", data=created,
    )  # fmt: skip
    seq = await log.append(api.tenant, stranded, 0, [envelope])
    try:
        code, out, err = await _check(stack, api.tenant, tmp_path, "--json")
        problems = json.loads(out)["problems"]
        assert code == 1 and [(p["kind"], p["subject"]) for p in problems] == [
            ("home_not_live", f"treadle.evt.{api.tenant}.{stranded}")
        ], out + err
        assert "gone-node" in problems[0]["detail"]
    finally:  # the stack is shared: later checks of the whole log must find every home live
        moved = ev.ThreadMoved(from_volume="gone-node", to_volume="local", reason="test")
        home = msgspec.structs.replace(envelope, id=f"evt_{api.tenant}_rehomed", type=ev.ThreadMoved.TYPE, data=moved)
        await log.append(api.tenant, stranded, seq, [msgspec.structs.replace(home, command_id="cmd_rehomed")])
