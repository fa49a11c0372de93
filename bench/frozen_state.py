"""What a frozen (copy-on-write) thread state would cost: fold one long thread with today's in-place
``evolve`` and with two copy-on-write variants, and print µs per event for each.

The thread is built with the real event types: a thread, a provider session, then ``--runs`` runs, each
queued and dispatched, started, with one tool node, three coalesced text deltas, its reply, a checkpoint
and its completion (10 events a run). The copy-on-write variants give every event a new state struct
(``msgspec.structs.replace``) and leave the state before it untouched:

- ``cow-run``: a new ``runs`` list holding a copy of the run the event names (its attempts and nodes copied
  too), and new ``messages``, ``queue`` and ``activity`` lists, as an in-place handler would append to those.
  A lower bound: other slices are still shared with the earlier state;
- ``cow-all``: as ``cow-run``, a new list for every other list-valued slice of the state, and copies of the
  provider threads (a run's end appends to its provider thread's covered ordinals), so no earlier state
  changes (checked).

Both then apply today's handlers to the copies, so the resulting states equal the in-place fold (checked).

    .venv/bin/python bench/frozen_state.py [--runs 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import msgspec
from msgspec import structs

from treadle.core import events as ev
from treadle.core.ids import IdFactory
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.state import ThreadState, evolve

TENANT, THREAD = "bench", "thr_bench"
LIST_SLICES = [f.name for f in structs.fields(ThreadState) if f.name not in ("thread", "lineage", "capabilities")]
LIST_SLICES = [n for n in LIST_SLICES if isinstance(getattr(ThreadState(), n), list)]


def thread_events(runs: int) -> list[ev.Envelope]:
    ids = IdFactory("bench", 0)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[ev.Envelope] = []

    def add(data: ev.Payload) -> None:
        nonlocal at
        at += timedelta(milliseconds=5)
        out.append(
            ev.Envelope(
                id=ids.next("evt"),
                type=data.TYPE,
                tenant=TENANT,
                thread=THREAD,
                at=at,
                command_id="cmd",
                actor="bench",
                seq=len(out) + 1,
                data=data,
            )
        )

    add(ev.ThreadCreated(thread_id=THREAD, workspace="threads/bench", created_by="u"))
    add(
        ev.ProviderAttached(
            session_id="ses_1",
            provider="scripted",
            host_id="h",
            boot_id="b",
            provider_thread_id="pth_1",
            native_ref="n",
            capabilities=ProviderCapabilities(),
        )
    )
    for ordinal in range(1, runs + 1):
        run, msg, reply = ids.next("run"), ids.next("msg"), ids.next("msg")
        root, att, tool = ids.next("node"), ids.next("att"), ids.next("node")
        add(
            ev.RunQueued(
                run_id=run,
                ordinal=ordinal,
                message_id=msg,
                text=f"request {ordinal}",
                author="u",
                root_node_id=root,
                attempt_id=att,
                mode="auto",
                disposition="started",
                dispatched=True,
                provider="scripted",
            )
        )
        add(ev.RunStarted(run_id=run, attempt_id=att, session_id="ses_1", turn_id=f"turn_{ordinal}"))
        add(ev.NodeStarted(node_id=tool, run_id=run, attempt_id=att, parent_id=root, kind="tool", title="ls"))
        add(ev.NodeCompleted(node_id=tool, run_id=run, output="a b c"))
        for i in range(3):
            add(ev.MessageDelta(message_id=reply, run_id=run, attempt_id=att, node_id=root, text=f"part {i} "))
        add(
            ev.MessageCompleted(message_id=reply, run_id=run, attempt_id=att, node_id=root, text="part 0 part 1 part 2")
        )
        checkpoint = ev.CheckpointCaptured(
            checkpoint_id=ids.next("ckpt"), run_id=run, ordinal=ordinal, kind="run", status="completed"
        )
        add(ev.RunCompleted(run_id=run, attempt_id=att, checkpoint=checkpoint))
    return out


def _copy_run(state: ThreadState, run_id: str) -> None:
    """Give ``state`` (already a new struct) a new runs list holding a copy of run ``run_id``."""
    for i in range(len(state.runs) - 1, -1, -1):
        run = state.runs[i]
        if run.id == run_id:
            runs = list(state.runs)
            runs[i] = structs.replace(
                run,
                attempts=[structs.replace(a) for a in run.attempts],
                nodes=[structs.replace(n) for n in run.nodes],
            )
            state.runs = runs
            return


def _copy_message(state: ThreadState, message_id: str) -> None:
    for i in range(len(state.messages) - 1, -1, -1):
        if state.messages[i].id == message_id:
            state.messages[i] = structs.replace(state.messages[i])
            return


def evolve_cow(slices: list[str], whole: bool = False) -> Callable[[ThreadState, ev.Envelope], ThreadState]:
    def step(state: ThreadState, e: ev.Envelope) -> ThreadState:
        if e.seq is not None and e.seq <= state.seq:
            return state
        new = structs.replace(state, **{name: list(getattr(state, name)) for name in slices})
        if whole:
            new.provider_threads = [
                structs.replace(p, covered_ordinals=list(p.covered_ordinals)) for p in new.provider_threads
            ]
        if run_id := getattr(e.data, "run_id", None):
            _copy_run(new, run_id)
        if message_id := getattr(e.data, "message_id", None):
            _copy_message(new, message_id)
        return evolve(new, e)

    return step


def in_place(state: ThreadState, e: ev.Envelope) -> ThreadState:
    return evolve(state, e)


def fold_with(step: Callable[[ThreadState, ev.Envelope], ThreadState], events: list[ev.Envelope]) -> ThreadState:
    state = ThreadState()
    for e in events:
        state = step(state, e)
    return state


def timed(step: Callable[[ThreadState, ev.Envelope], ThreadState], events: list[ev.Envelope], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fold_with(step, events)
        best = min(best, time.perf_counter() - t0)
    return best / len(events) * 1e6


def snapshots_hold(events: list[ev.Envelope]) -> bool:
    """The copy-on-write fold leaves every earlier state as it was: re-encode a few after the fold."""
    step = evolve_cow(LIST_SLICES, whole=True)
    state, kept = ThreadState(), []
    for n, e in enumerate(events):
        state = step(state, e)
        if n % 997 == 0:
            kept.append((state, msgspec.json.encode(state)))
    return all(msgspec.json.encode(s) == b for s, b in kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    events = thread_events(args.runs)
    variants: Iterator[tuple[str, Callable[[ThreadState, ev.Envelope], ThreadState]]] = iter(
        [
            ("in-place", in_place),
            ("cow-run", evolve_cow(["messages", "queue", "activity"])),
            ("cow-all", evolve_cow(LIST_SLICES, whole=True)),
        ]
    )
    reference = msgspec.json.encode(fold_with(in_place, events))
    print(f"{args.runs} runs, {len(events)} events (best of {args.repeat})")
    base = None
    for name, step in variants:
        assert msgspec.json.encode(fold_with(step, events)) == reference, f"{name} folds another state"
        us = timed(step, events, args.repeat)
        base = base or us
        print(f"  {name:9} {us:8.2f} µs/event  ({us / base:5.1f}x)")
    print(f"  earlier states untouched by the copy-on-write fold: {snapshots_hold(events)}")


if __name__ == "__main__":
    main()
