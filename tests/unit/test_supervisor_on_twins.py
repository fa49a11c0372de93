"""Supervisor logic on the in-memory twins of its ports (no broker, git or provider host): a lost session's
run gets a recovery attempt resumed on another host (L9.3), a turn handed to a dead host is placed again at
once (L9.3), an interrupt that arrives before any provider saw the run ends it without a host (L8), and a steer
reaches the playing turn once (L3.2) or, refused by a turn that just ended, becomes the next run (L3.4)."""

from __future__ import annotations

from tests.unit.twins import T0, TENANT, Twins
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.commands import Accepted
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run.commands import InterruptRun
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.eventlog.errors import Unavailable

THREAD = "thr_twin"


async def running(tw: Twins, coordinator, supervisor) -> tuple[str, str]:
    """A thread whose run is playing on host-1; (thread, run id)."""
    thread, state, run_id = await tw.dispatched(coordinator, supervisor)
    session, run = state.live_session, state.run(run_id)
    await tw.report(
        supervisor,
        thread,
        session.id,
        pe.TurnStarted(),
        pth=state.session_thread(session.id).id,
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=1,
    )
    return thread, run_id


async def test_L9_3_a_lost_session_gets_a_recovery_attempt_that_resumes_its_provider_thread_elsewhere(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, run_id = await running(tw, coordinator, supervisor)
    state = await tw.state(thread)
    lost, pth = state.live_session, state.session_thread(state.live_session.id)
    tw.hosts.remove("host-1")
    tw.hosts.add("host-2")  # what is left: its watcher reports host-1's session stopped
    await tw.report(supervisor, thread, lost.id, pe.SessionStopped(reason="host_restarted"), pth=pth.id)

    state = await tw.state(thread)
    run = state.run(run_id)
    assert [a.status for a in run.attempts] == ["lost", "pending"] and run.attempt.reason == "provider_recovery"
    assert state.live_session.host_id == "host-2" and state.live_session.id != lost.id
    assert [p.id for p in state.provider_threads] == [pth.id]  # resumed, not replaced
    placed = tw.hosts.verbs("place")[-1]
    assert placed.native_ref == pth.native_ref
    started = tw.hosts.verbs("turn.start")[-1]
    assert (started.session_id, started.attempt_id) == (state.live_session.id, run.attempt.id)


def envelope(i: int, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_t{i}", type=data.TYPE, tenant=TENANT, thread=THREAD, at=T0, command_id="cmd_t", actor="test", data=data
    )


async def test_L9_3_a_turn_handed_to_a_session_on_a_dead_host_is_placed_again_on_a_live_one(tmp_path):
    tw = Twins(tmp_path)
    await tw.checkpoints.prepare(TENANT, THREAD, "w", volume="local")
    history = [
        ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
        ev.RunQueued(
            run_id="run_1",
            ordinal=1,
            message_id="msg_1",
            text="go",
            root_node_id="node_1",
            attempt_id="att_1",
            mode="auto",
            disposition="started",
            dispatched=True,
            provider="scripted",
        ),
        ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
        ev.ProviderAttached(
            session_id="ps_dead",
            provider="scripted",
            host_id="host-dead",
            boot_id="gone",
            provider_thread_id="pth_1",
            native_ref="scripted-pth_1",
            capabilities=ProviderCapabilities(),
        ),
    ]
    seq = 0
    for i, data in enumerate(history):
        seq = await tw.log.append(TENANT, THREAD, seq, [envelope(i, data)])
    tw.hosts.add("host-live")
    supervisor = tw.supervisor()
    await tw.wake(supervisor)

    state = await tw.state(THREAD)
    stops = [e.data for e in await tw.log.read(TENANT, THREAD) if isinstance(e.data, ev.ProviderStopped)]
    assert [(s.session_id, s.reason) for s in stops] == [("ps_dead", "host_unreachable")]
    assert state.live_session.host_id == "host-live"
    assert [p.id for p in state.provider_threads] == ["pth_1"]  # resumed, not replaced
    assert [(host, verb) for host, verb, _ in tw.hosts.calls] == [
        ("host-dead", "turn.start"),
        ("", "place"),
        ("host-live", "turn.start"),
    ]
    assert [a.status for a in state.run("run_1").attempts] == ["pending"]  # the same attempt, never played


async def test_L8_an_interrupt_before_any_provider_saw_the_run_ends_it_without_asking_a_host(tmp_path):
    tw = Twins(tmp_path)  # no provider host at all
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    created = await tw.command(coordinator, CreateThread(title="t"))
    thread = created.thread_id
    sent = await tw.command(coordinator, SendMessage(text="go"), thread=thread)
    interrupted = await tw.command(coordinator, InterruptRun(run_id=sent.run_id), thread=thread)
    assert isinstance(interrupted, Accepted), interrupted
    await tw.wake(supervisor)

    state = await tw.state(thread)
    run = state.run(sent.run_id)
    assert run.status == "interrupted" and tw.hosts.calls == []
    checkpoint = next(c for c in state.checkpoints if c.id == run.checkpoint_id)
    assert checkpoint.status == "interrupted" and checkpoint.commit is not None  # captured all the same (L10.2)
    assert [m.data for m in await tw.run_ended(coordinator)] and (await tw.state(thread)).active_run is None


def message_ids(steers) -> list[str]:
    return [s.message_id for s in steers]


FULL_SCRIPT = {"profile": "full", "steps": [{"type": "delay", "ms": 1000}]}  # a session that can steer


async def steered(tw: Twins, coordinator, supervisor, *, turn_ended: bool):
    """A run playing on a steerable session, then a message sent while it plays; the supervisor woken after
    the host's turn ended (``turn_ended``: its end not reported yet) or while it still plays."""
    created = await tw.command(coordinator, CreateThread(title="t"))
    thread = created.thread_id
    sent = await tw.command(coordinator, SendMessage(text="go", script=FULL_SCRIPT), thread=thread)
    await tw.wake(supervisor)
    state = await tw.state(thread)
    session, run = state.live_session, state.run(sent.run_id)
    pth = state.session_thread(session.id).id
    await tw.report(
        supervisor, thread, session.id, pe.TurnStarted(), pth=pth, run_id=run.id, attempt_id=run.attempt.id, index=1
    )
    steer = await tw.command(coordinator, SendMessage(text="also this"), thread=thread)
    assert isinstance(steer, Accepted) and steer.disposition == "steered", steer
    if turn_ended:
        tw.hosts.end_turn(session.id, run.attempt.id)
    await tw.wake(supervisor)
    return thread, run, steer, session, pth


async def test_L3_2_a_steer_reaches_the_playing_turn_once(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, run, steer, _, _ = await steered(tw, coordinator, supervisor, turn_ended=False)
    [sent] = tw.hosts.verbs("turn.steer")
    assert (sent.attempt_id, sent.message_id, sent.text) == (run.attempt.id, steer.message_id, "also this")
    assert (await tw.log.read(TENANT, thread))[-1].type == "steer.delivered"
    await tw.wake(tw.supervisor())  # another replica handed the same events: the state says it was sent
    assert len(tw.hosts.verbs("turn.steer")) == 1 and len(tw.hosts.verbs("turn.start")) == 1


async def test_L3_4_a_steer_refused_by_a_turn_that_just_ended_becomes_the_next_run(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, run, steer, session, pth = await steered(tw, coordinator, supervisor, turn_ended=True)
    assert "steer.delivered" not in [e.type for e in await tw.log.read(TENANT, thread)]
    assert message_ids(tw.hosts.verbs("turn.steer")) == [steer.message_id]  # asked, and refused: not_active
    await tw.report(
        supervisor, thread, session.id, pe.TurnCompleted(), pth=pth, run_id=run.id, attempt_id=run.attempt.id, index=2
    )
    state = await tw.state(thread)
    first, follow = state.runs
    assert first.status == "completed" and (follow.message_id, follow.supersedes_run_id) == (steer.message_id, first.id)
    assert tw.hosts.verbs("turn.start")[-1].attempt_id == follow.attempt.id  # on the same live session


async def test_L2_2_L9_3_a_provider_message_of_several_events_is_folded_in_order_once_across_a_failure_between_them(
    tmp_path,
):
    """Issue 24: a host sends what a runtime reported in one burst as one provider message. Each of its events
    is folded as if sent alone; when the log fails between two of them, the message comes back and only the
    events not yet folded are (the first is known by its index), so nothing is lost or stored twice."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, state, run_id = await tw.dispatched(coordinator, supervisor)
    session, run = state.live_session, state.run(run_id)
    appends, append = 0, tw.log.append_checked

    async def failing_once(*args, **kwargs):
        nonlocal appends
        appends += 1
        if appends == 2:  # after the run's start and first text, before its end: the broker went away
            raise Unavailable("broker away")
        return await append(*args, **kwargs)

    tw.log.append_checked = failing_once  # type: ignore[method-assign]
    node = run.attempt.root_node_id
    await tw.report(
        supervisor,
        thread,
        session.id,
        pe.TurnStarted(),
        then=[
            pe.TextDelta(message_id="msg_a", node_id=node, text="Hel"),
            pe.TextCompleted(message_id="msg_a", node_id=node, text="Hello"),
            pe.TurnCompleted(status="completed"),
        ],
        pth=state.session_thread(session.id).id,
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=1,
    )
    assert appends > 2  # the message was handled again after the failure
    log = await tw.log.read(TENANT, thread)
    stored = [e.type for e in log]
    for kind in ("message.delta", "run.completed"):
        assert stored.count(kind) == 1, stored
    # the run's start came with its first text: that text's delta carries it (issue 38)
    assert "run.started" not in stored, stored
    opened = next(e.data for e in log if isinstance(e.data, ev.MessageDelta))
    assert opened.started is not None and opened.started.session_id == session.id
    # the text's completion came in the burst right before the turn's end: the run's end carries it
    assert "message.completed" not in stored, stored
    ended = next(e.data for e in log if isinstance(e.data, ev.RunCompleted))
    assert ended.message is not None and ended.message.message_id == "msg_a"
    state = await tw.state(thread)
    assert state.run(run.id).status == "completed" and state.run(run.id).attempt.provider_index == 4
    assert [m.text for m in state.run_messages(run.id) if m.id == "msg_a"] == ["Hello"]


async def test_a_workspace_the_volume_lost_is_hydrated_before_the_next_run_starts(tmp_path):
    """Issue 35: a workspace evicted or lost with its disk between two runs comes back from the checkpoint archive
    at the run's previous checkpoint before the run's turn is handed to a provider."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    created = await tw.command(coordinator, CreateThread(title="t"))
    thread = created.thread_id
    first = await tw.command(coordinator, SendMessage(text="one"), thread=thread)
    await tw.wake(supervisor)
    await tw.play(supervisor, thread, first.run_id, {"a.txt": "one\n"})
    await tw.run_ended(coordinator)
    state = await tw.state(thread)
    workspace = state.thread.workspace
    assert state.run(first.run_id).status == "completed"

    tw.checkpoints.lose(TENANT, workspace)
    second = await tw.command(coordinator, SendMessage(text="two"), thread=thread)
    assert isinstance(second, Accepted), second
    await tw.wake(supervisor)
    assert tw.checkpoints.files(TENANT, workspace) == {"a.txt": "one\n"}
    run = (await tw.state(thread)).run(second.run_id)
    assert tw.hosts.verbs("turn.start")[-1].attempt_id == run.attempt.id
    await tw.play(supervisor, thread, second.run_id, {"b.txt": "two\n"})
    state = await tw.state(thread)
    checkpoint = state.checkpoint(state.run(second.run_id).ordinal)
    assert [(f.path, f.change) for f in checkpoint.files] == [("b.txt", "added")]  # run one's file was there


async def test_a_warm_turn_on_the_session_that_saw_its_workspace_captured_starts_without_a_hydrate(tmp_path):
    """Issue 35's hydrate is skipped on the warm path: the base checkpoint was captured under the still live
    session (eviction never takes a workspace whose thread has one), so the turn goes to the host marked
    unhydrated, and only a host that finds the workspace gone sends the supervisor to hydrate it first."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread = (await tw.command(coordinator, CreateThread(title="t"))).thread_id
    first = await tw.command(coordinator, SendMessage(text="one"), thread=thread)
    await tw.wake(supervisor)
    await tw.play(supervisor, thread, first.run_id, {"a.txt": "one\n"})
    await tw.run_ended(coordinator)
    asked = len(tw.checkpoints.hydrates)

    second = await tw.command(coordinator, SendMessage(text="two"), thread=thread)
    await tw.wake(supervisor)
    assert len(tw.checkpoints.hydrates) == asked  # nothing asked of the checkpoint service before the turn
    start = tw.hosts.verbs("turn.start")[-1]
    assert start.unhydrated and start.attempt_id == (await tw.state(thread)).run(second.run_id).attempt.id
    await tw.play(supervisor, thread, second.run_id, {"b.txt": "two\n"})
    await tw.run_ended(coordinator)

    workspace = (await tw.state(thread)).thread.workspace
    tw.checkpoints.lose(TENANT, workspace)  # gone under the live session (its disk, or by hand)
    third = await tw.command(coordinator, SendMessage(text="three"), thread=thread)
    await tw.wake(supervisor)
    assert len(tw.checkpoints.hydrates) == asked + 1  # the host refused the unhydrated turn: hydrated, then started
    assert tw.checkpoints.files(TENANT, workspace) == {"a.txt": "one\n", "b.txt": "two\n"}
    start = tw.hosts.verbs("turn.start")[-1]
    assert not start.unhydrated and start.attempt_id == (await tw.state(thread)).run(third.run_id).attempt.id


async def test_a_new_threads_runtime_is_hinted_at_its_creation_under_the_session_its_first_run_opens(tmp_path):
    """Issue 38 (the first turn): the runtime starts while the user types the first message. The creation's hint
    is speculative (the host launches it only into free room) and names the session the first run then places; a
    later session of the thread never gets that id again."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread = (await tw.command(coordinator, CreateThread(title="t"))).thread_id
    await tw.wake(supervisor)
    [hint] = tw.hosts.verbs("warm")
    assert hint.speculative and (hint.tenant, hint.thread) == (TENANT, thread)

    sent = await tw.command(coordinator, SendMessage(text="go"), thread=thread)
    await tw.wake(supervisor)
    again = tw.hosts.verbs("warm")[-1]
    assert again.session_id == hint.session_id and not again.speculative  # the dispatch's own hint, certain now
    state = await tw.state(thread)
    assert tw.hosts.verbs("place")[-1].session_id == hint.session_id == state.live_session.id
    assert state.run(sent.run_id).attempt.status == "pending"

    lost = state.live_session
    tw.hosts.remove("host-1")
    tw.hosts.add("host-2")
    await tw.report(supervisor, thread, lost.id, pe.SessionStopped(reason="host_restarted"), pth="pth_x")
    state = await tw.state(thread)
    assert state.live_session is not None and state.live_session.id != hint.session_id
    assert len(tw.hosts.verbs("warm")) == 2  # a thread that has had a session is never hinted at its creation's id
