"""The limits of every field of the contract, declared once as the fields' types: a msgspec constraint with the
code a value over it is refused with (``constraints``). The API's bodies and the core's commands are built from
these types, so msgspec checks them wherever either is decoded. They add up within one broker message: a
command, and each event made from it, is one NATS message (``max_payload``, 1 MiB by default), and JSON may
spend 6 bytes on one character (``\\u001f``). The largest command, a message with text and a script, is at most
6 * (100,000 + 200 + 3 * 64 + 64) + 256 KiB + envelope < 900 KB."""

from __future__ import annotations

from typing import Annotated

from treadle.api.constraints import limited

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
