"""L9.3 fair share of provider capacity: the pure placement and shedding decisions (core/capacity.py)."""

from __future__ import annotations

from treadle.core.capacity import Admit, Limits, Peers, Refuse, SessionLoad, place, shed, start_turn


def s(sid: str, tenant: str, last: float, busy: bool = False) -> SessionLoad:
    return SessionLoad(session_id=sid, tenant=tenant, busy=busy, last_active=last)


NONE = Peers()
FULL = [s("a1", "a", 10), s("a2", "a", 5), s("a3", "a", 7, busy=True), s("b1", "b", 1)]


def test_L9_3_a_host_with_room_admits_without_releasing_anything():
    assert place(FULL[:2], 0, "c", NONE, Limits(capacity=3), now=100) == Admit()


def test_L9_3_placements_in_progress_count_against_capacity():
    assert place(FULL[:2], 1, "c", NONE, Limits(capacity=3), now=100) == Admit(release=("a2",))


def test_L9_3_a_full_host_releases_the_least_recently_used_idle_session_of_the_busiest_tenant():
    # b's session is older, but a holds more sessions: a's oldest idle one goes.
    assert place(FULL, 0, "c", NONE, Limits(capacity=4), now=100) == Admit(release=("a2",))


def test_L9_3_the_busiest_tenant_is_counted_across_hosts():
    assert shed(FULL, {"b": 5}, Limits(capacity=4), now=100) == "b1"


def test_L9_3_busy_sessions_are_never_released_and_a_host_of_busy_sessions_refuses_with_capacity():
    busy = [s("a1", "a", 1, busy=True), s("b1", "b", 2, busy=True)]
    refused = place(busy, 0, "c", NONE, Limits(capacity=2), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "capacity"


def test_L9_3_a_session_used_within_the_grace_time_is_not_released():
    fresh = [s("a1", "a", 99.5), s("b1", "b", 90)]
    assert shed(fresh, {}, Limits(capacity=2, grace=2), now=100) == "b1"
    assert shed(fresh[:1], {}, Limits(capacity=1, grace=2), now=100) is None


def test_L9_3_a_tenant_at_its_session_limit_releases_its_own_idle_session_even_on_a_host_with_room():
    assert place(FULL, 0, "a", NONE, Limits(capacity=10, tenant_sessions=3), now=100) == Admit(release=("a2",))


def test_L9_3_a_tenant_at_its_session_limit_with_none_idle_here_waits_under_tenant_quota():
    busy_b = FULL[:3] + [s("b1", "b", 1, busy=True)]
    refused = place(busy_b, 0, "b", Peers(sessions={"b": 1}), Limits(capacity=10, tenant_sessions=2), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "tenant_quota"
    busy = [s("a1", "a", 1, busy=True)]
    refused = place(busy, 0, "a", NONE, Limits(capacity=10, tenant_sessions=1), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "tenant_quota"


def test_L9_3_a_tenant_under_its_session_limit_is_admitted_and_others_pay_for_room_first():
    assert place(FULL, 0, "b", NONE, Limits(capacity=4, tenant_sessions=2), now=100) == Admit(release=("a2",))


def test_L9_3_turns_of_a_tenant_beyond_its_concurrent_run_limit_wait_under_tenant_quota():
    assert start_turn(1, 0, "a", Limits(capacity=1, tenant_runs=2)) is None
    refused = start_turn(1, 1, "a", Limits(capacity=1, tenant_runs=2))
    assert isinstance(refused, Refuse) and refused.reason == "tenant_quota"
    assert start_turn(50, 50, "a", Limits(capacity=1)) is None  # 0: no limit


def test_L9_3_a_refusal_says_when_an_idle_session_passes_its_grace_time():
    fresh = [s("a1", "a", 99.5), s("a2", "a", 99.0), s("b1", "b", 50, busy=True)]
    refused = place(fresh, 0, "c", NONE, Limits(capacity=3, grace=2), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "capacity" and refused.retry_after == 1.0
    all_busy = place(fresh[2:], 0, "c", NONE, Limits(capacity=1, grace=2), now=100)
    assert isinstance(all_busy, Refuse) and all_busy.retry_after is None


def test_L9_3_a_tenant_at_its_run_limit_gets_no_session_and_nothing_is_released_for_it():
    refused = place(FULL, 0, "a", Peers(busy={"a": 1}), Limits(capacity=4, tenant_runs=2), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "tenant_quota"
    assert place(FULL, 0, "b", Peers(busy={"a": 1}), Limits(capacity=4, tenant_runs=2), now=100) == Admit(
        release=("a2",)
    )


def test_L9_3_a_full_host_without_idle_sessions_says_to_ask_again_soon_when_another_host_has_some():
    busy = [s("a1", "a", 1, busy=True)]
    refused = place(busy, 0, "c", Peers(idle=2), Limits(capacity=1), now=100)
    assert isinstance(refused, Refuse) and refused.reason == "capacity" and refused.retry_after == 0.2
    stale = place(busy, 0, "c", Peers(hosts=1, staleness=2.0), Limits(capacity=1), now=100)
    assert isinstance(stale, Refuse) and stale.retry_after == 2.0  # its last heartbeat may predate an idle session


def test_L9_3_freed_room_goes_first_to_a_waiting_tenant_holding_fewer_sessions():
    host = [s("a1", "a", 1, busy=True), s("a2", "a", 2, busy=True)]  # one slot free of three
    refused = place(host, 0, "a", NONE, Limits(capacity=3), now=100, waiting=["b"])
    assert isinstance(refused, Refuse) and refused.reason == "capacity" and refused.retry_after == 2.0
    assert place(host, 0, "b", NONE, Limits(capacity=3), now=100, waiting=["a", "b"]) == Admit()
    # Enough room for every lighter waiter, or no lighter one: first come, first served.
    assert place(host, 0, "a", NONE, Limits(capacity=4), now=100, waiting=["b"]) == Admit()
    assert place(host, 0, "a", Peers(sessions={"b": 5}), Limits(capacity=3), now=100, waiting=["b"]) == Admit()


def test_L9_3_a_tenant_at_its_session_limit_with_idle_sessions_only_elsewhere_is_told_to_ask_again_soon():
    busy = [s("a1", "a", 1, busy=True)]
    refused = place(
        busy, 0, "a", Peers(sessions={"a": 2}, busy={"a": 1}), Limits(capacity=10, tenant_sessions=3), now=100
    )
    assert isinstance(refused, Refuse) and refused.reason == "tenant_quota" and refused.retry_after == 0.2
    none_idle = place(
        busy, 0, "a", Peers(sessions={"a": 2}, busy={"a": 2}), Limits(capacity=10, tenant_sessions=3), now=100
    )
    assert isinstance(none_idle, Refuse) and none_idle.retry_after is None
