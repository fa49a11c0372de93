"""Size limits of every command field, declared once as the types of the fields (``core.constraints``): the
API's request bodies and the commands use these types, so msgspec checks them wherever either is decoded,
and ``check_sizes`` checks a command built in code the same way before it is sent or decided. They add up
within one broker message: a command, and each event made from it, is one NATS message (``max_payload``,
1 MiB by default), and JSON may spend 6 bytes on one character (``\\u001f``). The largest command, a message
with text and a script, is at most 6 * (100,000 + 200 + 3 * 64 + 64) + 256 KiB + envelope < 900 KB."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from treadle.core.constraints import limited, violation
from treadle.core.errors import BadRequest, check

MAX_TEXT_CHARS = 100_000  # a message, an edited queued message
MAX_ROLE_CHARS = 8_000  # a delegated task's role instruction, sent with its task as the child's first message
MAX_ANSWER_CHARS = 20_000  # a response's answers (keys and values) and message together
MAX_ANSWERS = 100
MAX_TITLE_CHARS = 200
MAX_MODEL_CHARS = 200
MAX_SCRIPT_BYTES = 256 * 1024  # as JSON
MAX_NAME_CHARS = 64  # provider, mode, runtime mode, decision, ids
MAX_WORKSPACE_CHARS = 255
MAX_TURN_REF_CHARS = 256
MAX_QUEUE_ORDER = 1_000
WORST_JSON_BYTES_PER_CHAR = 6

# --- the field types: a limit and the code a value over it is refused with ------------------------------
Text = Annotated[str, limited(MAX_TEXT_CHARS, "text_too_long")]
Task = Annotated[str, limited(MAX_TEXT_CHARS - MAX_ROLE_CHARS, "text_too_long")]
Role = Annotated[str, limited(MAX_ROLE_CHARS, "text_too_long")]
Title = Annotated[str, limited(MAX_TITLE_CHARS, "invalid_title")]
Model = Annotated[str, limited(MAX_MODEL_CHARS, "invalid_model")]
Provider = Annotated[str, limited(MAX_NAME_CHARS, "invalid_provider")]
RuntimeModeName = Annotated[str, limited(MAX_NAME_CHARS, "invalid_runtime_mode")]
ModeName = Annotated[str, limited(MAX_NAME_CHARS, "invalid_mode")]
Workspace = Annotated[str, limited(MAX_WORKSPACE_CHARS, "invalid_workspace")]
Id = Annotated[str, limited(MAX_NAME_CHARS, "invalid_id")]
TurnRef = Annotated[str, limited(MAX_TURN_REF_CHARS, "invalid_id")]
Name = Annotated[str, limited(MAX_NAME_CHARS, "invalid_request")]  # a delegated task's names
ResponseName = Annotated[str, limited(MAX_NAME_CHARS, "invalid_response")]
Answers = Annotated[dict[str, str], limited(MAX_ANSWERS, "invalid_response")]
ResponseText = Annotated[str, limited(MAX_ANSWER_CHARS, "invalid_response")]
QueueOrder = Annotated[list[Id], limited(MAX_QUEUE_ORDER, "invalid_order")]


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
        raise violation(exc, type(body)) or BadRequest(str(exc)) from None
    check_script(getattr(body, "script", None))
    if hasattr(body, "answers"):
        check_answers(body.answers, getattr(body, "message", None))
