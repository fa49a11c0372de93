"""Invariants of the event log, checked over the stream itself (the source of truth), not over Redis.

:func:`check_events` is pure: give it ``(seq, subject, data)`` triples in stream order and it reports every
breach; :func:`check_log` reads them from TREADLE_EVENTS (all of it, or one tenant's part). What holds:

* every message decodes as an event envelope of a known type, on the subject its envelope names
  (``treadle.evt.<tenant>.<thread>.<type>``);
* event ids are unique (a duplicate is a decision appended twice);
* a thread starts with one ``thread.created``, and nothing precedes it;
* runs of a thread are queued with ordinals 1, 2, 3, … (dense, in stream order, each once);
* a run ends at most once (one terminal event), only after it was queued, and no ``run.*`` event about
  it follows its terminal one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from ..domain import events as ev
from ..eventlog import subjects

TERMINAL = ("run.completed", "run.failed", "run.interrupted", "run.cancelled")


class Problem(msgspec.Struct, kw_only=True, frozen=True):
    seq: int
    subject: str
    kind: str  # undecodable | unknown_type | wrong_subject | duplicate_id | no_thread_created | ...
    detail: str


class CheckReport(msgspec.Struct, kw_only=True):
    events: int = 0
    threads: int = 0
    runs: int = 0
    terminal_runs: int = 0
    problems: list[Problem] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = (f"{self.events} events, {self.threads} threads, {self.runs} runs "
                f"({self.terminal_runs} ended): {len(self.problems)} problem(s)")
        return "\n".join([head, *(f"  seq {p.seq} {p.kind}: {p.detail} [{p.subject}]" for p in self.problems[:50])])


@dataclass
class _Thread:
    created: bool = False
    next_ordinal: int = 1
    runs: set[str] = field(default_factory=set)
    ended: dict[str, int] = field(default_factory=dict)  # run id -> seq of its terminal event


def check_events(items: Iterable[tuple[int, str, bytes]]) -> CheckReport:
    report = CheckReport()
    problems: list[Problem] = []
    threads: dict[tuple[str, str], _Thread] = {}
    seen_ids: dict[str, int] = {}

    def problem(seq: int, subject: str, kind: str, detail: str) -> None:
        problems.append(Problem(seq=seq, subject=subject, kind=kind, detail=detail))

    for seq, subject, data in items:
        report.events += 1
        try:
            env = ev.decode_event(data, seq)
        except (msgspec.DecodeError, ValueError) as exc:
            problem(seq, subject, "undecodable", str(exc))
            continue
        if isinstance(env.data, ev.UnknownEvent):
            problem(seq, subject, "unknown_type", env.type)
        expected = f"treadle.evt.{env.tenant}.{env.thread}.{env.type}"
        # The broker appends the thread's partition token to the stored subject (runtime/partitions.py).
        stem, _, partition = subject.rpartition(".")
        if subject != expected and not (stem == expected and partition.isdigit()):
            problem(seq, subject, "wrong_subject", f"envelope says {expected}")
        if env.id in seen_ids:
            problem(seq, subject, "duplicate_id", f"event {env.id} also at seq {seen_ids[env.id]}")
        seen_ids.setdefault(env.id, seq)
        thread = threads.setdefault((env.tenant, env.thread), _Thread())
        data_ = env.data
        if env.type == "thread.created":
            if thread.created:
                problem(seq, subject, "duplicate_thread_created", env.thread)
            thread.created = True
            continue
        if not thread.created:
            problem(seq, subject, "no_thread_created", f"{env.type} before the thread was created")
        if isinstance(data_, ev.RunQueued):
            if data_.run_id in thread.runs:
                problem(seq, subject, "duplicate_run", data_.run_id)
            elif data_.ordinal != thread.next_ordinal:
                problem(seq, subject, "ordinal_gap", f"run {data_.run_id} has ordinal {data_.ordinal}, "
                                                     f"expected {thread.next_ordinal}")
            thread.runs.add(data_.run_id)
            thread.next_ordinal = max(thread.next_ordinal, data_.ordinal + 1)
            continue
        if env.type in TERMINAL:
            run_id = data_.run_id
            if run_id not in thread.runs:
                problem(seq, subject, "unknown_run", f"{env.type} of run {run_id} that was never queued")
            if run_id in thread.ended:
                problem(seq, subject, "second_terminal", f"run {run_id} already ended at seq {thread.ended[run_id]}")
            else:
                thread.ended[run_id] = seq
            continue
        run_id = getattr(data_, "run_id", None)
        if run_id is not None and env.type.startswith("run.") and run_id in thread.ended:
            problem(seq, subject, "after_terminal", f"{env.type} of run {run_id} after it ended")
    report.threads = len(threads)
    report.runs = sum(len(t.runs) for t in threads.values())
    report.terminal_runs = sum(len(t.ended) for t in threads.values())
    report.problems = problems
    return report


async def read_events(nc: NATS, tenant: str | None = None, until_seq: int | None = None) -> list[tuple[int, str, bytes]]:
    """``(seq, subject, data)`` of TREADLE_EVENTS (or of one tenant) up to ``until_seq`` (default: now)."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    last = until_seq if until_seq is not None else info.state.last_seq
    filter_ = f"treadle.evt.{subjects.token(tenant, 'tenant')}.>" if tenant else subjects.EVENTS_ALL
    if info.state.messages == 0 or last == 0:
        return []
    if tenant:
        try:
            newest = await js.get_last_msg(subjects.EVENTS_STREAM, filter_, direct=True)
        except NotFoundError:
            return []
        last = min(last, newest.seq)
    out: list[tuple[int, str, bytes]] = []
    done = asyncio.Event()

    async def on_msg(msg) -> None:
        seq = msg.metadata.sequence.stream
        if seq <= last:
            out.append((seq, msg.subject, msg.data))
        if seq >= last:
            done.set()

    sub = await js.subscribe(filter_, cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await sub.unsubscribe()
    return out


async def check_log(nc: NATS, tenant: str | None = None, until_seq: int | None = None) -> CheckReport:
    return check_events(await read_events(nc, tenant, until_seq))
