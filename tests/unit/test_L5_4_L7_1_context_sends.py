"""L5.4/L7.1 without I/O: a message asking for a clean context or a merge-back is checked (``check``: its mode,
the fork to read), then decided with that fork as read (``decide``): a run of its own whose ``run.queued``
carries the context request."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import apply, command, new_thread, send
from treadle.core import events as ev
from treadle.core.ctx import Ctx
from treadle.core.errors import Conflict, NotFound
from treadle.core.lineage import context_sends
from treadle.core.state import ThreadState
from treadle.core.thread.commands import SendMessage
from treadle.providers.registry import CATALOGUE


def message(state: ThreadState, **kw):
    return command(SendMessage(text="again", **kw), thread=state.thread.id)


def test_L5_4_a_clean_context_message_queues_a_run_of_its_own_with_the_request():
    state = new_thread()
    send(state)  # a run is active: a clean-context message never steers it
    cmd, fork = context_sends.check(message(state, clean_context=True))
    assert fork is None and cmd.body.mode == "queue_after_active"
    assert context_sends.wants_context(cmd)
    events, receipt = context_sends.decide(state, cmd, None, Ctx.for_command(cmd, CATALOGUE))
    [queued] = [e for e in events if isinstance(e, ev.RunQueued)]
    assert queued.context == ev.ContextRequest(clean_context=True) and receipt.disposition == "queued"
    apply(state, events, cmd.id)
    again, receipt = context_sends.decide(state, cmd, None, Ctx.for_command(cmd, CATALOGUE))
    assert again == [] and receipt.duplicate


def test_L5_4_L7_1_modes_that_cannot_carry_a_context_and_ids_that_are_no_thread_are_refused_before_any_read():
    state = new_thread()
    with pytest.raises(Conflict) as steer:
        context_sends.check(message(state, clean_context=True, mode="steer"))
    assert steer.value.code == "invalid_mode"
    with pytest.raises(NotFound) as bad:
        context_sends.check(message(state, merge_back_from="not-a-thread"))
    assert bad.value.code == "thread_not_found"
    _, fork = context_sends.check(message(state, merge_back_from="thr_01JABCDEFGHJKMNPQRSTVWXYZ0"))
    assert fork == "thr_01JABCDEFGHJKMNPQRSTVWXYZ0"


def test_L7_1_a_merge_back_from_a_thread_that_is_not_there_is_thread_not_found():
    state = new_thread()
    cmd, fork = context_sends.check(message(state, merge_back_from="thr_01JABCDEFGHJKMNPQRSTVWXYZ0"))
    with pytest.raises(NotFound) as missing:
        context_sends.decide(state, cmd, ThreadState(), Ctx.for_command(cmd, CATALOGUE))
    assert missing.value.code == "thread_not_found"
