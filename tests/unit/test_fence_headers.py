"""Issue 16: a new thread's append may be fenced on its tenant's creations; readers must still see it as the
thread's first event, never as an event whose predecessors they missed."""

from __future__ import annotations

from treadle.eventlog.log import ELSS, ELSS_SUBJECT, fenced_after


def test_a_thread_fence_names_the_previous_event_and_a_tenant_fence_means_none_came_before():
    assert fenced_after(None) is None and fenced_after({}) is None
    assert fenced_after({ELSS: "41", ELSS_SUBJECT: "treadle.evt.acme.thr_a.>"}) == 41
    assert fenced_after({ELSS: "41"}) == 41  # older events carried the thread's fence alone
    assert fenced_after({ELSS: "41", ELSS_SUBJECT: "treadle.evt.acme.*.thread.created.*"}) == 0
