"""Invariants of the event log and of the projections built from it: ``treadle check``.

The stream (TREADLE_EVENTS) is the source of truth. :func:`check_events` is pure: give it ``(seq, subject,
data)`` triples in stream order and it reports every breach of what must hold in the log itself:

* every message decodes as an event envelope of a known type, on the subject its envelope names
  (``treadle.evt.<tenant>.<thread>.<type>``, with a partition token after it where the broker adds one);
* event ids are unique (a duplicate is a decision appended twice);
* a thread starts with one ``thread.created``, and nothing precedes it;
* runs of a thread are queued with ordinals 1, 2, 3, … (dense, in stream order, each once);
* a run ends at most once (one terminal event), only after it was queued, and no ``run.*`` event about
  it follows its terminal one;
* every accepted message is delivered once: a user message belongs to one run; one command accepts at
  most one message (a retried send accepted twice is a duplicate); a steer is delivered natively or
  carried to one attempt or run, never twice, and never left behind when its run ends;
* a run that reached its provider ends with a checkpoint — captured, or L10.4's missing/error summary;
* no request stays pending once its provider session is gone or its run has ended (L11.3);
* a queue does not stall: at the end of the log, queued runs wait only behind an active run or an open
  rollback (L3.6). Between a run's end and the next dispatch this holds only a moment later, so the reader
  looks again before reporting it (``settle``).

:func:`compare_projection` is pure too: the document a replay of the log gives against the one Redis
holds. :func:`check_log` and :func:`check_projections` are the thin readers around them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError
from redis.asyncio import Redis

from treadle.core import events as ev
from treadle.core.state import ThreadState, evolve

from ..eventlog import subjects
from ..runtime.volumes import Volumes
from . import document, places, questions, store

TERMINAL = ev.RUN_ENDING
_summary_encoder = msgspec.json.Encoder()


class Problem(msgspec.Struct, kw_only=True, frozen=True):
    seq: int
    subject: str  # the event's subject; for a projection problem, the Redis key of the document
    kind: str  # undecodable | unknown_type | wrong_subject | duplicate_id | no_thread_created | ...
    detail: str


class CheckReport(msgspec.Struct, kw_only=True):
    events: int = 0
    threads: int = 0
    runs: int = 0
    terminal_runs: int = 0
    projections: int = 0  # documents compared with a replay (0: the log alone was checked)
    problems: list[Problem] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self, limit: int = 50) -> str:
        head = (
            f"{self.events} events, {self.threads} threads, {self.runs} runs ({self.terminal_runs} ended), "
            f"{self.projections} projections compared: {len(self.problems)} problem(s)"
        )
        kinds = Counter(p.kind for p in self.problems)
        lines = [f"  by kind: {', '.join(f'{k} {n}' for k, n in kinds.most_common())}"] if kinds else []
        lines += [f"  seq {p.seq} {p.kind}: {p.detail} [{p.subject}]" for p in self.problems[:limit]]
        if len(self.problems) > limit:
            lines.append(f"  … and {len(self.problems) - limit} more")
        return "\n".join([head, *lines])


@dataclass
class _Steer:
    run_id: str
    delivered_by: str | None = None  # "native" (steer.delivered), "attempt" (carried by one), "run" (moved to one)


@dataclass
class _Thread:
    created: bool = False
    deleted: bool = False  # its tombstone came: nothing may follow
    next_ordinal: int = 1
    runs: set[str] = field(default_factory=set)
    ended: dict[str, int] = field(default_factory=dict)  # run id -> seq of its terminal event
    started: set[str] = field(default_factory=set)  # runs a provider took (run.started)
    checkpointed: set[str] = field(default_factory=set)  # runs with a root checkpoint of their own event
    run_messages: set[str] = field(default_factory=set)  # message ids that opened a run (run.queued)
    steers: dict[str, _Steer] = field(default_factory=dict)
    commands: dict[str, int] = field(default_factory=dict)  # command id -> seq of the message it accepted
    sessions: dict[str, str] = field(default_factory=dict)  # attempt id -> its provider session
    stopped: set[str] = field(default_factory=set)  # provider sessions that are gone
    pending: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # request -> (seq, run, attempt)
    opened: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # every request, for one reopened
    dispatched: set[str] = field(default_factory=set)  # runs that left the queue (dispatched)
    rollbacks: dict[str, list[str]] = field(default_factory=dict)  # open rollback -> the runs it rolls back
    rolled_back: set[str] = field(default_factory=set)
    last_seq: int = 0


class _Checker:
    """One pass over the log; ``problems`` collects what breaks an invariant, in stream order."""

    def __init__(self) -> None:
        self.report = CheckReport()
        self.problems: list[Problem] = []
        self.threads: dict[tuple[str, str], _Thread] = {}
        self.seen_ids: dict[str, int] = {}
        self.subject_of: dict[tuple[str, str], str] = {}

    def problem(self, seq: int, subject: str, kind: str, detail: str) -> None:
        self.problems.append(Problem(seq=seq, subject=subject, kind=kind, detail=detail))

    def event(self, seq: int, subject: str, data: bytes) -> None:
        self.report.events += 1
        try:
            env = ev.decode_event(data, seq)
        except (msgspec.DecodeError, ValueError) as exc:
            self.problem(seq, subject, "undecodable", str(exc))
            return
        if isinstance(env.data, ev.UnknownEvent):
            self.problem(seq, subject, "unknown_type", env.type)
        expected = f"treadle.evt.{env.tenant}.{env.thread}.{env.type}"
        # A partitioned broker appends the thread's partition token to the stored subject (runtime/partitions.py).
        stem, _, partition = subject.rpartition(".")
        if subject != expected and not (stem == expected and partition.isdigit()):
            self.problem(seq, subject, "wrong_subject", f"envelope says {expected}")
        if env.id in self.seen_ids:
            self.problem(seq, subject, "duplicate_id", f"event {env.id} also at seq {self.seen_ids[env.id]}")
        self.seen_ids.setdefault(env.id, seq)
        key = (env.tenant, env.thread)
        thread = self.threads.setdefault(key, _Thread())
        thread.last_seq = seq
        self.subject_of.setdefault(key, f"treadle.evt.{env.tenant}.{env.thread}")
        if env.type == "thread.created":
            if thread.created:
                self.problem(seq, subject, "duplicate_thread_created", env.thread)
            thread.created = True
            return
        if thread.deleted:
            self.problem(seq, subject, "after_tombstone", f"{env.type} after the thread was deleted")
        if env.type == "thread.deleted":  # once its data is erased, the tombstone is the thread's one event
            thread.created = thread.deleted = True
            return
        if not thread.created:
            self.problem(seq, subject, "no_thread_created", f"{env.type} before the thread was created")
        self.payload(thread, seq, subject, env)

    def payload(self, t: _Thread, seq: int, subject: str, env: ev.Envelope) -> None:
        d = env.data
        run_id = getattr(d, "run_id", None)
        if (
            env.type.startswith("run.")
            and run_id in t.ended
            and env.type not in TERMINAL
            and not isinstance(d, ev.RunQueued)
        ):
            self.problem(seq, subject, "after_terminal", f"{env.type} of run {run_id} after it ended")
        if isinstance(d, ev.RunQueued):
            if d.run_id in t.runs:
                self.problem(seq, subject, "duplicate_run", d.run_id)
            elif d.ordinal != t.next_ordinal:
                self.problem(
                    seq, subject, "ordinal_gap", f"run {d.run_id} has ordinal {d.ordinal}, expected {t.next_ordinal}"
                )
            t.runs.add(d.run_id)
            if d.dispatched:
                t.dispatched.add(d.run_id)
            t.next_ordinal = max(t.next_ordinal, d.ordinal + 1)
            self.queued_message(t, seq, subject, env, d)
        elif isinstance(d, ev.RunSteered):
            if d.message_id in t.steers or d.message_id in t.run_messages:
                self.problem(seq, subject, "message_twice", f"message {d.message_id} accepted again as a steer")
            else:
                self.accepted(t, seq, subject, env.command_id, d.message_id)
            t.steers[d.message_id] = _Steer(d.run_id)
        elif isinstance(d, ev.RunDispatched):
            t.dispatched.add(d.run_id)
        elif isinstance(d, ev.RollbackStarted):
            t.rollbacks[d.rollback_id] = list(d.rolled_back_run_ids)
        elif isinstance(d, ev.RollbackCompleted):
            t.rolled_back.update(t.rollbacks.pop(d.rollback_id, []))
        elif isinstance(d, ev.RollbackFailed):
            t.rollbacks.pop(d.rollback_id, None)
        elif isinstance(d, ev.SteerDelivered):
            self.delivered(t, seq, subject, d.message_id, "native")
        elif isinstance(d, ev.AttemptStarted):
            # A recovery attempt carries its lost predecessor's input again: that is a redelivery, not a second one.
            for message_id in d.message_ids:
                if d.reason != "provider_recovery" or message_id not in t.steers:
                    self.delivered(t, seq, subject, message_id, "attempt")
        elif isinstance(d, ev.RunStarted):
            t.started.add(d.run_id)
            t.sessions[d.attempt_id] = d.session_id
        elif isinstance(d, ev.MessageDelta) and d.started is not None:  # the run's start, carried by its first text
            t.started.add(d.run_id)
            t.sessions[d.started.attempt_id] = d.started.session_id
        elif isinstance(d, ev.ProviderStopped):
            t.stopped.add(d.session_id)
        elif isinstance(d, ev.RequestOpened):
            t.pending[d.request_id] = t.opened[d.request_id] = (seq, d.run_id, d.attempt_id)
        elif isinstance(d, ev.RequestResolved):
            t.pending.pop(d.request_id, None)
            if d.status == "pending" and d.request_id in t.opened:  # an answer the provider refused: it waits again
                t.pending[d.request_id] = t.opened[d.request_id]
        elif isinstance(d, ev.CheckpointCaptured):
            if d.run_id and d.scope == "root":
                t.checkpointed.add(d.run_id)
        elif isinstance(d, ev.RunEnded):
            if d.started is not None:  # the run's start, carried by its end (a turn over at once)
                t.started.add(d.run_id)
                t.sessions[d.started.attempt_id] = d.started.session_id
            self.run_ended(t, seq, subject, env.type, d)

    def queued_message(self, t: _Thread, seq: int, subject: str, env: ev.Envelope, d: ev.RunQueued) -> None:
        if d.message_id in t.steers:  # a steer that came too late for its run opens the run superseding it
            self.delivered(t, seq, subject, d.message_id, "run")
        elif d.message_id in t.run_messages:
            self.problem(seq, subject, "message_twice", f"message {d.message_id} opened run {d.run_id} too")
        else:
            t.run_messages.add(d.message_id)
            self.accepted(t, seq, subject, env.command_id, d.message_id)
        if d.supersedes_run_id:  # every undelivered steer of the superseded run rides along (thread fold)
            for steer in t.steers.values():
                if steer.run_id == d.supersedes_run_id and steer.delivered_by is None:
                    steer.delivered_by, steer.run_id = "run", d.run_id

    def accepted(self, t: _Thread, seq: int, subject: str, command_id: str, message_id: str) -> None:
        if command_id in t.commands:
            self.problem(
                seq,
                subject,
                "duplicate_message",
                f"command {command_id} accepted message {message_id} after the one at seq {t.commands[command_id]}",
            )
        t.commands.setdefault(command_id, seq)

    def delivered(self, t: _Thread, seq: int, subject: str, message_id: str, how: str) -> None:
        steer = t.steers.get(message_id)
        if steer is None:
            self.problem(seq, subject, "unknown_message", f"delivery ({how}) of message {message_id} never accepted")
        elif steer.delivered_by is not None:
            self.problem(
                seq,
                subject,
                "delivered_twice",
                f"steer {message_id} delivered ({how}) after it was delivered ({steer.delivered_by})",
            )
        else:
            steer.delivered_by = how

    def run_ended(self, t: _Thread, seq: int, subject: str, type_: str, d: ev.RunEnded) -> None:
        if d.run_id not in t.runs:
            self.problem(seq, subject, "unknown_run", f"{type_} of run {d.run_id} that was never queued")
        if d.run_id in t.ended:
            self.problem(seq, subject, "second_terminal", f"run {d.run_id} already ended at seq {t.ended[d.run_id]}")
            return
        t.ended[d.run_id] = seq
        # L10.2/L10.4: a run a provider worked on ends with its checkpoint, or a summary saying why there is none.
        if d.run_id in t.started and d.checkpoint is None and d.run_id not in t.checkpointed:
            self.problem(
                seq,
                subject,
                "no_checkpoint",
                f"run {d.run_id} ended ({type_}) without a checkpoint or a missing/error summary",
            )

    def finish(self) -> CheckReport:
        for key, t in self.threads.items():
            subject = self.subject_of[key]
            for message_id, steer in t.steers.items():
                if steer.delivered_by is None and steer.run_id in t.ended:
                    self.problem(
                        t.ended[steer.run_id],
                        subject,
                        "undelivered_steer",
                        f"steer {message_id} of run {steer.run_id} was never delivered",
                    )
            over = t.ended.keys() | t.rolled_back
            waiting = sorted(t.runs - t.dispatched - over)
            if waiting and not (t.dispatched - over) and not t.rollbacks:
                self.problem(
                    t.last_seq,
                    subject,
                    "stalled_queue",
                    f"{len(waiting)} queued run(s) ({', '.join(waiting[:3])}…) and none active to wait for",
                )
            for request_id, (seq, run_id, attempt_id) in t.pending.items():
                session = t.sessions.get(attempt_id)
                if session is not None and session in t.stopped:
                    self.problem(
                        seq,
                        subject,
                        "orphan_request",
                        f"request {request_id} still pending; its session {session} is gone",
                    )
                elif run_id in t.ended:
                    self.problem(
                        seq, subject, "orphan_request", f"request {request_id} still pending; its run {run_id} ended"
                    )
        r = self.report
        r.threads = len(self.threads)
        r.runs = sum(len(t.runs) for t in self.threads.values())
        r.terminal_runs = sum(len(t.ended) for t in self.threads.values())
        r.problems = sorted(self.problems, key=lambda p: p.seq)
        return r


def check_events(items: Iterable[tuple[int, str, bytes]]) -> CheckReport:
    checker = _Checker()
    for seq, subject, data in items:
        checker.event(seq, subject, data)
    return checker.finish()


def fold_events(items: Iterable[tuple[int, str, bytes]]) -> dict[tuple[str, str], ThreadState]:
    """Every thread's state replayed from the log in memory (as ``rebuild.fold_all`` does, over events already
    read, so the checker folds exactly what it checked); events that do not decode are left out (reported)."""
    folded: dict[tuple[str, str], ThreadState] = {}
    for seq, _, data in items:
        try:
            e = ev.decode_event(data, seq)
        except (msgspec.DecodeError, ValueError):
            continue
        evolve(folded.setdefault((e.tenant, e.thread), ThreadState()), e)
    return folded


class Stored(msgspec.Struct, kw_only=True, frozen=True):
    """What Redis holds for one thread: its document (None: not wholly projected), the stream sequence it
    reflects, its tenant-list summary, the thread its runs and requests are indexed to, and its places."""

    doc: bytes | None
    seq: int
    summary: bytes | None
    index: dict[str, str | None]
    places: dict[bytes, bytes] = {}
    answers: dict[bytes, bytes] = {}  # the answers stored whole (``questions``)


def _first_difference(expected: object, stored: object, path: str = "") -> str:
    """Where two JSON values first differ, as a path (``runs[2].status``), with both values."""
    if isinstance(expected, dict) and isinstance(stored, dict):
        for name in list(expected) + [k for k in stored if k not in expected]:
            if expected.get(name) != stored.get(name):
                return _first_difference(expected.get(name), stored.get(name), f"{path}.{name}" if path else name)
    if isinstance(expected, list) and isinstance(stored, list):
        for i, (a, b) in enumerate(zip(expected, stored)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
        if len(expected) != len(stored):
            return f"{path}: {len(expected)} items in the log's replay, {len(stored)} in Redis"
    shown = [msgspec.json.encode(v).decode()[:80] for v in (expected, stored)]
    return f"{path or 'document'}: log's replay has {shown[0]}, Redis has {shown[1]}"


def compare_projection(state: ThreadState, stored: Stored) -> list[Problem]:
    """A thread's projection against the replay of its log: the document byte for byte (``document.encode``
    gives exactly the bytes Redis reassembles), its places, its stored answers, its summary, and the index of
    its runs and requests."""
    t = state.thread
    if t is None:  # events of a thread that was never created: the log half reports them
        return []
    key = f"treadle:{{{t.tenant}}}:thread:{t.id}"

    def problem(kind: str, detail: str) -> Problem:
        return Problem(seq=state.seq, subject=key, kind=kind, detail=detail)

    if t.deleted:
        if stored.doc is not None or stored.summary is not None or any(stored.index.values()):
            return [problem("projection_not_erased", f"thread {t.id} is deleted but Redis still holds its views")]
        return []
    if stored.doc is None:
        return [problem("projection_missing", f"thread {t.id} has {state.seq} as its last event but no document")]
    if stored.seq != state.seq:
        return [problem("projection_stale", f"document reflects seq {stored.seq}, the log is at {state.seq}")]
    problems = []
    expected = document.encode(state)
    if stored.doc != expected:
        try:
            where = _first_difference(msgspec.json.decode(expected), msgspec.json.decode(stored.doc))
        except msgspec.DecodeError as exc:
            where = f"stored document is not JSON: {exc}"
        problems.append(problem("projection_mismatch", where))
    if stored.summary != _summary_encoder.encode(store.summary(state)):
        problems.append(
            problem(
                "summary_mismatch", f"summary of {t.id} in treadle:{{{t.tenant}}}:summaries differs from the replay"
            )
        )
    if stored.places != (expected_places := places.stored(state)):
        wrong = sorted(k.decode() for k in expected_places.keys() ^ stored.places.keys())
        wrong += sorted(
            k.decode() for k in expected_places.keys() & stored.places.keys() if expected_places[k] != stored.places[k]
        )
        problems.append(
            problem("places_mismatch", f"places of {t.id} differ from the replay at {', '.join(wrong[:5])}")
        )
    if stored.answers != (expected_answers := questions.stored(state)):
        wrong = sorted(k.decode() for k in expected_answers.keys() ^ stored.answers.keys())
        wrong += sorted(
            k.decode()
            for k in expected_answers.keys() & stored.answers.keys()
            if expected_answers[k] != stored.answers[k]
        )
        problems.append(
            problem("answers_mismatch", f"answers of {t.id} differ from the replay at {', '.join(wrong[:5])}")
        )
    for entity, thread in stored.index.items():
        if thread != t.id:
            problems.append(problem("index_mismatch", f"{entity} is indexed to {thread!r}, not {t.id}"))
    return problems


def indexed_ids(state: ThreadState) -> list[str]:
    """The ids checked in the tenant's index: runs and requests (what ``/v1/runs/{id}`` and
    ``/v1/requests/{id}`` resolve through)."""
    return [r.id for r in state.runs] + [q.id for q in state.requests]


# --- readers ---------------------------------------------------------------------------------------------


async def read_events(
    nc: NATS, tenant: str | None = None, until_seq: int | None = None
) -> list[tuple[int, str, bytes]]:
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
        assert newest.seq is not None  # a stored message comes with its sequence
        last = min(last, newest.seq)
    out: list[tuple[int, str, bytes]] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
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


async def read_stored(redis: Redis, tenant: str, thread: str, ids: list[str]) -> Stored:
    doc_key, _, summaries, index, where = store.keys(tenant, thread)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(doc_key)
        pipe.hgetall(where)
        pipe.hget(summaries, thread)
        for id_ in ids:
            pipe.hget(index, id_)
        parts, stored_places, summary, *owners = await pipe.execute()
    seq = parts.get(b"seq")
    return Stored(
        doc=document.assemble(parts),
        seq=int(seq) if seq else 0,
        summary=summary,
        index={i: o.decode() if o else None for i, o in zip(ids, owners)},
        places={k: v for k, v in stored_places.items() if not k.startswith(b"q:")},
        answers={k: v for k, v in stored_places.items() if k.startswith(b"q:")},
    )


async def stored_threads(redis: Redis, tenant: str | None = None) -> set[tuple[str, str]]:
    """``(tenant, thread)`` of every thread document in Redis."""
    found = set()
    async for key in redis.scan_iter(match=f"treadle:{{{tenant or '*'}}}:thread:*", count=1000):
        head, _, thread = key.decode().rpartition(":thread:")
        found.add((head[len("treadle:{") : -1], thread))
    return found


async def check_projections(nc: NATS, redis: Redis, tenant: str | None = None, settle: float = 10.0) -> CheckReport:
    """The log's invariants and every projection against its replay. The projector may be a little behind
    the stream (or ahead of the snapshot read): documents whose sequence is not the replay's are compared
    again, over a fresh read, until ``settle`` seconds have passed; whatever still differs is reported."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    while True:
        items = await read_events(nc, tenant)
        report = check_events(items)
        folded = fold_events(items)
        problems: list[Problem] = []
        for (tenant_, thread), state in sorted(folded.items()):
            problems += compare_projection(state, await read_stored(redis, tenant_, thread, indexed_ids(state)))
        for tenant_, thread in sorted(await stored_threads(redis, tenant) - folded.keys()):
            problems.append(
                Problem(
                    seq=0,
                    subject=store.keys(tenant_, thread)[0],
                    kind="projection_orphan",
                    detail=f"Redis has a document for {tenant_}/{thread}, the log has no such thread",
                )
            )
        moving = any(p.kind in ("projection_stale", "projection_missing") for p in problems) or any(
            p.kind == "stalled_queue" for p in report.problems
        )
        if not moving or loop.time() >= deadline:
            break
        await asyncio.sleep(0.2)  # the projector is catching up: look again (bounded by `settle`)
    report.projections = len(folded)
    report.problems = report.problems + problems + await homes_not_live(nc, folded)
    return report


async def homes_not_live(nc: NATS, folded: dict[tuple[str, str], ThreadState]) -> list[Problem]:
    """Threads whose home volume has no live checkpoint service: nothing can prepare, capture or restore their
    workspace until the volume is back or the thread is moved (``treadle volumes forget``)."""
    volumes, _ = await Volumes(nc.jetstream()).read()
    live = {v.name for v in volumes if v.checkpoints}
    return [
        Problem(
            seq=state.seq,
            subject=f"treadle.evt.{tenant}.{thread}",
            kind="home_not_live",
            detail=f"{tenant}/{thread} lives on volume {state.thread.volume!r}, which no checkpoint service announces",
        )
        for (tenant, thread), state in sorted(folded.items())
        if state.thread is not None and not state.thread.deleted and state.thread.volume not in live
    ]
