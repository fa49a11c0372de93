"""Size limits of every command field, checked by the gateway before anything is sent on the broker and by
the deciders again. They add up within one broker message: a command, and each event made from it, is one
NATS message (``max_payload``, 1 MiB by default), and JSON may spend 6 bytes on one character
(``\\u001f``). The largest command, a message with text and a script, is at most
6 * (100,000 + 200 + 3 * 64 + 64) + 256 KiB + envelope < 900 KB."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.commands import Body
from treadle.core.errors import BadRequest, check
from treadle.core.lineage.commands import DelegateTask, ForkThread
from treadle.core.plans.commands import ImplementPlan
from treadle.core.requests.commands import RespondRequest
from treadle.core.rollback.commands import RollbackNode, RollbackThread
from treadle.core.run.commands import InterruptRun
from treadle.core.thread.commands import CancelQueued, CreateThread, EditQueued, ReorderQueue, SendMessage

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


# The two checks of every field of every command: their messages are made only for a value over its limit.
def _at_most(value: str | None, limit: int, field: str, code: str) -> None:
    if value is not None and len(value) > limit:
        raise BadRequest(f"{field} is at most {limit} characters", code=code, details={"field": field, "limit": limit})


def _script(script: dict[str, Any] | None) -> None:
    if script is not None and len(msgspec.json.encode(script)) > MAX_SCRIPT_BYTES:
        raise BadRequest(
            f"script is at most {MAX_SCRIPT_BYTES} bytes as JSON",
            code="script_too_large",
            details={"field": "script", "limit": MAX_SCRIPT_BYTES},
        )


def check_sizes(body: Body) -> None:
    """Raise BadRequest naming the first field over its limit; the shape of each value is the deciders' job."""
    if isinstance(body, CreateThread):
        _at_most(body.title, MAX_TITLE_CHARS, "title", "invalid_title")
        _at_most(body.provider, MAX_NAME_CHARS, "provider", "invalid_provider")
        _at_most(body.model, MAX_MODEL_CHARS, "model", "invalid_model")
        _at_most(body.runtime_mode, MAX_NAME_CHARS, "runtime_mode", "invalid_runtime_mode")
        _at_most(body.workspace, MAX_WORKSPACE_CHARS, "workspace", "invalid_workspace")
        _at_most(body.thread_id, MAX_NAME_CHARS, "thread_id", "invalid_id")
    elif isinstance(body, SendMessage):
        _at_most(body.text, MAX_TEXT_CHARS, "text", "text_too_long")
        _at_most(body.mode, MAX_NAME_CHARS, "mode", "invalid_mode")
        _at_most(body.provider, MAX_NAME_CHARS, "provider", "invalid_provider")
        _at_most(body.model, MAX_MODEL_CHARS, "model", "invalid_model")
        for field in ("target_run_id", "merge_back_from"):
            _at_most(getattr(body, field), MAX_NAME_CHARS, field, "invalid_id")
        _script(body.script)
    elif isinstance(body, DelegateTask):
        _at_most(body.task, MAX_TEXT_CHARS - MAX_ROLE_CHARS, "task", "text_too_long")
        _at_most(body.role, MAX_ROLE_CHARS, "role", "text_too_long")
        _at_most(body.title, MAX_TITLE_CHARS, "title", "invalid_title")
        _at_most(body.model, MAX_MODEL_CHARS, "model", "invalid_model")
        for field in ("parent_run_id", "provider", "runtime_mode", "interaction_mode"):
            _at_most(getattr(body, field), MAX_NAME_CHARS, field, "invalid_request")
        _script(body.script)
    elif isinstance(body, EditQueued):
        _at_most(body.text, MAX_TEXT_CHARS, "text", "text_too_long")
        _at_most(body.run_id, MAX_NAME_CHARS, "run_id", "invalid_id")
        _script(body.script)
    elif isinstance(body, RespondRequest):
        _at_most(body.request_id, MAX_NAME_CHARS, "request_id", "invalid_id")
        _at_most(body.decision, MAX_NAME_CHARS, "decision", "invalid_response")
        answers = body.answers or {}
        check(
            len(answers) <= MAX_ANSWERS,
            BadRequest,
            f"at most {MAX_ANSWERS} answers",
            code="invalid_response",
            details={"field": "answers", "limit": MAX_ANSWERS},
        )
        size = sum(len(k) + len(v) for k, v in answers.items()) + len(body.message or "")
        check(
            size <= MAX_ANSWER_CHARS,
            BadRequest,
            f"answers and message are at most {MAX_ANSWER_CHARS} characters",
            code="invalid_response",
            details={"field": "answers", "limit": MAX_ANSWER_CHARS},
        )
    elif isinstance(body, ReorderQueue):
        check(
            len(body.order) <= MAX_QUEUE_ORDER,
            BadRequest,
            f"order names at most {MAX_QUEUE_ORDER} runs",
            code="invalid_order",
            details={"field": "order", "limit": MAX_QUEUE_ORDER},
        )
        for run_id in body.order:
            _at_most(run_id, MAX_NAME_CHARS, "order", "invalid_id")
    elif isinstance(body, ForkThread):
        _at_most(body.title, MAX_TITLE_CHARS, "title", "invalid_title")
        _at_most(body.source.id, MAX_NAME_CHARS, "source.id", "invalid_id")
        _at_most(body.source.turn, MAX_TURN_REF_CHARS, "source.turn", "invalid_id")
        _at_most(body.thread_id, MAX_NAME_CHARS, "thread_id", "invalid_id")
    elif isinstance(body, InterruptRun):
        _at_most(body.run_id, MAX_NAME_CHARS, "run_id", "invalid_id")
        _at_most(body.node_id, MAX_NAME_CHARS, "node_id", "invalid_id")
    elif isinstance(body, (CancelQueued, ImplementPlan, RollbackNode)):
        for field in ("run_id", "plan_id", "as_", "thread_id", "node_id", "checkpoint_id"):
            _at_most(getattr(body, field, None), MAX_NAME_CHARS, field, "invalid_id")
    elif isinstance(body, RollbackThread):
        pass  # numbers only
