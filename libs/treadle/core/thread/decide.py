"""Decisions on the thread itself: creating it, sending a message (a run, queued, dispatched or steering the
active one, by dispatch mode) and dispatching the head of the queue."""

from __future__ import annotations

import posixpath
from typing import get_args

from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx
from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound, Unprocessable, check
from treadle.core.ids import TOKEN
from treadle.core.limits import MAX_TEXT_CHARS
from treadle.core.providers.catalogue import Catalogue
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.rollback import decide as rollback
from treadle.core.run.events import InterruptRequested, RunDispatched, RunQueued, RunSteered
from treadle.core.run.model import Run
from treadle.core.run.steering import undelivered_steers
from treadle.core.thread import manage
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.core.thread.events import ThreadCreated
from treadle.core.thread.model import DispatchMode, RuntimeMode
from treadle.core.view import ThreadView

MODES: tuple[str, ...] = get_args(DispatchMode)
RUNTIME_MODES: tuple[str, ...] = get_args(RuntimeMode)

Decision = tuple[list[Payload], Accepted]
DEFAULT_VOLUME = "local"  # the one volume of a deployment that places nothing (and of threads made before homes)


def check_provider(providers: Catalogue, name: str) -> None:
    check(providers.known(name), BadRequest, f"provider must be one of {providers.choices}", code="invalid_provider")


def normalise_workspace(path: str) -> str:
    """A workspace is a relative path under the tenant's workspace root; it never climbs out of it."""
    check(0 < len(path) <= 255, BadRequest, "workspace must be 1..255 characters", code="invalid_workspace")
    check(not path.startswith(("/", "\\")), BadRequest, "workspace must be relative", code="invalid_workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    check(bool(parts), BadRequest, "workspace must name a directory", code="invalid_workspace")
    for part in parts:
        check(
            part != ".." and TOKEN.fullmatch(part.replace(".", "_")) is not None,
            BadRequest,
            f"workspace segment {part!r} is not allowed (letters, digits, '.', '_', '-')",
            code="invalid_workspace",
        )
    return posixpath.join(*parts)


def create_thread(state: ThreadView, command: Command, body: CreateThread, ctx: Ctx) -> Decision:
    """L1.1: a thread and nothing else; the provider session and thread wait for the first run (L1.2)."""
    thread_id = body.thread_id or command.thread
    if thread_id is None:
        raise BadRequest("thread id missing")
    if state.thread is not None:
        if state.thread.command_id == command.id:
            return [], Accepted(seq=state.seq, thread_id=thread_id, duplicate=True)
        raise Conflict(f"thread {thread_id} already exists", code="thread_exists")
    check_provider(ctx.providers, body.provider)
    check(
        body.runtime_mode in RUNTIME_MODES,
        BadRequest,
        f"runtime_mode must be one of {', '.join(RUNTIME_MODES)}",
        code="invalid_runtime_mode",
    )
    workspace = normalise_workspace(body.workspace or f"threads/{thread_id}")
    created = ThreadCreated(
        thread_id=thread_id,
        title=body.title,
        provider=body.provider,
        model=body.model,
        runtime_mode=body.runtime_mode,
        workspace=workspace,
        created_by=command.user,
        volume=ctx.home or DEFAULT_VOLUME,
    )
    return [created], Accepted(seq=0, thread_id=thread_id)


def send_message(state: ThreadView, command: Command, body: SendMessage, ctx: Ctx) -> Decision:
    """L2.1 and L3.1: a user message, its run (queued, ordinal N) with root node and first attempt,
    dispatched at once when nothing is active, else queued behind the active run (L3.6)."""
    thread = state.thread
    if thread is None:
        raise NotFound(f"thread {command.thread} not found", code="thread_not_found")
    previous = state.message_for_command(command.id)
    if previous is None:
        manage.check_open(thread)
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
    check(body.mode in MODES, BadRequest, f"mode must be one of {', '.join(MODES)}", code="invalid_mode")
    provider = body.provider or thread.provider
    check_provider(ctx.providers, provider)
    check(body.model is None or len(body.model) > 0, BadRequest, "model must not be empty", code="invalid_model")
    if body.script is not None:
        try:
            ctx.providers.check_turn_options(provider, body.script)
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_script") from None

    active = state.active_run
    busy = active is not None or bool(state.queue) or rollback.pending(state) is not None
    target = body.target_run_id
    if target is not None:
        check(
            body.mode in ("steer_active", "restart_active"),
            BadRequest,
            f"target_run_id is not used by mode {body.mode}",
            code="invalid_target",
        )
        check(state.run(target) is not None, NotFound, f"run {target} not found", code="run_not_found")
    if busy and body.mode == "reject":
        raise Conflict(
            "a run is active or queued on this thread",
            code="run_active",
            details={"active_run_id": state.active_run_id, "queued": len(state.queue)},
        )
    ids = ctx.ids
    steerable = active is not None and provider == active.provider and rollback.pending(state) is None
    if steerable and body.mode in ("auto", "steer_active", "restart_active"):
        if active is not None and (target is None or target == active.id):
            steering = _steering(state, active, body.mode, ctx.providers)
            if steering is not None and _steers_overflow(state, active, body):
                if body.mode != "auto":
                    raise Conflict(
                        f"the steers this run has not taken yet would exceed {MAX_TEXT_CHARS} characters together;"
                        " wait for the run to take them, or queue this message",
                        code="steers_pending",
                        details={"active_run_id": active.id, "limit": MAX_TEXT_CHARS},
                    )
                steering = None  # auto: the message is queued behind the run instead
            if steering is not None:
                message_id = ids.next("msg")
                steered = RunSteered(
                    run_id=active.id,
                    message_id=message_id,
                    text=body.text,
                    author=command.user,
                    steering=steering,
                    script=body.script,
                )
                disposition = "steered" if steering == "native" else "restarting"
                return [steered], Accepted(
                    seq=0, thread_id=thread.id, message_id=message_id, run_id=active.id, disposition=disposition
                )
    if body.mode in ("steer_active", "restart_active") and active is not None:
        check(
            rollback.pending(state) is None,
            Conflict,
            "the active run is being rolled back; send without a steer mode to queue behind the rollback",
            code="rollback_in_progress",
        )
        if provider != active.provider:
            raise Unprocessable(
                "a steer goes to the active run's provider; switch providers with a new run",
                code="steering_unavailable",
            )
        if target is None or target == active.id:
            raise Conflict(
                "the active run's provider can neither steer nor interrupt a turn; queue instead",
                code="steering_unavailable",
                details={"active_run_id": active.id},
            )

    events: list[Payload] = []
    if body.mode == "rollback_active" and active is not None:
        events += rollback.roll_back_active(state, command.user, ctx)
    preempting = body.mode in ("start_immediately", "rollback_active") and busy
    if preempting and active is not None and body.mode == "start_immediately":
        caps = capabilities_for(state, active, ctx.providers)
        if caps is not None and not caps.interrupt:
            raise Conflict(
                "the active run cannot be interrupted to start this one",
                code="run_active",
                details={"active_run_id": active.id},
            )
        if active.attempt.interrupt is None:
            events.append(
                InterruptRequested(run_id=active.id, attempt_id=active.attempt.id, reason="preempted", by=command.user)
            )
    disposition = (
        ("rolling_back" if events else "queued")
        if body.mode == "rollback_active" and busy
        else "preempting"
        if preempting
        else "queued"
        if busy
        else "started"
    )
    message_id, run_id = ids.next("msg"), ids.next("run")
    root_node_id, attempt_id = ids.next("node"), ids.next("att")
    queued = RunQueued(
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
        front=preempting,
        provider=provider,
        model=body.model or thread.model,
        script=body.script,
        supersedes_run_id=target if target is not None and (active is None or target != active.id) else None,
    )
    events.append(queued)  # after a rollback's start: the new run is not among the runs it rolls back
    return events, Accepted(seq=0, thread_id=thread.id, message_id=message_id, run_id=run_id, disposition=disposition)


def capabilities_for(state: ThreadView, run: Run, providers: Catalogue) -> ProviderCapabilities | None:
    """What the provider running ``run`` can do: its live session's declaration, or the capability profile its
    script asks for before a session exists. None: not known yet."""
    session = state.live_session
    if session is not None and session.provider == run.provider and session.capabilities is not None:
        return session.capabilities
    return providers.script_capabilities(run.provider, run.script)


def _steers_overflow(state: ThreadView, run: Run, body: SendMessage) -> bool:
    """Steers a run ended before taking become one message, the run that supersedes it (L3.4): together
    they must be no longer than one message may be, or that run could never be stored."""
    pending = sum(len(m.text) for m in undelivered_steers(state, run))
    return pending + len(body.text) > MAX_TEXT_CHARS


def _steering(state: ThreadView, run: Run, mode: str, providers: Catalogue) -> str | None:
    """L3.2/L3.3: how a message steers ``run``: natively, by interrupt and restart, or not at all (None).
    With capabilities not known yet, ``auto`` and ``steer_active`` prefer native steering and the supervisor
    falls back at delivery time; a provider that can do neither gets the steer as a superseding run."""
    caps = capabilities_for(state, run, providers)
    if mode == "restart_active":
        return "restart" if caps is None or caps.interrupt else None
    if caps is None or caps.active_steering:
        return "native"
    return "restart" if caps.interrupt else None


def dispatch_next(state: ThreadView) -> list[Payload]:
    """L3.6: when nothing is active, the head of the queue starts."""
    if state.thread is None or state.active_run_id is not None or not state.queue or rollback.pending(state):
        return []
    return [RunDispatched(run_id=state.queue[0])]
