"""The answer to a runtime request."""

from __future__ import annotations

import msgspec


class RespondRequest(msgspec.Struct, kw_only=True, tag="request.respond", forbid_unknown_fields=True):
    request_id: str
    decision: str | None = None  # accept | accept_for_session | decline | cancel (approvals)
    answers: dict[str, str] | None = None  # questions (L11.4)
    message: str | None = None
