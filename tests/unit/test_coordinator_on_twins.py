"""Coordinator logic on the in-memory twins of its ports (no broker, git or provider host): a send dispatched,
handed to a host and started, the next queued run dispatched when it ends (L3.6), a retried command answered
with its first receipt through an append conflict, an answer delivered to the session that asked (L11.2,
L11.3), a rollback restoring the files of a run (L10.5), and threads per tenant counted from the log."""

from __future__ import annotations

from tests.unit.twins import TENANT, Twins
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.commands import Accepted, Rejected
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.core.requests.commands import RespondRequest
from treadle.core.rollback.commands import RollbackThread
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.eventlog.errors import Conflict


def conflict_once(coordinator, when) -> list:
    """The coordinator's next append of a batch ``when(thread, events)`` holds conflicts (another writer got
    there first) without landing; returns the batches it refused."""
    append, refused = coordinator._store.append, []

    async def appending(tenant, thread, state, events, **kw):
        if not refused and when(thread, events):
            refused.append(list(events))
            raise Conflict(state.seq + 1)
        return await append(tenant, thread, state, events, **kw)

    coordinator._store.append = appending
    return refused


async def started_thread(tw: Twins, coordinator, supervisor) -> tuple[str, Accepted]:
    """A thread whose first run was handed to host-1 and started there."""
    created = await tw.command(coordinator, CreateThread(title="t"))
    assert isinstance(created, Accepted), created
    sent = await tw.command(coordinator, SendMessage(text="first"), thread=created.thread_id)
    assert isinstance(sent, Accepted) and sent.disposition == "started", sent
    await tw.wake(supervisor)
    state = await tw.state(created.thread_id)
    run = state.run(sent.run_id)
    await tw.report(
        supervisor,
        created.thread_id,
        state.live_session.id,
        pe.TurnStarted(native_turn_ref="t1"),
        pth=state.session_thread(state.live_session.id).id,
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=1,
    )
    return created.thread_id, sent


async def test_L3_6_a_send_is_started_on_a_host_and_the_queued_run_follows_when_it_ends(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, first = await started_thread(tw, coordinator, supervisor)
    state = await tw.state(thread)
    assert tw.checkpoints.files(TENANT, state.thread.workspace) == {}  # prepared with the thread
    assert state.run(first.run_id).status == "running" and state.live_session.host_id == "host-1"
    [start] = tw.hosts.verbs("turn.start")
    assert (start.run_id, start.text) == (first.run_id, "first")

    second = await tw.command(coordinator, SendMessage(text="second", mode="queue_after_active"), thread=thread)
    assert isinstance(second, Accepted) and second.disposition == "queued", second
    assert await tw.run_ended(coordinator) == []  # nothing ended yet
    session = state.live_session
    tw.checkpoints.files(TENANT, state.thread.workspace)["out.txt"] = "done\n"  # what the turn wrote
    run = state.run(first.run_id)
    for index, body in enumerate(
        [
            pe.TextCompleted(message_id="msg_a", node_id=run.attempt.root_node_id, text="ok"),
            pe.TurnCompleted(status="completed"),
        ],
        start=2,
    ):
        await tw.report(
            supervisor,
            thread,
            session.id,
            body,
            pth=state.session_thread(session.id).id,
            run_id=run.id,
            attempt_id=run.attempt.id,
            index=index,
        )
    state = await tw.state(thread)
    done = state.run(first.run_id)
    assert done.status == "completed"
    checkpoint = next(c for c in state.checkpoints if c.id == done.checkpoint_id)
    assert [(f.path, f.change) for f in checkpoint.files] == [("out.txt", "added")]

    assert [m.subject.split(".")[4:6] for m in await tw.run_ended(coordinator)] == [["run", "completed"]]
    last = (await tw.log.read(TENANT, thread))[-1]  # the coordinator dispatched the queue's head
    assert (last.type, last.data.run_id) == ("run.dispatched", second.run_id)
    await tw.wake(supervisor)
    assert [s.run_id for s in tw.hosts.verbs("turn.start")] == [first.run_id, second.run_id]
    assert len(tw.hosts.verbs("place")) == 1  # the second run plays on the live session


async def test_a_retried_send_through_a_replica_with_a_stale_cache_gets_its_first_receipt(tmp_path):
    tw = Twins(tmp_path)
    a, b = tw.coordinator(), tw.coordinator()
    created = await tw.command(a, CreateThread(title="t"))
    thread = created.thread_id
    await b._store.load(TENANT, thread)  # b caches the thread as it is before the send
    sent = await tw.command(a, SendMessage(text="hi"), thread=thread, command_id="cmd_send")
    again = await tw.command(b, SendMessage(text="hi"), thread=thread, command_id="cmd_send")  # conflicts first
    assert (
        isinstance(again, Accepted)
        and again.duplicate
        and (again.run_id, again.message_id) == (sent.run_id, sent.message_id)
    )
    state = await tw.state(thread)
    assert len(state.messages) == 1 and len(state.runs) == 1


async def test_L11_an_answer_reaches_the_session_that_asked_once_and_a_gone_one_is_not_resumable(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, sent = await started_thread(tw, coordinator, supervisor)
    state = await tw.state(thread)
    session, run = state.live_session, state.run(sent.run_id)
    for request_id, index in (("req_1", 2), ("req_2", 3)):
        tw.hosts.ask(session.id, request_id)
        await tw.report(
            supervisor,
            thread,
            session.id,
            pe.RequestOpened(request_id=request_id, node_id=run.attempt.root_node_id, kind="command", prompt="rm?"),
            pth=state.session_thread(session.id).id,
            run_id=run.id,
            attempt_id=run.attempt.id,
            index=index,
        )

    answer = RespondRequest(request_id="req_1", decision="accept")
    first = await tw.command(coordinator, answer, thread=thread, command_id="cmd_answer")
    assert isinstance(first, Accepted) and first.disposition == "resolved", first
    retried = await tw.command(coordinator, answer, thread=thread, command_id="cmd_answer")
    assert isinstance(retried, Accepted) and retried.duplicate
    assert [r.request_id for r in tw.hosts.verbs("request.respond")] == ["req_1"]  # asked once
    assert (await tw.state(thread)).request("req_1").status == "resolved"

    tw.hosts.remove("host-1")  # the host died with the callback of req_2
    gone = await tw.command(coordinator, RespondRequest(request_id="req_2", decision="accept"), thread=thread)
    assert isinstance(gone, Rejected) and gone.code == "not_resumable", gone
    assert (await tw.state(thread)).request("req_2").status == "not_resumable"


async def _asking(tw: Twins, supervisor, thread: str, run_id: str, request_id: str, kind: str = "command") -> None:
    """The session of ``run_id`` asks ``request_id`` (its callback waits on the host)."""
    state = await tw.state(thread)
    session, run = state.live_session, state.run(run_id)
    tw.hosts.ask(session.id, request_id)
    await tw.report(
        supervisor,
        thread,
        session.id,
        pe.RequestOpened(request_id=request_id, node_id=run.attempt.root_node_id, kind=kind, prompt="rm?"),
        pth=state.session_thread(session.id).id,
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=2,
    )


async def test_L11_2_an_answer_whose_record_conflicts_is_decided_again_recorded_once_and_delivered_once(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, sent = await started_thread(tw, coordinator, supervisor)
    await _asking(tw, supervisor, thread, sent.run_id, "req_1")
    refused = conflict_once(coordinator, lambda _t, events: isinstance(events[0], ev.RequestResolved))
    answer = RespondRequest(request_id="req_1", decision="decline", message="no")
    got = await tw.command(coordinator, answer, thread=thread, command_id="cmd_answer")
    assert isinstance(got, Accepted) and got.disposition == "resolved" and not got.duplicate, got
    assert len(refused) == 1  # the first record conflicted; decided again, it landed
    assert [r.request_id for r in tw.hosts.verbs("request.respond")] == ["req_1"]  # the host was asked once
    req = (await tw.state(thread)).request("req_1")
    assert (req.status, req.response, req.command_id) == (
        "resolved",
        {"decision": "decline", "message": "no"},
        "cmd_answer",
    )
    again = await tw.command(coordinator, answer, thread=thread, command_id="cmd_answer")
    assert isinstance(again, Accepted) and again.duplicate, again
    assert len(tw.hosts.verbs("request.respond")) == 1  # this replica knows the provider has it: not asked again
    other = tw.coordinator()  # another replica does not: it offers the same answer, which the host takes as once
    assert (await tw.command(other, answer, thread=thread, command_id="cmd_answer")).duplicate
    assert len(tw.hosts.verbs("request.respond")) == 2
    assert list(tw.hosts.session((await tw.state(thread)).live_session.id).answered) == ["req_1"]
    resolved = [e for e in await tw.log.read(TENANT, thread) if e.type == "request.resolved"]
    assert [e.data.status for e in resolved] == ["resolved"]  # recorded once


async def test_L11_2_a_question_whose_turn_ends_as_soon_as_it_is_answered_is_recorded_answered_never_cancelled(
    tmp_path,
):
    """Issue 36, finding 8: the provider takes the answer and finishes its turn at once; the run's end closes the
    requests still pending (as cancelled). The answer was recorded after its delivery, so it was one of them: the
    feed and the node tree said ``user_input`` cancelled for a question the user answered."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, sent = await started_thread(tw, coordinator, supervisor)
    await _asking(tw, supervisor, thread, sent.run_id, "req_q", kind="user_input")
    state = await tw.state(thread)
    session, run = state.live_session, state.run(sent.run_id)
    verb = tw.hosts.verb

    async def answered_then_turn_ends(host_id, name, request):
        reply = await verb(host_id, name, request)  # the provider has the answer ...
        if name == "request.respond":  # ... and ends its turn before the host's reply reaches the coordinator
            await tw.report(
                supervisor,
                thread,
                session.id,
                pe.TurnCompleted(status="completed"),
                pth=state.session_thread(session.id).id,
                run_id=run.id,
                attempt_id=run.attempt.id,
                index=3,
            )
        return reply

    tw.hosts.verb = answered_then_turn_ends
    got = await tw.command(coordinator, RespondRequest(request_id="req_q", answers={"0": "pg"}), thread=thread)
    assert isinstance(got, Accepted) and not got.duplicate, got
    after = await tw.state(thread)
    assert after.run(sent.run_id).status == "completed"
    req = after.request("req_q")
    assert (req.status, req.response) == ("resolved", {"answers": {"0": "pg"}})
    assert after.run(sent.run_id).node(req.node_id).status == "completed"
    resolved = [e.data.status for e in await tw.log.read(TENANT, thread) if e.type == "request.resolved"]
    assert resolved == ["resolved"]  # never cancelled, not even on the way
    assert [a.summary for a in after.activity if a.kind == "request.resolved"] == ["resolved"]


async def test_L6_1_L6_5_a_fork_gets_the_files_of_its_point_and_a_retry_after_a_conflict_redoes_nothing(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread = (await tw.command(coordinator, CreateThread(title="t"))).thread_id
    runs = []
    for text, writes in (("one", {"a.txt": "1\n"}), ("two", {"a.txt": "2\n"})):
        sent = await tw.command(coordinator, SendMessage(text=text), thread=thread)
        await tw.wake(supervisor)
        await tw.play(supervisor, thread, sent.run_id, writes)
        await tw.run_ended(coordinator)
        runs.append(sent.run_id)
    made = []
    materialize = tw.checkpoints.materialize

    async def materializing(request, *, volume):
        made.append(request.thread)
        return await materialize(request, volume=volume)

    tw.checkpoints.materialize = materializing
    # the child is created, then the source's record of it conflicts: decided again, the child is found made
    refused = conflict_once(coordinator, lambda t, events: t == thread and isinstance(events[0], ev.ChildForked))
    fork = ForkThread(source=ForkSource(type="run", id=runs[0]))
    forked = await tw.command(coordinator, fork, thread=thread, command_id="cmd_fork")
    assert isinstance(forked, Accepted) and forked.disposition == "forked" and not forked.duplicate, forked
    assert len(refused) == 1 and made == [forked.thread_id]  # one workspace, made once
    child = await tw.state(forked.thread_id)
    assert [e.type for e in await tw.log.read(TENANT, forked.thread_id)] == ["thread.created", "thread.forked"]
    assert tw.checkpoints.files(TENANT, child.thread.workspace) == {"a.txt": "1\n"}  # run one's files
    assert child.lineage.parent_thread_id == thread and child.lineage.source_point["run_id"] == runs[0]
    assert [c["thread_id"] for c in (await tw.state(thread)).lineage.children] == [forked.thread_id]

    again = await tw.command(coordinator, fork, thread=thread, command_id="cmd_fork")
    assert isinstance(again, Accepted) and again.duplicate and again.thread_id == forked.thread_id, again
    assert made == [forked.thread_id] and len(await tw.log.read(TENANT, forked.thread_id)) == 2


async def test_L6_5_a_fork_whose_workspace_cannot_be_made_is_refused_and_creates_no_thread(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread = (await tw.command(coordinator, CreateThread(title="t"))).thread_id
    sent = await tw.command(coordinator, SendMessage(text="one"), thread=thread)
    await tw.wake(supervisor)
    await tw.play(supervisor, thread, sent.run_id, {"a.txt": "1\n"})
    await tw.run_ended(coordinator)
    workspace = (await tw.state(thread)).thread.workspace
    del tw.checkpoints.workspaces[(TENANT, tw.checkpoints._path(workspace))]  # its checkpoints are gone
    refused = await tw.command(coordinator, ForkThread(source=ForkSource(type="run", id=sent.run_id)), thread=thread)
    assert isinstance(refused, Rejected) and refused.code == "workspace_unavailable", refused
    assert refused.details == {"reason": "workspace_missing"}
    assert (await tw.state(thread)).lineage is None or not (await tw.state(thread)).lineage.children
    assert await tw.log.subject_count(f"treadle.evt.{TENANT}.*.thread.created.*") == 1  # the source only


async def test_L10_5_a_rollback_restores_the_files_of_a_run_and_the_thread_goes_on(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    created = await tw.command(coordinator, CreateThread(title="t"))
    thread = created.thread_id
    workspace = (await tw.state(thread)).thread.workspace
    runs = []
    for text, writes in (("one", {"a.txt": "1\n"}), ("two", {"a.txt": "2\n", "b.txt": "b\n"})):
        sent = await tw.command(coordinator, SendMessage(text=text), thread=thread)
        await tw.wake(supervisor)
        await tw.play(supervisor, thread, sent.run_id, writes)
        await tw.run_ended(coordinator)
        runs.append(sent.run_id)
    assert tw.checkpoints.files(TENANT, workspace) == {"a.txt": "2\n", "b.txt": "b\n"}

    rolled = await tw.command(coordinator, RollbackThread(to_run_ordinal=1), thread=thread)
    assert isinstance(rolled, Accepted) and rolled.rollback_id, rolled
    assert tw.checkpoints.files(TENANT, workspace) == {"a.txt": "1\n"}
    state = await tw.state(thread)
    [rollback] = state.rollbacks
    assert rollback.status == "completed" and rollback.provider_context == "divergent"  # scripted: no native rollback
    dropped = state.run(runs[1])
    assert dropped.status == "rolled_back" and state.run(runs[0]).status == "completed"
    assert next(c for c in state.checkpoints if c.id == dropped.checkpoint_id).stale  # retired under stale/
    again = await tw.command(coordinator, SendMessage(text="three"), thread=thread)
    assert isinstance(again, Accepted) and again.disposition == "started", again


async def test_threads_per_tenant_are_counted_from_the_log_before_a_thread_is_made(tmp_path):
    tw = Twins(tmp_path)
    a, b = tw.coordinator(max_threads_per_tenant=2), tw.coordinator(max_threads_per_tenant=2)
    assert isinstance(await tw.command(a, CreateThread(title="1")), Accepted)
    assert isinstance(await tw.command(b, CreateThread(title="2")), Accepted)  # b counts a's thread too
    refused = await tw.command(a, CreateThread(title="3"))
    assert isinstance(refused, Rejected) and refused.code == "quota_exceeded", refused
    assert await tw.log.subject_count(f"treadle.evt.{TENANT}.*.thread.created.*") == 2
