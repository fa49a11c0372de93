"""Issue 16, items 3 and 4: tenant policy (runtime modes, roles) and the quotas the coordinator decides from
state. Pure: every check raises a typed domain error before a decision appends anything."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import command, new_thread, send
from treadle.core import policy, quotas
from treadle.core.errors import BadRequest, Forbidden, QuotaExceeded
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.core.plans.commands import ImplementPlan
from treadle.core.policy import TenantPolicy
from treadle.core.thread.commands import CreateThread, EditQueued, SendMessage

DEFAULT = TenantPolicy()
OPEN = TenantPolicy(allowed_modes=("approval_required", "auto_accept_edits", "full_access"))


def test_the_default_policy_allows_approval_and_auto_accept_but_not_full_access():
    for mode in ("approval_required", "auto_accept_edits"):
        policy.check_command(DEFAULT, new_thread(), command(CreateThread(runtime_mode=mode)))
    with pytest.raises(Forbidden) as refused:
        policy.check_command(DEFAULT, new_thread(), command(CreateThread(runtime_mode="full_access")))
    assert refused.value.code == "mode_not_allowed" and refused.value.status == 403
    assert refused.value.details == {
        "runtime_mode": "full_access",
        "allowed": ["approval_required", "auto_accept_edits"],
    }
    policy.check_command(OPEN, new_thread(), command(CreateThread(runtime_mode="full_access")))
    policy.check_command(
        DEFAULT, new_thread(), command(CreateThread(runtime_mode="god_mode"))
    )  # bad input: a 400 later


@pytest.mark.parametrize(
    "body",
    [
        SendMessage(text="go"),
        ForkThread(source=ForkSource(type="run", id="run_x")),
        ImplementPlan(plan_id="plan_x"),
    ],
    ids=["send", "fork", "plan-implement"],
)
def test_L6_L12_3_no_path_starts_work_in_a_mode_the_tenant_may_no_longer_use(body):
    """A full_access thread made while it was allowed takes no new work, fork or plan once an admin narrows it."""
    state = new_thread(runtime_mode="full_access")
    policy.check_command(OPEN, state, command(body, thread=state.thread.id))
    with pytest.raises(Forbidden) as refused:
        policy.check_command(DEFAULT, state, command(body, thread=state.thread.id))
    assert refused.value.code == "mode_not_allowed"


def test_a_retried_message_already_taken_is_not_refused_by_a_narrower_policy():
    state = new_thread(runtime_mode="full_access")
    sent = command(SendMessage(text="go"), thread=state.thread.id)
    from tests.unit.domain_helpers import run_command

    run_command(state, sent)
    policy.check_command(DEFAULT, state, sent)  # its original receipt is answered, nothing new starts


def test_roles_admin_may_everything_member_not_admin_operations_unknown_roles_nothing():
    policy.require_role("admin", "admin", "PUT /v1/policy")
    policy.require_role("member", "member", "threads")
    with pytest.raises(Forbidden) as refused:
        policy.require_role("member", "admin", "PUT /v1/policy")
    assert refused.value.details == {"role": "member", "needed": "admin"}
    with pytest.raises(Forbidden):
        policy.require_role("root", "member", "threads")


def test_a_policy_names_each_mode_once_and_bounds_its_quotas():
    with pytest.raises(BadRequest):
        policy.validated(TenantPolicy(allowed_modes=("full_access", "full_access")))
    for bad in (dict(max_threads=0), dict(max_queued_runs=-1), dict(max_threads=policy.MAX_QUOTA + 1)):
        with pytest.raises(BadRequest) as refused:
            policy.validated(TenantPolicy(**bad))
        assert refused.value.code == "invalid_policy"


def test_L3_6_a_send_past_the_queue_limit_is_refused_with_the_quota_its_limit_and_the_count():
    limits = quotas.Quotas(max_queued_runs=2)
    state = new_thread()
    script = {"steps": [{"type": "hang"}]}
    send(state, "active", script=script)
    for i in range(2):
        quotas.check_command(
            limits, state, command(SendMessage(text=f"q{i}", mode="queue_after_active"), thread=state.thread.id)
        )
        send(state, f"q{i}", mode="queue_after_active")
    assert len(state.queue) == 2
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_command(
            limits, state, command(SendMessage(text="one too many", mode="queue_after_active"), thread=state.thread.id)
        )
    assert refused.value.status == 429 and refused.value.code == "quota_exceeded"
    assert refused.value.details == {"quota": "queued_runs_per_thread", "limit": 2, "current": 2}
    with pytest.raises(QuotaExceeded):
        quotas.check_command(limits, state, command(ImplementPlan(plan_id="plan_x"), thread=state.thread.id))
    # a steer joins the active run instead of queueing: the queue's limit does not apply to it
    quotas.check_command(limits, state, command(SendMessage(text="steer", mode="steer_active"), thread=state.thread.id))


def test_a_thread_stored_text_is_bounded_for_sends_and_queue_edits():
    limits = quotas.Quotas(max_thread_text_bytes=1000)
    state = new_thread()
    send(state, "x" * 600)
    assert quotas.stored_text_bytes(state) == 600
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_command(limits, state, command(SendMessage(text="y" * 401), thread=state.thread.id))
    assert refused.value.details == {"quota": "thread_text_bytes", "limit": 1000, "current": 600}
    quotas.check_command(limits, state, command(SendMessage(text="y" * 400), thread=state.thread.id))
    with pytest.raises(QuotaExceeded):
        quotas.check_command(limits, state, command(EditQueued(run_id="run_x", text="z" * 500), thread=state.thread.id))


def test_threads_per_tenant_is_refused_at_the_limit():
    quotas.check_thread_count(quotas.Quotas(max_threads=3), 2)
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_thread_count(quotas.Quotas(max_threads=3), 3)
    assert refused.value.details == {"quota": "threads_per_tenant", "limit": 3, "current": 3}
