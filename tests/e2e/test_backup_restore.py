"""Issue 41, item 4: back up a running deployment, destroy it, restore the backup into a new broker, and every
thread reads and runs as before. `treadle backup` snapshots every stream, KV bucket and the checkpoint object
store of a live stack (JetStream's own snapshots); the stack and its state directory are then deleted whole
(broker store, Redis, workspaces); `treadle restore` hands the snapshots to a fresh nats-server, and a new
stack on it (a new, empty Redis, no workspace) answers the old token, shows every thread as it was, keeps the
sequences and runs a next message on each thread, whose workspace comes back from its checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys

import nats

from tests.support.api import Api, make_api
from tests.support.helpers import quiet
from tests.support.scripts import script, text, write
from treadle.cli.stack import Stack
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsServer


async def _cli(*args: str, expect: int = 0) -> dict:
    env = {**os.environ, "TREADLE_NATS_USER": "", "TREADLE_NATS_PASSWORD": ""}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "treadle.cli.main", "-o", "json", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == expect, err.decode()
    return json.loads(out if expect == 0 else err.splitlines()[-1])


async def _events(nats_url: str, tenant: str, threads: list[str]) -> dict[str, list[tuple[int | None, str, str]]]:
    nc = await nats.connect(nats_url)
    try:
        log = EventLog(nc)
        return {t: [(e.seq, e.id, e.type) for e in await log.read(tenant, t)] for t in threads}
    finally:
        await nc.close()


async def _snapshot(api: Api, threads: list[str]) -> dict:
    """What a client reads of each thread: its document and its runs."""
    seen = {}
    for thread in threads:
        doc = await api.thread(thread)
        runs = (await api.request("GET", f"/v1/threads/{thread}/runs")).json()["items"]
        seen[thread] = {
            "title": doc.get("title"),
            "runs": [(r["id"], r["ordinal"], r["status"]) for r in runs],
            "messages": [(m["id"], m["role"], m.get("text")) for m in doc.get("messages", [])],
        }
    return seen


async def test_a_backup_of_a_running_stack_restores_into_a_new_one_that_reads_and_runs_every_thread(tmp_path):
    backup_dir = tmp_path / "backup"
    async with Stack(tmp_path / "old", on_output=quiet) as old:
        nc = await nats.connect(old.nats_url)
        api = await make_api(old, nc, "keeper")
        token = api.headers["Authorization"]
        try:
            first = await api.create_thread(title="with a file")
            done = await api.send(first, "write", script=script(write("kept.txt", "from before\n"), text("ok")))
            await api.wait_run(done["run_id"])
            second = await api.create_thread(title="with a failure")
            await api.wait_run((await api.send(second, "hi", script=script(text("hello"))))["run_id"])
            failed = await api.send(second, "fail", script=script({"type": "fail", "message": "boom"}))
            await api.wait_run(failed["run_id"], "failed")
            before = await _snapshot(api, [first, second])
            logged = await _events(old.nats_url, "keeper", [first, second])
            backed = await _cli("backup", str(backup_dir), "--nats-url", old.nats_url)  # while it runs
        finally:
            await api.close()
            await nc.close()
    shutil.rmtree(tmp_path / "old")  # the deployment is gone: broker store, Redis, workspaces

    streams = {s["stream"]: s for s in backed["streams"]}
    assert {"TREADLE_EVENTS", "KV_treadle-tokens", "OBJ_treadle-checkpoints"} <= set(streams), streams
    assert not {"KV_treadle-hosts", "KV_treadle-volumes", "KV_treadle-leases"} & set(streams)
    assert streams["TREADLE_EVENTS"]["messages"] > 10 and streams["OBJ_treadle-checkpoints"]["bytes"] > 0

    broker = NatsServer(tmp_path / "new-nats")
    await broker.start()
    try:
        restored = await _cli("restore", str(backup_dir), "--nats-url", broker.url)
        assert {s["stream"] for s in restored["streams"]} == set(streams)
        print(f"backup {backed['seconds']} s, restore {restored['seconds']} s:", json.dumps(restored["streams"]))
        async with Stack(tmp_path / "new", nats_url=broker.url, on_output=quiet) as new:
            api = Api(new.api_url, token.removeprefix("Bearer "), "keeper")  # the token lives in a KV bucket
            try:
                after = await _snapshot(api, [first, second])
                assert after == before  # same runs and messages
                # every event at its own sequence; the new provider host only adds that the old sessions are gone
                now = await _events(broker.url, "keeper", [first, second])
                for thread, events in logged.items():
                    assert now[thread][: len(events)] == events
                    assert {kind for _, _, kind in now[thread][len(events) :]} <= {"provider.stopped"}, now[thread]
                for thread, ordinal in ((first, 2), (second, 3)):
                    sent = await api.send(thread, "again", script=script(write("new.txt", "after\n"), text("ok")))
                    run = await api.wait_run(sent["run_id"])
                    assert run["ordinal"] == ordinal and run["status"] == "completed", run
                # the first thread's workspace came back from its checkpoint, under the new run's file
                workspace = new.workspace_of("keeper", first)
                assert (workspace / "kept.txt").read_text() == "from before\n"
                assert (workspace / "new.txt").read_text() == "after\n"
            finally:
                await api.close()
        # a second restore onto what is there now is refused whole: a restore never merges
        refused = await _cli("restore", str(backup_dir), "--nats-url", broker.url, expect=1)
        assert "already has" in refused["error"]["message"], refused
    finally:
        await broker.stop()
