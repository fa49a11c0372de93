"""Issue 21, part 3: the pure decisions a delegation will be made of (modes only narrow, tenant bounds, one
child per retried request, the result summary)."""

from __future__ import annotations

import pytest

from treadle.core.delegation import DelegationBounds, check_bounds, narrowed_mode, result_summary, task_key
from treadle.core.errors import BadRequest, Forbidden, QuotaExceeded


def test_a_childs_runtime_mode_may_only_narrow_its_parents():
    assert narrowed_mode("auto_accept_edits", None) == "auto_accept_edits"
    assert narrowed_mode("auto_accept_edits", "approval_required") == "approval_required"
    assert narrowed_mode("full_access", "full_access") == "full_access"
    with pytest.raises(Forbidden) as escalated:
        narrowed_mode("approval_required", "full_access")
    assert escalated.value.code == "mode_not_allowed"
    assert escalated.value.details == {"parent_mode": "approval_required", "runtime_mode": "full_access"}
    with pytest.raises(BadRequest):
        narrowed_mode("approval_required", "root")


def test_delegations_are_bounded_in_depth_children_per_run_and_running_children():
    bounds = DelegationBounds(max_depth=2, max_children_per_run=3, max_running_children=4)
    check_bounds(bounds, depth=2, children_of_run=2, running_children=3)
    for kw, quota in (
        ({"depth": 3, "children_of_run": 0, "running_children": 0}, "delegation_depth"),
        ({"depth": 1, "children_of_run": 3, "running_children": 0}, "children_per_run"),
        ({"depth": 1, "children_of_run": 0, "running_children": 4}, "running_children"),
    ):
        with pytest.raises(QuotaExceeded) as refused:
            check_bounds(bounds, **kw)
        assert refused.value.details["quota"] == quota


def test_a_retried_request_names_the_same_child_and_another_run_or_tenant_another():
    key = task_key("t1", "run_a", "req-1")
    assert key == task_key("t1", "run_a", "req-1")
    assert len({key, task_key("t1", "run_b", "req-1"), task_key("t2", "run_a", "req-1")}) == 3


def test_the_result_summary_is_the_last_assistant_text_else_the_status():
    assert result_summary(["first", "the answer  ", " "], "completed") == "the answer"
    assert result_summary([], "failed") == "the delegated task ended failed"
    assert len(result_summary(["x" * 10_000], "completed")) == 4000
