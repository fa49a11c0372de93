"""Issue 41, item 1: which events make a line of a run's story, and what it says (pure: ``story.line``); the
access log's request id takes a client's plain token and replaces anything else."""

from __future__ import annotations

import datetime

from treadle.core import events as ev
from treadle.core.envelope import Envelope
from treadle.eventlog import story
from treadle.runtime.access_log import request_id


def _env(payload) -> Envelope:
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return Envelope(
        id="evt_1", type=payload.TYPE, tenant="acme", thread="thr_1", at=at, actor="t", command_id="cmd_1", data=payload
    )


def test_transitions_make_one_line_each_and_other_events_none():
    held = story.line(_env(ev.RunHeld(run_id="run_1", attempt_id="att_1", reason="capacity")))
    assert held == ("run held: capacity", {"reason": "capacity"})
    failed = story.line(_env(ev.RunFailed(run_id="run_1", attempt_id="att_1", error="boom\n  at x" + "y" * 1000)))
    assert failed is not None and failed[0].startswith("run failed: boom at xyy") and "\n" not in failed[0]
    assert len(str(failed[1]["reason"])) == 300
    recovered = story.line(
        _env(ev.AttemptStarted(run_id="run_1", attempt_id="att_2", root_node_id="n", reason="retry"))
    )
    assert recovered == ("run recovered with a new attempt (retry)", {"reason": "retry"})
    stopped = story.line(_env(ev.ProviderStopped(session_id="ps_1", reason="idle")))
    assert stopped == ("session stopped: idle", {"session": "ps_1", "reason": "idle"})
    assert story.line(_env(ev.RunInterrupted(run_id="run_1", attempt_id="att_1"))) == (
        "run interrupted",
        {"reason": None},
    )
    assert story.line(_env(ev.RunDispatched(run_id="run_1"))) is None
    assert story.line(_env(ev.RunWarning(run_id="run_1", message="slow"))) is None


def test_a_request_id_is_the_clients_plain_token_or_a_new_one():
    assert request_id(b"req-41.a:b_c") == "req-41.a:b_c"
    for hostile in (b"", b"a b", b"x\r\nInjected: 1", b"a" * 129, "é".encode("latin-1"), None):
        made = request_id(hostile)
        assert len(made) == 32 and made.isalnum(), hostile
