"""Tenant policy over HTTP, for admins only: which runtime modes the tenant's threads may use and its own
quotas. The coordinator enforces it on every command; the gateway checks a new thread's mode early."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, put
from litestar.params import JSONBody

from treadle.core.errors import DomainError
from treadle.core.policy import DEFAULT_MODES, TenantPolicy, require_role
from treadle.core.thread.model import RuntimeMode
from treadle.ops.tokens import Principal

from .deps import HttpRequest, Who, app_state
from .errors import ApiError
from .openapi import BODY, errors


class PolicyBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    allowed_modes: Annotated[list[RuntimeMode], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(DEFAULT_MODES)
    )
    max_threads: int | None = None
    max_queued_runs: int | None = None
    max_delegation_depth: int | None = None
    max_children_per_run: int | None = None
    max_running_children: int | None = None
    cascade_interrupts: bool | None = None
    max_disk_bytes: int | None = None  # the tenant's workspaces and runtime homes (issue 36)
    max_disk_files: int | None = None
    max_schedules: int | None = None  # docs/schedules.md


def as_api_error(exc: DomainError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, exc.details)


def admin(request: HttpRequest, who: Who) -> Principal:
    try:
        require_role(who.role, "admin", f"{request.method} {request.url.path}")
    except DomainError as exc:
        raise as_api_error(exc) from None
    return who


@get(
    "/v1/policy",
    summary="The tenant's policy: allowed runtime modes and quotas (admin)",
    tags=["policy"],
    responses=errors(),
)
async def get_policy(request: HttpRequest, who: Who) -> TenantPolicy:
    admin(request, who)
    policy: TenantPolicy = await app_state(request).policies.get(who.tenant)
    return policy


@put(
    "/v1/policy",
    summary="Replace the tenant's policy (admin); audited as policy.updated",
    tags=["policy"],
    responses=errors(BODY, {400: ("invalid_policy",)}),
)
async def put_policy(request: HttpRequest, who: Who, data: JSONBody[PolicyBody]) -> TenantPolicy:
    admin(request, who)
    fields = msgspec.structs.asdict(data)
    wanted = TenantPolicy(**{**fields, "allowed_modes": tuple(data.allowed_modes)})
    try:
        stored: TenantPolicy = await app_state(request).policies.put(who.tenant, wanted, actor=f"user:{who.user}")
        return stored
    except DomainError as exc:
        raise as_api_error(exc) from None


ROUTES = [get_policy, put_policy]
