"""The event-log invariant check (issue 9): a clean log passes; each kind of corruption is named."""

from __future__ import annotations

from datetime import UTC, datetime

from treadle.core import events as ev
from treadle.projections.check import check_events

AT = datetime(2026, 12, 3, tzinfo=UTC)


def _event(
    seq: int,
    payload: ev.Payload,
    thread: str = "thr_1",
    id: str | None = None,
    subject: str | None = None,
    command: str | None = None,
):
    env = ev.Envelope(
        id=id or f"evt_{seq}",
        type=payload.TYPE,
        tenant="acme",
        thread=thread,
        at=AT,
        command_id=command or f"cmd_{seq}",
        actor="test",
        data=payload,
    )
    return seq, subject or f"treadle.evt.acme.{thread}.{payload.TYPE}", ev.encode_event(env)


def _created(seq: int = 1, thread: str = "thr_1"):
    return _event(seq, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="alice"), thread)


def _queued(seq: int, run: str, ordinal: int):
    return _event(
        seq,
        ev.RunQueued(
            run_id=run,
            ordinal=ordinal,
            message_id="msg_" + run,
            text="hi",
            root_node_id="n",
            attempt_id="att_" + run,
            mode="auto",
            disposition="started",
            provider="scripted",
            dispatched=True,
        ),
    )


def _completed(seq: int, run: str, id: str | None = None):
    return _event(seq, ev.RunCompleted(run_id=run, attempt_id="att_" + run), id=id)


def _kinds(items) -> list[str]:
    return [p.kind for p in check_events(items).problems]


def test_a_clean_log_has_no_problems():
    report = check_events([_created(), _queued(2, "r1", 1), _completed(3, "r1"), _queued(4, "r2", 2)])
    assert report.ok and (report.threads, report.runs, report.terminal_runs) == (1, 2, 1)


def test_each_breach_is_named():
    assert _kinds([_created(), (2, "treadle.evt.acme.thr_1.run.queued", b"{not json")]) == ["undecodable"]
    assert _kinds([_created(), _queued(2, "r1", 1), _completed(3, "r1"), _completed(4, "r1")]) == ["second_terminal"]
    assert _kinds([_created(), _queued(2, "r1", 1), _queued(3, "r2", 3)]) == ["ordinal_gap"]
    assert _kinds([_created(), _completed(2, "r9")]) == ["unknown_run"]
    assert _kinds([_queued(1, "r1", 1)]) == ["no_thread_created"]
    assert _kinds([_created(), _created(2)]) == ["duplicate_thread_created"]
    assert "duplicate_id" in _kinds([_created(), _queued(2, "r1", 1), _completed(3, "r1", id="evt_2")])
    wrong = _event(2, ev.RunDispatched(run_id="r1"), subject="treadle.evt.other.thr_1.run.dispatched")
    assert _kinds([_created(), _queued(3, "r1", 1), wrong]) == ["wrong_subject"]
    late = _event(4, ev.RunWarning(run_id="r1", message="late"))
    assert _kinds([_created(), _queued(2, "r1", 1), _completed(3, "r1"), late]) == ["after_terminal"]


def _started(seq: int, run: str, session: str = "ses_1"):
    return _event(seq, ev.RunStarted(run_id=run, attempt_id="att_" + run, session_id=session, turn_id="turn_" + run))


def _ended(seq: int, run: str, checkpoint: ev.CheckpointCaptured | None = None, kind=ev.RunCompleted):
    return _event(seq, kind(run_id=run, attempt_id="att_" + run, checkpoint=checkpoint))


def _checkpoint(run: str, status: str = "completed") -> ev.CheckpointCaptured:
    return ev.CheckpointCaptured(
        checkpoint_id="ckpt_" + run,
        run_id=run,
        ordinal=1,
        status=status,
        commit="c0ffee" if status == "completed" else None,
    )


def _steered(seq: int, run: str, message: str):
    return _event(seq, ev.RunSteered(run_id=run, message_id=message, text="also this", steering="native"))


def test_L10_2_a_run_that_reached_its_provider_and_ended_without_a_checkpoint_is_reported():
    kinds = _kinds([_created(), _queued(2, "r1", 1), _started(3, "r1"), _ended(4, "r1")])
    assert kinds == ["no_checkpoint"]


def test_L10_2_a_run_whose_end_carries_its_start_counts_as_started():
    """A turn over at once: its end carries the run's start (``RunEnded.started``), no run.started before it."""
    started = ev.RunStarted(run_id="r1", attempt_id="att_r1", session_id="ses_1", turn_id="turn_r1")
    bare = _event(3, ev.RunCompleted(run_id="r1", attempt_id="att_r1", started=started))
    assert _kinds([_created(), _queued(2, "r1", 1), bare]) == ["no_checkpoint"]
    whole = _event(3, ev.RunCompleted(run_id="r1", attempt_id="att_r1", started=started, checkpoint=_checkpoint("r1")))
    assert check_events([_created(), _queued(2, "r1", 1), whole]).ok


def test_L10_4_a_missing_or_error_summary_counts_as_the_runs_checkpoint():
    for status in ("missing", "error"):
        ended = _ended(4, "r1", _checkpoint("r1", status), kind=ev.RunFailed)
        assert check_events([_created(), _queued(2, "r1", 1), _started(3, "r1"), ended]).ok
    assert check_events([_created(), _queued(2, "r1", 1), _started(3, "r1"), _ended(4, "r1", _checkpoint("r1"))]).ok


def test_a_run_cancelled_before_any_provider_took_it_needs_no_checkpoint():
    assert check_events([_created(), _queued(2, "r1", 1), _ended(3, "r1", kind=ev.RunCancelled)]).ok


def test_a_message_accepted_twice_is_reported():
    # the same command (a retried send) accepted a second message
    retried = _event(
        3,
        ev.RunQueued(
            run_id="r2",
            ordinal=2,
            message_id="msg_x",
            text="hi",
            root_node_id="n2",
            attempt_id="att_r2",
            mode="auto",
            disposition="queued",
            provider="scripted",
        ),
        command="cmd_2",
    )
    assert _kinds([_created(), _queued(2, "r1", 1), retried]) == ["duplicate_message"]
    # one message opening two runs
    twice = _event(
        3,
        ev.RunQueued(
            run_id="r2",
            ordinal=2,
            message_id="msg_r1",
            text="hi",
            root_node_id="n2",
            attempt_id="att_r2",
            mode="auto",
            disposition="queued",
            provider="scripted",
        ),
    )
    assert _kinds([_created(), _queued(2, "r1", 1), twice]) == ["message_twice"]


def test_L3_2_a_steer_is_delivered_once_and_never_left_behind():
    head = [_created(), _queued(2, "r1", 1), _started(3, "r1"), _steered(4, "r1", "msg_s")]
    delivered = _event(5, ev.SteerDelivered(run_id="r1", attempt_id="att_r1", message_id="msg_s"))
    end = _ended(7, "r1", _checkpoint("r1"))
    assert check_events([*head, delivered, end]).ok
    again = _event(6, ev.SteerDelivered(run_id="r1", attempt_id="att_r1", message_id="msg_s"))
    assert _kinds([*head, delivered, again, end]) == ["delivered_twice"]
    assert _kinds([*head, end]) == ["undelivered_steer"]
    # L3.4: a steer too late for its run opens the run superseding it — its one delivery
    superseding = _event(
        8,
        ev.RunQueued(
            run_id="r2",
            ordinal=2,
            message_id="msg_s",
            text="also this",
            root_node_id="n2",
            attempt_id="att_r2",
            mode="auto",
            disposition="started",
            provider="scripted",
            supersedes_run_id="r1",
            dispatched=True,
        ),
    )
    assert check_events([*head, end, superseding]).ok
    assert _kinds([*head, delivered, end, superseding]) == ["delivered_twice"]


def test_L3_3_a_recovery_attempt_carrying_a_steer_again_is_not_a_second_delivery():
    restart = _event(
        5,
        ev.AttemptStarted(
            run_id="r1", attempt_id="att_2", root_node_id="n2", reason="steering_restart", message_ids=["msg_s"]
        ),
    )
    recovery = _event(
        6,
        ev.AttemptStarted(
            run_id="r1", attempt_id="att_3", root_node_id="n3", reason="provider_recovery", message_ids=["msg_s"]
        ),
    )
    events = [
        _created(),
        _queued(2, "r1", 1),
        _started(3, "r1"),
        _steered(4, "r1", "msg_s"),
        restart,
        recovery,
        _ended(7, "r1", _checkpoint("r1")),
    ]
    assert check_events(events).ok


def test_L11_3_a_request_left_pending_after_its_session_is_gone_is_reported():
    opened = _event(
        4,
        ev.RequestOpened(
            request_id="req_1", run_id="r1", node_id="n_a", attempt_id="att_r1", kind="command", prompt="ls?"
        ),
    )
    stopped = _event(5, ev.ProviderStopped(session_id="ses_1", reason="host_lost"))
    head = [_created(), _queued(2, "r1", 1), _started(3, "r1", "ses_1"), opened]
    assert _kinds([*head, stopped]) == ["orphan_request"]
    resolved = _event(6, ev.RequestResolved(request_id="req_1", run_id="r1", status="not_resumable"))
    assert check_events([*head, stopped, resolved]).ok
    assert check_events(head).ok  # pending while its session is live and its run going: as it should be


def _state():
    from treadle.core.state import fold

    return fold(
        [
            ev.decode_event(data, seq)
            for seq, _, data in [_created(), _queued(2, "r1", 1), _started(3, "r1"), _ended(4, "r1", _checkpoint("r1"))]
        ]
    )


def _stored(state, **changes):
    import msgspec

    from treadle.projections import document, places, questions, store
    from treadle.projections.check import Stored

    base = Stored(
        doc=document.encode(state),
        seq=state.seq,
        summary=msgspec.json.encode(store.summary(state)),
        index={"r1": "thr_1"},
        places=places.stored(state),
        answers=questions.stored(state),
    )
    return msgspec.structs.replace(base, **changes)


def test_a_projection_equal_to_the_replay_passes_and_each_drift_is_named():
    from treadle.projections import places
    from treadle.projections.check import compare_projection

    state = _state()
    assert compare_projection(state, _stored(state)) == []
    drifted = _stored(state, doc=_stored(state).doc.replace(b'"status":"completed"', b'"status":"failed"', 1))
    [p] = compare_projection(state, drifted)
    assert p.kind == "projection_mismatch" and p.subject == "treadle:{acme}:thread:thr_1"
    assert p.detail.startswith("messages[0].status") and '"completed"' in p.detail and '"failed"' in p.detail
    assert [p.kind for p in compare_projection(state, _stored(state, doc=None))] == ["projection_missing"]
    assert [p.kind for p in compare_projection(state, _stored(state, seq=3))] == ["projection_stale"]
    assert [p.kind for p in compare_projection(state, _stored(state, summary=b"{}"))] == ["summary_mismatch"]
    assert [p.kind for p in compare_projection(state, _stored(state, index={"r1": None}))] == ["index_mismatch"]
    moved = _stored(state, places={**places.stored(state), b"rm:r1": b"7"})
    [p] = compare_projection(state, moved)
    assert p.kind == "places_mismatch" and "rm:r1" in p.detail
    [p] = compare_projection(state, _stored(state, answers={}))
    assert p.kind == "answers_mismatch" and "q:run:r1" in p.detail


def test_L3_6_queued_runs_with_nothing_active_to_wait_for_are_a_stalled_queue():
    queued = _event(
        5,
        ev.RunQueued(
            run_id="r2",
            ordinal=2,
            message_id="msg_r2",
            text="next",
            root_node_id="n2",
            attempt_id="att_r2",
            mode="queue_after_active",
            disposition="queued",
            provider="scripted",
        ),
    )
    first = [_created(), _queued(2, "r1", 1), _started(3, "r1")]
    assert check_events([*first, _ended(4, "r1", _checkpoint("r1"))]).ok
    assert check_events([*first, queued]).ok  # behind the active run
    ended = _ended(6, "r1", _checkpoint("r1"))
    assert _kinds([*first, queued, ended]) == ["stalled_queue"]  # r1 ended, r2 never dispatched
    assert check_events([*first, queued, ended, _event(7, ev.RunDispatched(run_id="r2"))]).ok
