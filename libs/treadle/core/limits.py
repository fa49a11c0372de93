"""The size checks of a command built in code (the gateway's, the coordinator's own): the constraints of its
field types (``treadle.api.limits``, where every limit is declared) checked as if it had been decoded, then the
two budgets no one field's constraint says. The gateway checks before anything is sent on the broker, the
deciders again."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.api.constraints import violation
from treadle.api.limits import (
    MAX_ANSWER_CHARS as MAX_ANSWER_CHARS,
)
from treadle.api.limits import (
    MAX_ANSWERS as MAX_ANSWERS,
)
from treadle.api.limits import (
    MAX_MODEL_CHARS as MAX_MODEL_CHARS,
)
from treadle.api.limits import (
    MAX_NAME_CHARS as MAX_NAME_CHARS,
)
from treadle.api.limits import (
    MAX_QUEUE_ORDER as MAX_QUEUE_ORDER,
)
from treadle.api.limits import (
    MAX_ROLE_CHARS as MAX_ROLE_CHARS,
)
from treadle.api.limits import (
    MAX_SCRIPT_BYTES as MAX_SCRIPT_BYTES,
)
from treadle.api.limits import (
    MAX_TEXT_CHARS as MAX_TEXT_CHARS,
)
from treadle.api.limits import (
    MAX_TITLE_CHARS as MAX_TITLE_CHARS,
)
from treadle.api.limits import (
    MAX_TURN_REF_CHARS as MAX_TURN_REF_CHARS,
)
from treadle.api.limits import (
    MAX_WORKSPACE_CHARS as MAX_WORKSPACE_CHARS,
)
from treadle.api.limits import (
    WORST_JSON_BYTES_PER_CHAR as WORST_JSON_BYTES_PER_CHAR,
)
from treadle.api.limits import (
    Answers as Answers,
)
from treadle.api.limits import (
    Id as Id,
)
from treadle.api.limits import (
    Model as Model,
)
from treadle.api.limits import (
    ModeName as ModeName,
)
from treadle.api.limits import (
    Name as Name,
)
from treadle.api.limits import (
    Provider as Provider,
)
from treadle.api.limits import (
    QueueOrder as QueueOrder,
)
from treadle.api.limits import (
    ResponseName as ResponseName,
)
from treadle.api.limits import (
    ResponseText as ResponseText,
)
from treadle.api.limits import (
    Role as Role,
)
from treadle.api.limits import (
    RuntimeModeName as RuntimeModeName,
)
from treadle.api.limits import (
    Task as Task,
)
from treadle.api.limits import (
    Text as Text,
)
from treadle.api.limits import (
    Title as Title,
)
from treadle.api.limits import (
    TurnRef as TurnRef,
)
from treadle.api.limits import (
    Workspace as Workspace,
)
from treadle.core.errors import BadRequest, check


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
