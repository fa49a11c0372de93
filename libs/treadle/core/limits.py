"""The size checks of a command built in code (the gateway's, the coordinator's own): the constraints of its
field types (``treadle.api.limits``, where every limit is declared) checked as if it had been decoded, then the
two budgets no one field's constraint says. The gateway checks before anything is sent on the broker, the
deciders again."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.api.constraints import violation
from treadle.api.limits import (
    MAX_ANSWER_CHARS,
    MAX_ANSWERS,
    MAX_MODEL_CHARS,
    MAX_NAME_CHARS,
    MAX_QUEUE_ORDER,
    MAX_ROLE_CHARS,
    MAX_SCRIPT_BYTES,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    MAX_TURN_REF_CHARS,
    MAX_WORKSPACE_CHARS,
    WORST_JSON_BYTES_PER_CHAR,
)
from treadle.core.errors import BadRequest, check

__all__ = [  # the constants, for the core's and the tests' use
    "MAX_ANSWER_CHARS",
    "MAX_ANSWERS",
    "MAX_MODEL_CHARS",
    "MAX_NAME_CHARS",
    "MAX_QUEUE_ORDER",
    "MAX_ROLE_CHARS",
    "MAX_SCRIPT_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_TURN_REF_CHARS",
    "MAX_WORKSPACE_CHARS",
    "WORST_JSON_BYTES_PER_CHAR",
    "check_answers",
    "check_script",
    "check_sizes",
]


def check_script(script: dict[str, Any] | None, limit: int = MAX_SCRIPT_BYTES) -> None:
    """A script is measured as JSON bytes, which no msgspec constraint says."""
    if script is not None and (size := len(msgspec.json.encode(script))) > limit:
        raise BadRequest(
            f"script is at most {limit} bytes as JSON",
            code="script_too_large",
            details={"field": "script", "limit": limit, "size": size},
        )


def check_answers(answers: dict[str, str] | None, message: str | None) -> None:
    """A response's answers and message share one budget of characters, which no one field's constraint says."""
    size = sum(len(k) + len(v) for k, v in (answers or {}).items()) + len(message or "")
    check(
        size <= MAX_ANSWER_CHARS,
        BadRequest,
        f"answers and message are at most {MAX_ANSWER_CHARS} characters",
        code="invalid_response",
        details={"field": "answers", "limit": MAX_ANSWER_CHARS},
    )


def check_sizes(body: msgspec.Struct) -> None:
    """Raise BadRequest naming the first field over its limit: the constraints of the body's field types,
    checked on a command built in code as on one decoded, then the two budgets no constraint says. The shape of
    each value is the deciders' job."""
    try:
        msgspec.convert(msgspec.to_builtins(body), type(body))
    except msgspec.ValidationError as exc:
        found = violation(exc, type(body))
        raise (
            BadRequest(found.message, code=found.code, details=found.details) if found else BadRequest(str(exc))
        ) from None
    check_script(getattr(body, "script", None))
    if hasattr(body, "answers"):
        check_answers(body.answers, getattr(body, "message", None))
