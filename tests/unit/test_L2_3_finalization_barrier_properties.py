"""L2.3/L3.7/L8.2 as properties: random interleavings of provider events, steers, interrupts and answers,
folded through the same pure functions the coordinator and supervisor use, never show a terminal run with
an open message, an open todo list or no checkpoint, and never end a run twice."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.domain_helpers import T0, apply, command, ctx, new_thread, run_command, send
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.errors import DomainError
from treadle.core.plans.model import TodoItem
from treadle.core.providers.capabilities import PROFILES
from treadle.core.run import supervision as sv
from treadle.core.run.commands import InterruptRun
from treadle.core.state import provider_cause

ACTIONS = [
    "text",
    "text_done",
    "tool",
    "request",
    "todo",
    "answer",
    "steer",
    "steer_restart",
    "interrupt",
    "owed",
    "turn_end",
    "turn_fail",
]


class World:
    """One thread driven like the workers drive it, with every appended event counted."""

    def __init__(self, profile: str) -> None:
        self.state = new_thread()
        self.profile = profile
        self.seq = 100
        self.play: dict[str, int] = Counter()
        self.ended: Counter = Counter()
        self.n = 0
        send(self.state, "start", script={"profile": profile})
        self.start_attempt()

    def append(self, events, causation=None) -> None:
        for e in events:
            if isinstance(e, ev.RunEnded):
                self.ended[e.run_id] += 1
        apply(self.state, events, causation=causation)

    def provider(self, body) -> None:
        run = self.state.active_run
        if run is None or run.attempt.status != ("pending" if isinstance(body, pe.TurnStarted) else "running"):
            return
        att = run.attempt
        self.play[att.id] += 1
        self.seq += 1
        event = pe.ProviderEvent(
            id=f"evt_{self.seq}",
            tenant="acme",
            thread=self.state.thread.id,
            session_id="ps_1",
            run_id=run.id,
            attempt_id=att.id,
            index=self.play[att.id],
            at=T0,
            body=body,
        )
        reaction = sv.react(self.state, event, ctx(f"r{self.seq}"))
        assert not reaction.wait
        events = list(reaction.events)
        if reaction.finalize is not None:
            target = self.state.run(reaction.run_id)
            if sv.restarts(self.state, target, reaction.finalize):
                events += sv.restart(self.state, target, ctx(f"x{self.seq}"))
            else:
                capture = ev.CheckpointCaptured(
                    checkpoint_id=f"ckpt_{self.seq}", run_id=target.id, ordinal=target.ordinal, status="x"
                )
                events += sv.finalize(self.state, target, reaction.finalize, capture, ctx(f"f{self.seq}"))
        self.append(events, causation=provider_cause(self.seq, event.index, att.id))
        self.start_attempt()

    def start_attempt(self) -> None:
        """The supervisor's hand-over: a session for the first attempt, then the provider starts the turn."""
        run = sv.pending_attempt(self.state)
        if run is None:
            return
        if self.state.live_session is None:
            self.append(
                [
                    ev.ProviderAttached(
                        session_id="ps_1",
                        provider="scripted",
                        host_id="h",
                        boot_id="b",
                        provider_thread_id="pth_1",
                        native_ref="n",
                        capabilities=PROFILES[self.profile],
                    )
                ]
            )
        if run.attempt.interrupt is not None:
            capture = ev.CheckpointCaptured(checkpoint_id=f"ckpt_i{self.seq}", run_id=run.id, ordinal=run.ordinal)
            self.append(sv.finalize(self.state, run, pe.TurnCompleted(status="interrupted"), capture, ctx("i")))
            return self.start_attempt()
        self.provider(pe.TurnStarted())

    def do(self, action: str) -> None:
        self.n += 1
        n, state = self.n, self.state
        run = state.active_run
        if action == "text":
            self.provider(pe.TextDelta(message_id=f"msg_{n}", node_id="node_r", text="chunk"))
        elif action == "text_done":
            streaming = [
                m for m in state.messages if m.status == "streaming" and run and m.attempt_id == run.attempt.id
            ]
            message_id = streaming[0].id if streaming else f"msg_{n}"
            self.provider(pe.TextCompleted(message_id=message_id, node_id="node_r", text="all of it"))
        elif action == "tool":
            self.provider(pe.ToolStarted(node_id=f"node_{n}", title="ls"))
        elif action == "request":
            self.provider(pe.RequestOpened(request_id=f"req_{n}", node_id=f"node_q{n}", kind="command"))
        elif action == "todo":
            self.provider(
                pe.PlanUpdated(
                    plan_id=f"plan_{run.id if run else n}",
                    kind="todo_list",
                    items=[TodoItem(text="a", status="in_progress")],
                )
            )
        elif action == "answer":
            pending = [r for r in state.requests if r.status == "pending"]
            if pending:
                self.append([ev.RequestResolved(request_id=pending[0].id, run_id=pending[0].run_id)])
        elif action in ("steer", "steer_restart"):
            try:
                events, _ = send(state, f"steer {n}", mode="auto" if action == "steer" else "restart_active")
                self.ended.update(e.run_id for e in events if isinstance(e, ev.RunEnded))
            except DomainError:
                pass
            self.start_attempt()
        elif action == "interrupt" and run is not None:
            try:
                run_command(state, command(InterruptRun(run_id=run.id), thread=state.thread.id))
            except DomainError:
                pass
            self.start_attempt()
        elif action == "owed":
            events, actions = sv.owed(state, ctx(f"o{n}"))
            self.append(events)
            for a in actions:
                if isinstance(a, sv.Steer):
                    self.append(
                        [ev.SteerDelivered(run_id=a.run.id, attempt_id=a.run.attempt.id, message_id=a.message.id)]
                    )
                else:
                    self.append([ev.InterruptSent(run_id=a.run.id, attempt_id=a.run.attempt.id, path=a.path)])
                    status = "interrupted" if PROFILES[self.profile].terminal_status == "strong" else "completed"
                    self.provider(pe.TurnCompleted(status=status))
        elif action in ("turn_end", "turn_fail"):
            self.provider(pe.TurnCompleted(status="completed" if action == "turn_end" else "failed", error="x"))

    def check(self) -> None:
        state = self.state
        assert all(count == 1 for count in self.ended.values()), self.ended
        for run in state.runs:
            if not run.terminal or run.status == "cancelled" and run.checkpoint_id is None:
                continue
            assert run.checkpoint_id is not None, f"{run.id} {run.status} without a checkpoint"
            assert not [m for m in state.messages if m.run_id == run.id and m.status == "streaming"]
            assert not [p for p in state.plans if p.run_id == run.id and p.kind == "todo_list" and p.status == "open"]
            assert not [r for r in state.requests if r.run_id == run.id and r.status == "pending"]
            assert run.attempt.status != "running"
        assert sum(not r.terminal and r.status != "queued" for r in state.runs) <= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(sorted(PROFILES)), actions=st.lists(st.sampled_from(ACTIONS), max_size=40))
def test_L2_3_barrier_holds_under_any_interleaving(profile, actions):
    world = World(profile)
    for action in actions:
        world.do(action)
        world.check()
    # Whatever happened, ending the live turn ends everything cleanly.
    for _ in range(5):
        world.do("owed")
        world.do("turn_end")
        world.check()
    assert all(r.terminal for r in world.state.runs if r.status != "queued"), [r.status for r in world.state.runs]
