"""The event-log invariant check (issue 9): a clean log passes; each kind of corruption is named."""

from __future__ import annotations

from datetime import datetime, timezone

from treadle.domain import events as ev
from treadle.projections.check import check_events

AT = datetime(2026, 12, 3, tzinfo=timezone.utc)


def _event(seq: int, payload: ev.Payload, thread: str = "thr_1", id: str | None = None, subject: str | None = None):
    env = ev.Envelope(id=id or f"evt_{seq}", type=payload.TYPE, tenant="acme", thread=thread, at=AT,
                      command_id="cmd_1", actor="test", data=payload)
    return seq, subject or f"treadle.evt.acme.{thread}.{payload.TYPE}", ev.encode_event(env)


def _created(seq: int = 1, thread: str = "thr_1"):
    return _event(seq, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="alice"), thread)


def _queued(seq: int, run: str, ordinal: int):
    return _event(seq, ev.RunQueued(run_id=run, ordinal=ordinal, message_id="msg_" + run, text="hi", root_node_id="n",
                                    attempt_id="att_" + run, mode="auto", disposition="started", provider="scripted"))


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
