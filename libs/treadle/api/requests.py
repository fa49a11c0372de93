"""Answering a runtime request (L11): ``POST /v1/requests/{request_id}/respond``."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from treadle.api.constraints import coded
from treadle.api.limits import Answers, ResponseText

Decision = Annotated[Literal["accept", "accept_for_session", "decline", "cancel"], coded("invalid_response")]


class RespondBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    decision: Decision | None = None
    answers: Answers | None = None
    message: ResponseText | None = None  # with the answers, at most core.limits.MAX_ANSWER_CHARS
