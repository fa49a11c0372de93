"""Issue 9, item 5: malformed and adversarial payloads published straight onto the command subjects and
the provider event stream. Workers reject them or dead-letter them; none crashes or stops serving; no
corrupt event is appended; the event-log invariant check stays clean for the attacker and a bystander."""

from __future__ import annotations

import copy
import json
import random
import time
from datetime import UTC, datetime

import msgspec
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.api import make_api
from tests.support.helpers import wait_for
from treadle.cli.stack import WORKERS
from treadle.core.commands import Reply
from treadle.projections.check import check_log
from treadle.runtime import partitions

pytestmark = pytest.mark.e2e

SEED = 9
MUTATIONS = 120
HOSTILE_VALUES = [
    None,
    True,
    0,
    -1,
    2**63,
    1e308,
    "",
    "x" * 70_000,
    "thr_x.>",
    "*",
    ">",
    "../../etc/passwd",
    "\u0000\ud7ff\U0001f600",
    [],
    {},
    [[[[[]]]]],
    {"type": "thread.create"},
    {"$ref": "#"},
]


def _mutations(base: dict, rng: random.Random, count: int) -> list[bytes]:
    """Random structural mutations of a valid document: a value replaced by a hostile one, a key dropped or
    added, or the encoded bytes truncated or flipped."""
    out = []
    for _ in range(count):
        doc = copy.deepcopy(base)
        node, key = doc, rng.choice(list(doc))
        while isinstance(node[key], (dict, list)) and node[key] and rng.random() < 0.6:  # descend at random
            node = node[key]
            key = rng.choice(list(node) if isinstance(node, dict) else range(len(node)))
        how = rng.choice(["replace", "replace", "drop", "add", "truncate", "flip"])
        if how == "replace":
            node[key] = rng.choice(HOSTILE_VALUES)
        elif how == "drop" and isinstance(node, dict):
            node.pop(key)
        elif how == "add" and isinstance(node, dict):
            node[rng.choice(["zz", "type", "tenant", "__proto__"])] = rng.choice(HOSTILE_VALUES)
        data = json.dumps(doc).encode()
        if how == "truncate":
            data = data[: rng.randrange(len(data))]
        elif how == "flip":
            i = rng.randrange(len(data))
            data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
        out.append(data)
    return out


def _raw_hostile() -> list[bytes]:
    return [
        b"",
        b"null",
        b"[]",
        b"{}",
        b"\xff\xfe\x00\x01",
        b"{" * 100_000,
        b"[" * 100_000,
        json.dumps({"x": "y" * 900_000}).encode(),
        b'{"id": 1e999999}',
        b"\x00" * 1024,
    ]


def _command(tenant: str, thread: str | None, body: dict, **over) -> dict:
    doc = {
        "id": f"cmd_fuzz{random.getrandbits(40):x}",
        "tenant": tenant,
        "user": "mallory",
        "thread": thread,
        "issued_at": datetime.now(UTC).isoformat(),
        "body": body,
    }
    doc.update(over)
    return doc


def _command_cases(tenant: str, thread: str, victim: str, victim_thread: str) -> list[tuple[str, bytes]]:
    send = f"treadle.cmd.{tenant}.thread.send"
    create = f"treadle.cmd.{tenant}.thread.create"
    valid_send = _command(tenant, thread, {"type": "thread.send", "text": "hi"})
    cases = [(send, raw) for raw in _raw_hostile()] + [(create, raw) for raw in _raw_hostile()]
    targeted = [
        _command(victim, victim_thread, {"type": "thread.send", "text": "hijack"}),  # tenant ≠ subject
        _command(tenant, victim_thread, {"type": "thread.send", "text": "hijack"}),  # another tenant's thread
        *(
            _command(tenant, bad, {"type": "thread.send", "text": "x"})
            for bad in ("thr_x.>", "*", ">", "", "a" * 65, "thr_\u0000", "../thr_x")
        ),
        _command(tenant, thread, {"type": "thread.send", "text": "x" * 100_001}),
        _command(tenant, thread, {"type": "thread.destroy"}),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "mode": "detonate"}),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "target_run_id": "run_nope"}),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "script": {"steps": "all of them"}}),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "script": {"steps": [{"type": "rm -rf"}]}}),
        _command(
            tenant,
            thread,
            {
                "type": "thread.send",
                "text": "x",
                "script": {"steps": [{"type": "text", "text": "x", "chunk": 0, "delay_ms": -5}]},
            },
        ),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "script": {"steps": _nested_subagents(50)}}),
        _command(tenant, thread, {"type": "thread.send", "text": "x", "provider": "skynet"}),
        _command(tenant, thread, {"type": "thread.send", "text": "x"}, issued_at="yesterday"),
        _command(tenant, thread, {"type": "thread.send", "text": "x"}, id=""),
        _command(tenant, None, {"type": "thread.create", "title": "t" * 10_000}),
        _command(tenant, None, {"type": "thread.create", "provider": "skynet"}),
        _command(tenant, None, {"type": "thread.create", "runtime_mode": "god_mode"}),
    ]
    cases += [(send if c["body"].get("type") != "thread.create" else create, json.dumps(c).encode()) for c in targeted]
    cases += [(f"treadle.cmd.{victim}.thread.send", json.dumps(valid_send).encode())]  # subject of another tenant
    cases += [(send, m) for m in _mutations(valid_send, random.Random(SEED), MUTATIONS)]
    return cases


def _nested_subagents(depth: int) -> list[dict]:
    steps: list[dict] = [{"type": "text", "text": "deep"}]
    for _ in range(depth):
        steps = [{"type": "subagent", "title": "s", "steps": steps}]
    return steps


def _provider_event(tenant: str, thread: str, run: dict, body: dict, **over) -> dict:
    doc = {
        "id": f"pe_fuzz{random.getrandbits(40):x}",
        "tenant": tenant,
        "thread": thread,
        "session_id": run["attempts"][-1].get("session_id") or "ps_x",
        "run_id": run["id"],
        "attempt_id": run["attempts"][-1]["id"],
        "index": 99,
        "at": datetime.now(UTC).isoformat(),
        "body": body,
    }
    doc.update(over)
    return doc


def _provider_cases(
    tenant: str, thread: str, run: dict, victim: str, victim_thread: str, victim_run: dict
) -> list[tuple[str, bytes]]:
    subject = f"treadle.prov.{tenant}.{thread}.pth_fuzz"
    done = {"type": "turn.completed", "status": "completed"}
    text = {"type": "text.delta", "message_id": "msg_fuzz", "node_id": "node_fuzz", "text": "injected"}
    cases = [(subject, raw) for raw in _raw_hostile()]
    cases += [(s, b"{}") for s in (f"treadle.prov.{tenant}", f"treadle.prov.{tenant}.{thread}", "treadle.prov.x")]
    adversarial = [
        (subject, _provider_event(victim, victim_thread, victim_run, text)),  # payload names the victim
        (f"treadle.prov.{victim}.{victim_thread}.pth_x", _provider_event(victim, victim_thread, victim_run, done)),
        (subject, _provider_event(tenant, thread, run, done)),  # its run already ended
        (subject, _provider_event(tenant, thread, run, text, run_id="run_nope")),
        (subject, _provider_event(tenant, thread, run, done, attempt_id="att_nope", index=-1)),
        (
            subject,
            _provider_event(tenant, thread, run, {"type": "session.stopped", "reason": "x"}, session_id="ps_nope"),
        ),
        (subject, _provider_event(tenant, thread, run, {"type": "warp.drive"})),
        (subject, _provider_event(tenant, thread, run, text, at="never")),
        (subject, _provider_event(tenant, thread, run, text, index=2**70)),
    ]
    cases += [(s, json.dumps(doc).encode()) for s, doc in adversarial]
    base = _provider_event(tenant, thread, run, text)
    cases += [(subject, m) for m in _mutations(base, random.Random(SEED + 1), MUTATIONS)]
    return cases


async def _thread_with_completed_run(api) -> tuple[str, dict]:
    thread = await api.create_thread(title="fuzz")
    run_id = (await api.send(thread, "hello"))["run_id"]
    return thread, await api.wait_run(run_id)


async def test_hostile_command_and_provider_payloads_are_rejected_and_leave_the_log_clean(stack, stack_nc):
    tenant, victim = f"fuzz-{time.time_ns()}", f"fuzzv-{time.time_ns()}"
    api, victim_api = await make_api(stack, stack_nc, tenant), await make_api(stack, stack_nc, victim)
    try:
        thread, run = await _thread_with_completed_run(api)
        victim_thread, victim_run = await _thread_with_completed_run(victim_api)
        js = stack_nc.jetstream()
        victim_seq = (await js.get_last_msg("TREADLE_EVENTS", f"treadle.evt.{victim}.>", direct=True)).seq
        restarts = {name: stack.processes.restarts(name) for name in WORKERS}

        replies: dict[str, int] = {}
        internal: dict[str, int] = {}
        for subject, payload in _command_cases(tenant, thread, victim, victim_thread):
            try:
                reply = await stack_nc.request(subject, payload, timeout=10)
                outcome = type(msgspec.json.decode(reply.data, type=Reply)).__name__
            except (NatsTimeout, NoRespondersError) as exc:
                outcome = f"no reply ({type(exc).__name__})"
            replies[outcome] = replies.get(outcome, 0) + 1
        # What a tenant's credential could once make the server deliver onto the internal request subjects
        # (a push consumer's deliver_subject, a pull request's reply subject), before credentials had accounts
        # of their own (test_tenant_isolation): the tenant's own event envelopes. Defence in depth: each must
        # be refused like any other malformed request.
        own_event = (await js.get_last_msg("TREADLE_EVENTS", f"treadle.evt.{tenant}.>", direct=True)).data
        for subject in (
            f"treadle.cmd.{tenant}.thread.send",
            f"treadle.cmd.{tenant}.thread.create",
            "treadle.host.place",
            "treadle.host.host-1.turn.start",
            "treadle.ckpt.local.prepare",
            "treadle.ckpt.local.capture",
            "treadle.summarise.local",
        ):
            for payload in (own_event, b"\x00garbage"):
                try:
                    reply = await stack_nc.request(subject, payload, timeout=5)
                    outcome = (
                        "refused"
                        if b'"type":"failure"' in reply.data or b'"rejected"' in reply.data
                        else f"ANSWERED {reply.data[:80]!r}"
                    )
                except (NatsTimeout, NoRespondersError) as exc:
                    outcome = f"no reply ({type(exc).__name__})"
                internal[outcome] = internal.get(outcome, 0) + 1
        # Fire and forget: commands without a reply subject (nobody to answer) must not upset the coordinator.
        no_reply = [payload for _, payload in _command_cases(tenant, thread, victim, victim_thread)[:24]]
        no_reply.append(json.dumps(_command(tenant, thread, {"type": "thread.send", "text": "no reply"})).encode())
        for payload in no_reply:
            await stack_nc.publish(f"treadle.cmd.{tenant}.thread.send", payload)
        await stack_nc.flush()
        provider = _provider_cases(tenant, thread, run, victim, victim_thread, victim_run)
        for subject, payload in provider:
            await js.publish(subject, payload)
        print(
            f"command cases: {sum(replies.values())} {replies}; without reply subject: {len(no_reply)}; "
            f"internal request cases: {internal}; provider cases: {len(provider)}"
        )
        assert set(replies) <= {"Rejected", "Accepted"}, replies  # every command got an answer
        assert not any(o.startswith("ANSWERED") for o in internal), internal

        count = await partitions.discover(stack_nc)

        async def provider_consumer_settled() -> bool:  # one durable consumer per partition
            for partition in range(count):
                info = await js.consumer_info("TREADLE_PROVIDER", f"supervisor-provider-p{partition}")
                if info.num_pending or info.num_ack_pending:
                    return False
            return True

        await wait_for(provider_consumer_settled, timeout=60, interval=0.2, what="provider events all handled")

        # Still serving: a real run on the attacked thread completes, and no worker restarted.
        after = await api.send(thread, "still there?")
        await api.wait_run(after["run_id"])
        assert {name: stack.processes.restarts(name) for name in WORKERS} == restarts

        # Nothing was appended to the bystander, and both logs satisfy the invariants.
        assert (await js.get_last_msg("TREADLE_EVENTS", f"treadle.evt.{victim}.>", direct=True)).seq == victim_seq
        for who in (tenant, victim):
            report = await check_log(stack_nc, who)
            print(f"{who}: {report.summary()}")
            assert report.ok, report.summary()
            assert report.terminal_runs == report.runs  # no run left dangling by the fuzz
    finally:
        await api.close()
        await victim_api.close()
