"""The answer to a runtime request."""

from __future__ import annotations

import msgspec

from treadle.api.limits import Answers, Id, ResponseName, ResponseText


class RespondRequest(msgspec.Struct, kw_only=True, tag="request.respond", forbid_unknown_fields=True):
    request_id: Id
    decision: ResponseName | None = None  # accept | accept_for_session | decline | cancel (approvals)
    answers: Answers | None = None  # questions (L11.4)
    message: ResponseText | None = None
