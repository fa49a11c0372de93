"""Every operation through the ``treadle`` command, as a script or a person runs it: separate processes against
the stack, judged by their JSON output (``--output json``), their exit codes, and a run's approval answered at
the terminal inside ``send --wait``."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripts import HANG, approval, question, script, text, write
from treadle.cli import exits
from treadle.cli.operations import COMMANDS
from treadle.client import AsyncTreadle
from treadle.ops.servers import free_port
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

TREADLE = str(Path(sys.executable).parent / "treadle")
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}, "COLUMNS": "200"}


class Cli:
    """``treadle … --api … --token …`` as a subprocess; records which commands ran with --output json."""

    def __init__(self, api_url: str, token: str, cwd: Path) -> None:
        self.api, self.cwd, self.json_commands = ["--api", api_url, "--token", token], cwd, set()

    async def run(self, *args: str, stdin: int | bytes | None = subprocess.DEVNULL) -> tuple[int, str, str]:
        feed = stdin if isinstance(stdin, bytes) else None
        proc = await asyncio.create_subprocess_exec(
            TREADLE,
            *args,
            *self.api,
            cwd=self.cwd,
            env=ENV,
            stdin=subprocess.PIPE if feed is not None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(feed), 120)
        return proc.returncode, out.decode(), err.decode()

    async def json(self, *args: str, code: int = 0, **kw) -> dict:
        """Run a command with --output json: its exit code is ``code`` and stdout (success; also the run that
        ended otherwise, exit 7) or the one stderr line (failure) is a JSON document."""
        got, out, err = await self.run(*args, "--output", "json", **kw)
        assert got == code, (args, got, out, err)
        self.json_commands.add(_command(args))
        if code == 0:
            return json.loads(out)
        if code == exits.RUN_NOT_COMPLETED:  # the run as it ended on stdout, the failure on stderr
            assert json.loads(out)["status"] != "completed"
        else:
            assert out == "", out
        assert "Traceback" not in err, err
        error = json.loads(err.strip().splitlines()[-1])["error"]
        assert error["exit"] == code
        return error


def _command(args: tuple[str, ...]) -> str:
    """The command path of an argument list (``("queue", "edit", "thr_…")`` → ``queue edit``)."""
    known = set(COMMANDS.values()) | {"steer", "switch", "runs wait"}
    words = [a for a in args[:2] if not a.startswith("-")]
    return " ".join(words) if " ".join(words) in known else words[0]


@pytest.fixture
async def cli(stack, stack_nc, tenant, tmp_path):
    return Cli(stack.api_url, await TokenStore(stack_nc.jetstream()).create(tenant, "alice"), tmp_path)


def script_file(tmp_path: Path, name: str, body: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(body))
    return str(path)


async def test_L3_6_L10_L6_every_operation_through_the_cli_answers_parseable_json(
    cli, stack, stack_nc, tenant, tmp_path
):
    thread = (await cli.json("threads", "create", "--title", "cli ops"))["thread_id"]
    one = script_file(tmp_path, "one", script(write("one.txt", "1\n"), {"type": "plan", "text": "ship it"}, text("1")))
    run1 = await cli.json("send", thread, "one", "--script", one, "--wait")
    assert run1["status"] == "completed" and run1["checkpoint"]["files"][0]["path"] == "one.txt"
    assert thread in [t["id"] for t in (await cli.json("threads", "list", "--all"))["items"]]
    searched = (await cli.json("threads", "list", "--all", "--search", "CLI OPS"))["items"]
    assert thread in [t["id"] for t in searched] and all("cli ops" in t["title"].lower() for t in searched)
    assert (await cli.json("threads", "list", "--search", "no such title here"))["items"] == []
    assert (await cli.json("threads", "show", thread))["runs"][0]["id"] == run1["id"]
    assert (await cli.json("runs", "show", run1["id"]))["status"] == "completed"

    # diff: a run's own change, and between two runs' checkpoints
    assert "+1" in (await cli.json("runs", "diff", run1["id"]))["patch"]
    diff = await cli.json("diff", thread, "--from", "0", "--to", "1")
    assert [f["path"] for f in diff["files"]] == ["one.txt"] and diff["to"]["ordinal"] == 1

    # the queue: edit, reorder, cancel behind a hanging run
    active = await cli.json("send", thread, "hang", "--script", script_file(tmp_path, "hang", script(HANG)))
    async with AsyncTreadle(stack.api_url, cli.api[3]) as sdk:
        running = await sdk.wait_run(active["run_id"], timeout=30, statuses={"running"})
    queued = [(await cli.json("send", thread, f"q{i}", "--mode", "queue_after_active"))["run_id"] for i in range(3)]
    await cli.json("queue", "edit", thread, queued[0], "q0 edited")
    await cli.json("queue", "reorder", thread, queued[2], queued[0], queued[1])
    await cli.json("queue", "cancel", thread, queued[1])
    queue = await cli.json("queue", "list", thread)
    assert [(q["run_id"], q["text"]) for q in queue["queue"]] == [(queued[2], "q2"), (queued[0], "q0 edited")]
    again = await cli.json("queue", "cancel", thread, queued[1], code=exits.CONFLICT)
    assert again["code"] == "run_not_queued"
    root = next(n.id for n in running.nodes if n.kind == "root_turn")
    assert (await cli.json("nodes", "interrupt", root))["run_id"] == active["run_id"]
    assert (await cli.json("runs", "wait", active["run_id"], code=exits.RUN_NOT_COMPLETED))["code"] == "RunNotCompleted"
    assert (await cli.json("runs", "wait", queued[0]))["status"] == "completed"  # the queue went on in its order
    ended = await cli.json("runs", "interrupt", queued[0], code=exits.CONFLICT)  # ended already: refused
    assert ended["code"] == "run_not_active"

    # lists: runs, messages, activity, requests, checkpoints, handoffs
    runs = await cli.json("runs", "list", thread, "--limit", "2")
    assert len(runs["items"]) == 2 and runs["next_cursor"]
    assert len((await cli.json("runs", "list", thread, "--all"))["items"]) == 5
    assert "q0 edited" in [m["text"] for m in (await cli.json("messages", thread, "--all"))["items"]]
    assert (await cli.json("activity", thread))["items"]
    assert (await cli.json("requests", "list", thread))["items"] == []
    checkpoints = (await cli.json("checkpoints", thread, "--all"))["items"]
    assert {c["ordinal"] for c in checkpoints} >= {0, 1}

    # fork, lineage, provider switch and its handoff, a plan implemented
    forked = await cli.json("fork", thread, "--run", run1["id"], "--title", "the fork")
    assert forked["parent_thread_id"] == thread
    lineage = await cli.json("lineage", thread)
    assert forked["thread_id"] in [c["thread_id"] for c in lineage["tree"]["children"]]
    echo = script_file(tmp_path, "echo", script({"type": "echo"}))
    switched = await cli.json("switch", thread, "review", "--to", "scripted-b", "--script", echo, "--wait")
    [handoff] = (await cli.json("handoffs", "list", thread))["items"]
    assert handoff["run_id"] == switched["id"] and switched["provider"] == "scripted-b"
    assert (await cli.json("handoffs", "show", handoff["id"]))["thread_id"] == thread
    plan = (await cli.json("threads", "show", thread))["plans"][0]["id"]
    implemented = await cli.json("plans", "implement", plan)
    assert implemented["plan_id"] == plan and (await cli.json("runs", "wait", implemented["run_id"]))

    # steer the active run, then roll the thread back to run 1
    hanging = await cli.json("send", thread, "hang again", "--script", script_file(tmp_path, "hang2", script(HANG)))
    async with AsyncTreadle(stack.api_url, cli.api[3]) as sdk:
        await sdk.wait_run(hanging["run_id"], timeout=30, statuses={"running"})
    steered = await cli.json(
        "steer", thread, "stop hanging", "--restart", "--script", script_file(tmp_path, "t", script(text("ok")))
    )
    assert steered["run_id"] == hanging["run_id"] and steered["disposition"] == "restarting"
    assert (await cli.json("runs", "wait", hanging["run_id"]))["status"] == "completed"
    rolled = await cli.json("rollback", thread, "1")
    assert rolled["status"] == "completed" and queued[0] in rolled["rolled_back_run_ids"]
    assert (await cli.json("runs", "show", queued[0]))["status"] == "rolled_back"
    node = await cli.json("nodes", "rollback", root, "ckpt_" + "0" * 26, "--thread", thread, code=exits.NOT_FOUND)
    assert node["status"] == 404  # not a checkpoint of that node: refused, typed, nothing restored

    # the events, as JSON lines from a stream the test stops
    proc = await asyncio.create_subprocess_exec(
        TREADLE, "watch", thread, "--output", "json", *cli.api, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    lines = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)) for _ in range(3)]
    proc.send_signal(2)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert [line["event"] for line in lines][0] == "thread.created" and lines[0]["id"] < lines[1]["id"]
    cli.json_commands.add("watch")

    # the tenant's policy: admins only
    assert (await cli.json("policy", "get", code=exits.FAILED))["status"] == 403
    admin = Cli(stack.api_url, await TokenStore(stack_nc.jetstream()).create(tenant, "root", "admin"), tmp_path)
    modes = ["approval_required", "auto_accept_edits"]
    put = await admin.json("policy", "put", *(f"--allow-mode={m}" for m in modes), "--max-queued-runs", "9")
    assert put["max_queued_runs"] == 9 and (await admin.json("policy", "get"))["allowed_modes"] == modes
    delegation = ["--max-delegation-depth", "2", "--max-children-per-run", "4", "--max-running-children", "6"]
    put = await admin.json("policy", "put", *delegation, "--no-cascade-interrupts")
    bounds = {k: put[k] for k in ("max_delegation_depth", "max_children_per_run", "max_running_children")}
    assert bounds == {"max_delegation_depth": 2, "max_children_per_run": 4, "max_running_children": 6}
    assert put["cascade_interrupts"] is False and put["max_queued_runs"] is None  # the whole policy, replaced
    refused = await admin.json("policy", "put", "--max-children-per-run", "0", code=exits.FAILED)
    assert (refused["status"], refused["code"]) == (400, "invalid_policy")
    assert (await admin.json("policy", "get"))["max_children_per_run"] == 4
    cli.json_commands |= admin.json_commands

    # schedules: a thread's (paused: the session stack's scheduler runs on the real clock) and the tenant's
    made = await cli.json("schedules", "create", "tick", "--thread", thread, "--cron", "0 9 * * mon", "--paused")
    sid = made["schedule"]["schedule_id"]
    assert (await cli.json("schedules", "list", "--thread", thread))["schedules"][0]["schedule_id"] == sid
    assert len((await cli.json("schedules", "show", sid, "--count", "3"))["next_firings"]) == 0  # paused
    changed = await cli.json("schedules", "update", sid, "--thread", thread, "--timezone", "Europe/Berlin")
    assert changed["schedule"]["timezone"] == "Europe/Berlin"
    assert len((await cli.json("schedules", "resume", sid))["next_firings"]) == 5
    assert (await cli.json("schedules", "pause", sid, "--thread", thread))["schedule"]["paused"] is True
    bad = await cli.json("schedules", "create", "x", "--interval-seconds", "5", code=exits.FAILED)
    assert (bad["status"], bad["code"]) == (400, "invalid_interval")
    assert (await cli.json("schedules", "delete", sid))["deleted"] is True

    # L1.3, L1.4 on the fork, last (nothing after reads it): renamed, archived and back, then deleted
    fork = forked["thread_id"]
    assert (await cli.json("threads", "rename", fork, "the fork, renamed"))["changed"] is True
    assert (await cli.json("threads", "archive", fork))["changed"] is True
    assert (await cli.json("threads", "unarchive", fork))["changed"] is True
    assert (await cli.json("threads", "delete", fork, "--yes"))["thread_id"] == fork

    uncovered = set(COMMANDS.values()) - cli.json_commands
    # requests answer: in the test below; webhooks: tests/e2e/test_webhooks.py drives them through the CLI on a
    # stack whose receivers are allow-listed (this session stack sends nowhere)
    assert uncovered == {"requests answer"} | {c for c in COMMANDS.values() if c.startswith("webhooks ")}


async def test_L11_1_send_wait_asks_for_the_approval_on_the_terminal_and_the_run_completes(cli, tmp_path):
    thread = (await cli.json("threads", "create"))["thread_id"]
    body = script_file(tmp_path, "deploy", script(approval("deploy now?"), write("d.txt", "d\n"), text("deployed")))
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        TREADLE, "send", thread, "deploy", "--script", body, "--wait", *cli.api,
        env=ENV, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(slave)
    asked = b""
    while b"accept for [s]ession" not in asked:
        chunk = await asyncio.wait_for(proc.stderr.read(4096), 60)
        assert chunk, f"the CLI ended without asking: {asked!r}"
        asked += chunk
    assert b"deploy now?" in asked
    os.write(master, b"a\n")
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    os.close(master)
    assert proc.returncode == 0, (out, asked + err)
    assert b"answered req_" in err and b"deployed" in out and b"completed" in out
    [request] = (await cli.json("requests", "list", thread))["items"]
    assert (request["status"], request["response"]) == ("resolved", {"decision": "accept"})


async def test_L11_4_a_question_is_answered_from_piped_stdin_and_without_input_the_cli_exits_6(cli, tmp_path):
    thread = (await cli.json("threads", "create"))["thread_id"]
    ask = script_file(tmp_path, "ask", script(question("which db?", ["sqlite", "postgres"]), text("noted")))
    run = await cli.json("send", thread, "pick", "--script", ask, "--wait", stdin=b"2\n")
    assert run["status"] == "completed"
    [answered] = (await cli.json("requests", "list", thread))["items"]
    assert answered["response"] == {"answers": {"0": "postgres"}}  # the question (id 0) answered by its option

    # --no-input: the run waits for an answer, the CLI says how to give it and exits 6 instead of hanging
    error = await cli.json("send", thread, "again", "--script", ask, "--wait", "--no-input", code=exits.NEEDS_INPUT)
    [pending] = (await cli.json("requests", "list", thread, "--status", "pending"))["items"]
    assert f"treadle requests answer {pending['id']}" in error["message"]
    # hostile answers: a decision for a question, and an unknown request
    bad = await cli.json("requests", "answer", pending["id"], "--decision", "accept", code=exits.FAILED)
    assert bad["code"] == "invalid_response"
    assert await cli.json("requests", "answer", "req_" + "0" * 26, "--message", "x", code=exits.NOT_FOUND)
    ack = await cli.json("requests", "answer", pending["id"], "--message", "sqlite")
    assert ack["thread_id"] == thread
    assert (await cli.json("runs", "wait", pending["run_id"]))["status"] == "completed"
    assert await cli.json("requests", "answer", pending["id"], "--message", "twice", code=exits.CONFLICT)


async def test_exit_codes_say_what_happened(cli, tmp_path):
    assert (await cli.json("threads", "show", "thr_" + "0" * 26, code=exits.NOT_FOUND))["code"] == "thread_not_found"
    assert (await cli.json("runs", "show", "run_NOT-AN-ID", code=exits.FAILED))["code"] == "invalid_id"
    code, _, err = await cli.run("queue", "reorder")
    assert code == exits.USAGE and "usage:" in err
    thread = (await cli.json("threads", "create"))["thread_id"]
    # hostile values: refused, typed, nothing changed
    assert (await cli.json("runs", "list", thread, "--limit", "0", code=exits.FAILED))["code"] == "invalid_parameter"
    huge = await cli.json("rollback", thread, str(2**40), code=exits.FAILED)
    assert huge["status"] == 400
    assert (await cli.json("diff", thread, "--from", "3", "--to", "1", code=exits.FAILED))["code"] == "invalid_range"
    assert (await cli.json("runs", "list", thread))["items"] == []
    failing = script_file(tmp_path, "fail", script({"type": "fail", "message": "boom"}))
    error = await cli.json("send", thread, "fail", "--script", failing, "--wait", code=exits.RUN_NOT_COMPLETED)
    assert "failed" in error["message"]
    nobody = Cli(f"http://127.0.0.1:{free_port()}", "trd_x", tmp_path)
    assert (await nobody.json("threads", "list", code=exits.UNAVAILABLE))["code"] == "unreachable"
    code, out, _ = await cli.run("--version")
    assert code == 0 and out.startswith("treadle ")


async def test_L11_1_watch_asks_for_an_approval_on_the_terminal_while_it_follows_the_thread(cli, stack):
    thread = (await cli.json("threads", "create"))["thread_id"]
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        TREADLE, "watch", thread, *cli.api, env=ENV, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(slave)
    async with AsyncTreadle(stack.api_url, cli.api[3]) as sdk:
        sent = await sdk.send_message(thread, "ls", script=script(approval("list the files?"), text("listed")))
        asked = b""
        while b"accept for [s]ession" not in asked:
            chunk = await asyncio.wait_for(proc.stderr.read(4096), 60)
            assert chunk, f"watch ended without asking: {asked!r}"
            asked += chunk
        assert b"list the files?" in asked
        os.write(master, b"d\n")
        run = await sdk.wait_run(sent.run_id, timeout=60)
        [request] = [r async for r in await sdk.list_requests(thread)]
    proc.send_signal(2)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    os.close(master)
    assert proc.returncode == 0 and b"request.resolved" in out
    assert request.response == {"decision": "decline"} and run.status == "completed"
    assert "listed" not in [m.text for m in run.messages]  # the declined approval gated the step after it


async def test_the_operator_commands_answer_json_too(stack, tmp_path):
    nats = ["--nats-url", stack.nats_url]
    ops = Cli("", "", tmp_path)
    ops.api = []  # operator commands talk to NATS, Redis and the nats-server's directory, not to the API
    issued = await ops.json("tokens", "create", "--tenant", "opsjson", "--user", "bob", *nats)
    assert issued["token"].startswith("trd_") and (issued["tenant"], issued["role"]) == ("opsjson", "member")
    assert (await ops.json("tokens", "revoke", "--id", issued["id"], *nats))["user"] == "bob"
    assert (await ops.json("tokens", "revoke", "--id", issued["id"], *nats, code=exits.FAILED))["message"]
    nats_dir = ["--nats-dir", str(stack.nats.dir), "--no-reload", *nats]
    cred = await ops.json("consumers", "create", "--tenant", "opsjson", *nats_dir)
    assert cred["user"] in [c["id"] for c in (await ops.json("consumers", "list", *nats_dir))["items"]]
    assert (await ops.json("consumers", "reset", cred["user"], "--from-seq", "1", *nats_dir))["from_seq"] == 1
    assert (await ops.json("consumers", "revoke", cred["user"], *nats_dir))["revoked"] == cred["user"]
    redis = ["--redis-url", stack.redis_url]
    assert (await ops.json("projections", "rebuild", *redis, *nats))["rebuilt"] >= 0
    assert (await ops.json("check", "--settle", "5", *redis, *nats))["ok"] is True
    assert (await ops.json("schemas", "--check"))["stale"] == []
