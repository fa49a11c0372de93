"""Builders for pure-domain tests: commands, contexts and folds without any I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

from treadle.core import events as ev
from treadle.core.commands import Command
from treadle.core.ctx import Ctx, reaction_ctx, thread_id_for
from treadle.core.decide import decide
from treadle.core.providers.catalogue import Catalogue
from treadle.core.state import ThreadState, evolve
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.providers.registry import CATALOGUE

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
_n = count(1)


def command(body, thread: str | None = None, id: str | None = None, at: datetime = T0) -> Command:
    return Command(id=id or f"cmd_{next(_n):026d}", tenant="acme", user="alice", thread=thread, issued_at=at, body=body)


def apply(state: ThreadState, payloads, command_id: str = "cmd_x", causation: str | None = None) -> ThreadState:
    for p in payloads:
        seq = state.seq + 1
        evolve(
            state,
            ev.Envelope(
                id=f"evt_{seq}",
                type=p.TYPE,
                tenant="acme",
                thread=state.thread.id if state.thread else "thr_x",
                at=T0 + timedelta(milliseconds=seq),
                command_id=command_id,
                causation_id=causation,
                actor="test",
                seq=seq,
                data=p,
            ),
        )
    return state


def run_command(state: ThreadState, cmd: Command, providers: Catalogue = CATALOGUE):
    events, receipt = decide(state, cmd, Ctx.for_command(cmd, providers))
    apply(state, events, cmd.id)
    return events, receipt


def new_thread(**kw) -> ThreadState:
    state = ThreadState()
    cmd = command(CreateThread(**kw))
    cmd.thread = thread_id_for(cmd.id, cmd.issued_at)
    run_command(state, cmd)
    return state


def send(state: ThreadState, text: str = "hello", **kw):
    return run_command(state, command(SendMessage(text=text, **kw), thread=state.thread.id))


def ctx(seed: str = "seed") -> Ctx:
    return reaction_ctx(seed, T0, "test")
