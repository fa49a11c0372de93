"""Thread commands: ``decide(state, command, ctx) -> (events, receipt)`` for the thread coordinator."""

from __future__ import annotations

import posixpath
from typing import get_args

import msgspec

from . import events as ev
from . import rollback
from .commands import MAX_SCRIPT_BYTES, MAX_TEXT_CHARS, MAX_TITLE_CHARS, Accepted, Command, CreateThread, Ctx, SendMessage
from .entities import DispatchMode, RuntimeMode
from .errors import BadRequest, Conflict, NotFound, Unprocessable, check
from .ids import TOKEN
from .script import parse_script
from .thread import ThreadState

PROVIDERS = ("scripted", "codex", "claude")
MODES: tuple[str, ...] = get_args(DispatchMode)
RUNTIME_MODES: tuple[str, ...] = get_args(RuntimeMode)
# Modes whose behaviour lands with the run-lifecycle work (steering, restart, reject, rollback).
AVAILABLE_MODES = ("auto", "start_immediately", "queue_after_active")

Decision = tuple[list[ev.Payload], Accepted]


def decide(state: ThreadState, command: Command, ctx: Ctx) -> Decision:
    body = command.body
    if isinstance(body, CreateThread):
        return create_thread(state, command, body, ctx)
    if isinstance(body, SendMessage):
        return send_message(state, command, body, ctx)
    if isinstance(body, rollback.ROLLBACK_COMMANDS):
        return rollback.decide(state, command, ctx)
    raise BadRequest(f"unknown command {type(body).__name__}")


def normalise_workspace(path: str) -> str:
    """A workspace is a relative path under the tenant's workspace root; it never climbs out of it."""
    check(0 < len(path) <= 255, BadRequest, "workspace must be 1..255 characters", code="invalid_workspace")
    check(not path.startswith(("/", "\\")), BadRequest, "workspace must be relative", code="invalid_workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    check(bool(parts), BadRequest, "workspace must name a directory", code="invalid_workspace")
    for part in parts:
        check(part != ".." and TOKEN.fullmatch(part.replace(".", "_")) is not None, BadRequest,
              f"workspace segment {part!r} is not allowed (letters, digits, '.', '_', '-')", code="invalid_workspace")
    return posixpath.join(*parts)


def create_thread(state: ThreadState, command: Command, body: CreateThread, ctx: Ctx) -> Decision:
    """L1.1: a thread and nothing else; the provider session and thread wait for the first run (L1.2)."""
    thread_id = body.thread_id or command.thread
    check(thread_id is not None, BadRequest, "thread id missing")
    if state.thread is not None:
        if state.thread.command_id == command.id:
            return [], Accepted(seq=state.seq, thread_id=thread_id, duplicate=True)
        raise Conflict(f"thread {thread_id} already exists", code="thread_exists")
    check(len(body.title) <= MAX_TITLE_CHARS, BadRequest, f"title is at most {MAX_TITLE_CHARS} characters", code="invalid_title")
    check(body.provider in PROVIDERS, BadRequest, f"provider must be one of {', '.join(PROVIDERS)}", code="invalid_provider")
    check(body.runtime_mode in RUNTIME_MODES, BadRequest, f"runtime_mode must be one of {', '.join(RUNTIME_MODES)}",
          code="invalid_runtime_mode")
    workspace = normalise_workspace(body.workspace or f"threads/{thread_id}")
    created = ev.ThreadCreated(
        thread_id=thread_id,
        title=body.title,
        provider=body.provider,
        model=body.model,
        runtime_mode=body.runtime_mode,
        workspace=workspace,
        created_by=command.user,
    )
    return [created], Accepted(seq=0, thread_id=thread_id)


def send_message(state: ThreadState, command: Command, body: SendMessage, ctx: Ctx) -> Decision:
    """L2.1 and L3.1: a user message, its run (queued, ordinal N) with root node and first attempt,
    dispatched at once when nothing is active, else queued behind the active run (L3.6)."""
    thread = state.thread
    if thread is None:
        raise NotFound(f"thread {command.thread} not found", code="thread_not_found")
    previous = state.message_for_command(command.id)
    if previous is not None:
        run = state.run(previous.run_id or "")
        return [], Accepted(
            seq=state.seq,
            thread_id=thread.id,
            message_id=previous.id,
            run_id=previous.run_id,
            disposition=run.disposition if run else None,
            duplicate=True,
        )
    check(bool(body.text.strip()), BadRequest, "text must not be empty", code="empty_text")
    check(len(body.text) <= MAX_TEXT_CHARS, BadRequest, f"text is at most {MAX_TEXT_CHARS} characters", code="text_too_long")
    check(body.mode in MODES, BadRequest, f"mode must be one of {', '.join(MODES)}", code="invalid_mode")
    check(body.mode in AVAILABLE_MODES, Unprocessable, f"mode {body.mode} is not available yet", code="mode_unavailable")
    check(body.target_run_id is None, BadRequest, f"target_run_id is not used by mode {body.mode}", code="invalid_target")
    provider = body.provider or thread.provider
    check(provider in PROVIDERS, BadRequest, f"provider must be one of {', '.join(PROVIDERS)}", code="invalid_provider")
    if body.script is not None:
        check(provider == "scripted", BadRequest, "a script needs the scripted provider", code="invalid_script")
        check(len(msgspec.json.encode(body.script)) <= MAX_SCRIPT_BYTES, BadRequest,
              f"script is at most {MAX_SCRIPT_BYTES} bytes", code="invalid_script")
        try:
            parse_script(body.script)
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_script") from None

    busy = state.active_run_id is not None or bool(state.queue) or rollback.pending(state) is not None
    if busy and body.mode == "start_immediately":
        raise Conflict("a run is active; start_immediately cannot preempt it yet", code="run_active",
                       details={"active_run_id": state.active_run_id})

    disposition = "queued" if busy else "started"
    message_id, run_id = ctx.ids.next("msg"), ctx.ids.next("run")
    root_node_id, attempt_id = ctx.ids.next("node"), ctx.ids.next("att")
    queued = ev.RunQueued(
        run_id=run_id,
        ordinal=len(state.runs) + 1,
        message_id=message_id,
        text=body.text,
        author=command.user,
        root_node_id=root_node_id,
        attempt_id=attempt_id,
        mode=body.mode,
        disposition=disposition,
        dispatched=not busy,
        provider=provider,
        model=thread.model,
        script=body.script,
    )
    return [queued], Accepted(seq=0, thread_id=thread.id, message_id=message_id, run_id=run_id, disposition=disposition)


def dispatch_next(state: ThreadState) -> list[ev.Payload]:
    """L3.6: when nothing is active, the head of the queue starts."""
    if state.thread is None or state.active_run_id is not None or not state.queue or rollback.pending(state):
        return []
    return [ev.RunDispatched(run_id=state.queue[0])]
