"""``treadle run`` and ``treadle watch`` read a run's last message where the run's end carries it
(``RunEnded.message``) as they read a ``message.completed``."""

from __future__ import annotations

import json

from treadle.cli.live import RunView, Tail
from treadle.cli.render import console
from treadle.client import SseEvent

RUN, MSG = "run_1", "msg_1"


def _event(seq: int, kind: str, data: dict) -> SseEvent:
    return SseEvent(id=seq, event=kind, data=json.dumps({"type": kind, "data": data}).encode())


def _end() -> SseEvent:
    message = {"message_id": MSG, "run_id": RUN, "attempt_id": "att_1", "node_id": "node_1", "text": "all done"}
    return _event(3, "run.completed", {"run_id": RUN, "attempt_id": "att_1", "message": message})


def test_L2_3_treadle_run_shows_the_reply_a_run_end_carries():
    view = RunView()
    view.follow_run(RUN)
    view.add(_event(2, "run.started", {"run_id": RUN, "attempt_id": "att_1", "session_id": "s", "turn_id": "t"}))
    view.add(_end())
    reply = view._items[MSG]
    assert (reply.text, reply.done) == ("all done", True)
    assert view.status == "completed" and view.done.is_set()


def test_L2_3_treadle_watch_prints_the_rest_of_a_reply_a_run_end_carries():
    tail = Tail()
    with console.capture() as captured:
        tail.add(SseEvent(id=None, event="live.delta", data=json.dumps({"message_id": MSG, "text": "all "}).encode()))
        tail.add(_end())
    out = captured.get()
    assert "all done" in out and out.count("all") == 1  # the live text, then only what it had not shown
