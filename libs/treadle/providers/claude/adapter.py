"""The Claude Code adapter: one ``ClaudeSDKClient`` (one CLI process) per provider session.

A provider thread is a Claude Code session; its native ref is the session id, which Treadle chooses
(``--session-id``) so it is known before the first turn. The CLI starts with the first turn, not at
placement, and ``claude_agent_sdk`` (seconds to import) is loaded then, off the event loop: placing a
session stays a quick answer to the supervisor (a slow one is retried, and would place it twice). Turns are prompts sent over the open client; one reader task
moves everything the CLI says into an inbox that the playing turn consumes, so the death of the
process is noticed even between turns.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treadle.core import provider_events as pe
from treadle.core.ids import is_token
from treadle.core.providers.model import ProviderCapabilities

from ...sandbox.host import Prepared, Sandbox
from .. import exits, native_state
from ..base import ProviderAdapter, Response, RuntimeLost, Turn, TurnSink, Unsupported
from ..mcp_access import egress_url, runtime_env
from ..protocol import PlaceSession
from .settings import PERMISSION_MODES, ClaudeSettings
from .store import PendingFork, PendingRewind, SessionStore

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeSDKClient

    from .approvals import Approvals
    from .translate import TurnTranslator

log = logging.getLogger(__name__)

CAPABILITIES = ProviderCapabilities(
    create_empty_thread=False,  # a Claude session exists on disk only once a turn was sent
    read_snapshot=False,
    rollback=True,  # resume at the end of an earlier turn (--resume-session-at) on the same session
    fork=True,
    native_turn_ids=False,  # Claude Code has no turn ids; Treadle mints the prompt's uuid as the turn ref
    interrupt=True,
    active_steering=False,  # a prompt sent mid-turn is queued by the CLI, not steered: Treadle interrupts and restarts
    terminal_status="strong",
    streaming=True,
    approvals=["command", "file_change", "file_read"],
    approvals_live_only=True,
    structured_questions=True,
    plan_updates=True,
    todo_list=True,
    proposed_plan=True,
    subagents=True,
    identity="weak",
)


_EXIT_CODE = re.compile(r"exit code:? (-?\d+)")


class ClaudeUnavailable(Exception):
    """The CLI could not be started or resumed."""


class _Ended:
    """Put in the inbox when the CLI's output ends: the process is gone (``returncode`` when the SDK said)."""

    def __init__(self, reason: str, returncode: int | None = None) -> None:
        self.reason = reason
        self.returncode = returncode


def _import_runtime() -> None:
    """The SDK pulls in mcp and pydantic models (about 3 s of imports on a busy 2-core machine). It is an extra
    of the distribution: a host installed without it fails the turn saying so."""
    try:
        importlib.import_module(f"{__package__}.approvals")  # and with it translate, claude_agent_sdk
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "claude_agent_sdk":
            raise
        raise ClaudeUnavailable(
            "the Claude runtime (claude-agent-sdk) is not installed on this provider host: "
            "`make providers` in a checkout, else pip install 'treadle[claude]'"
        ) from exc


def _valid_session_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValueError(f"{value!r} is not a Claude Code session id (a UUID)") from None


async def _prompt(text: str, prompt_uuid: str) -> AsyncIterator[dict[str, Any]]:
    # The uuid we give the prompt becomes its transcript entry's uuid: the turn's boundary for forks.
    yield {
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": None,
        "uuid": prompt_uuid,
    }


class ClaudeAdapter(ProviderAdapter):
    name = "claude"
    capabilities = CAPABILITIES
    sandboxed = True  # the host's launcher runs the CLI (treadle.sandbox)

    def __init__(
        self,
        workspace: Path,
        request: PlaceSession,
        state_dir: Path,
        settings: ClaudeSettings | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        super().__init__(workspace)
        self._sandbox = sandbox if sandbox is not None and sandbox.enabled else None
        self._prepared: Prepared | None = None  # the sandbox of the running CLI
        self._starts = 0
        if not is_token(request.tenant):
            raise ValueError(f"tenant {request.tenant!r} is not a valid token")
        if request.runtime_mode not in PERMISSION_MODES:
            raise ValueError(f"runtime mode {request.runtime_mode!r} is not one of {sorted(PERMISSION_MODES)}")
        self.request = request
        self.settings = settings or ClaudeSettings()
        self._config_dir = Path(state_dir) / "claude-config"
        threads = self.settings.threads_dir or Path(state_dir).parent.parent / "claude-threads"
        self.store = SessionStore(Path(threads) / request.tenant)
        self.session_id: str | None = None
        self._transcript: tuple[str, str] | None = None  # (session id, its transcript) once found (issue 35)
        self._approvals: Approvals | None = None  # once the runtime is imported
        self._client: ClaudeSDKClient | None = None
        self._reader: asyncio.Task[Any] | None = None
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._turn_lock = asyncio.Lock()
        self._playing: tuple[Turn, TurnTranslator] | None = None
        self._waiting: dict[str, bool] = {}  # attempt id -> interrupted before its prompt was sent
        self._unsent: tuple[str, str] | None = None  # (run id, prompt) of the last turn interrupted before sending
        self._interrupt_requested = False
        self._mode_changed = False  # the agent entered plan mode: the thread's own mode returns next turn
        self._stderr: deque[str] = deque(maxlen=40)

    # --- provider threads ---------------------------------------------------------------------------

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        """Resume ``native_ref`` (its transcript is in the store, or it is a recorded fork) or begin a new
        session. The CLI itself starts with the first turn, which is where a failed resume shows."""
        session_id = _valid_session_id(native_ref) if native_ref else str(uuid.uuid4())
        resumed = await asyncio.to_thread(self._prepare, session_id)
        self.session_id = session_id
        return session_id, resumed

    def _prepare(self, session_id: str) -> bool:
        self.store.ensure()
        (self._config_dir.parent / "home").mkdir(parents=True, exist_ok=True)
        self.store.link_into(self._config_dir)
        return self.store.transcript(session_id) is not None or self.store.pending_fork(session_id) is not None

    async def native_state(self) -> native_state.NativeFiles | None:
        """Issue 35: the session's transcript and Treadle's records of where it ends (``store.resume_files``:
        named, not searched for)."""
        if self.session_id is None or self.request.ephemeral:
            return None
        session_id = self.session_id
        known = self._transcript[1] if self._transcript and self._transcript[0] == session_id else None
        files = await asyncio.to_thread(self.store.resume_files, session_id, known)
        self._transcript = (session_id, files[0]) if files else None
        return native_state.NativeFiles(self.store.root, tuple(files)) if files else None

    async def restore_native_state(
        self, native_ref: str, fetch: Callable[[], Awaitable[dict[str, bytes] | None]]
    ) -> bool:
        """Before ``open_thread``, so ``_prepare`` finds the transcript (and ``resume_point`` the records)."""
        session_id = _valid_session_id(native_ref)
        await asyncio.to_thread(self.store.ensure)
        if await asyncio.to_thread(self.store.transcript, session_id) is not None:
            return False  # this node still has it
        files = await fetch()
        if files is None:
            return False
        strays = [name for name in files if not self.store.resume_file_of(name, session_id)]
        if strays or not any(name.startswith("projects/") for name in files):
            raise native_state.NativeStateRefused(
                f"claude native state of {session_id} holds {strays or 'no transcript'}"
            )
        await asyncio.to_thread(native_state.restore, self.store.root, files)
        return True

    async def _open(self, session_id: str) -> None:
        """Start the CLI on ``session_id``: resume it, materialise it as a recorded fork, or begin it."""
        if self.store.transcript(session_id) is not None:
            point = await asyncio.to_thread(self.store.resume_point, session_id)
            await self._connect(resume=session_id, resume_at=point)
            return
        fork = self.store.pending_fork(session_id)
        if fork is not None:
            await self._connect(resume=fork.source, fork=True, session_id=session_id, resume_at=fork.at)
            return
        # Nothing was ever written under this id (no turn reached the CLI): the conversation starts here.
        await self._connect(session_id=session_id)

    async def _connect(self, **where: Any) -> None:
        from claude_agent_sdk import ClaudeSDKClient

        from .options import session_options

        assert self._approvals is not None
        wrapper = await self._sandboxed_cli()
        options = session_options(
            self.settings,
            workspace=self.workspace,
            config_dir=self._config_dir,
            runtime_mode=self.request.runtime_mode,
            model=self.request.model,
            can_use_tool=self._approvals.can_use_tool,
            stderr=self._on_stderr,
            cli_path=wrapper,
            mcp=self.mcp_access,
            **where,
        )
        client = ClaudeSDKClient(options)
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await client.connect()
        except Exception as exc:
            if exits.signal_of(code := _exit_code(exc)) is not None:
                # Killed as it started (a kill, the OOM killer): a lost runtime (L9.3), which the host retries on a
                # new session within the run's budget; a CLI that exits by itself fails the turn (it would again).
                raise RuntimeLost(f"Claude Code {exits.exit_status(code)} as it started") from exc
            raise ClaudeUnavailable(f"Claude Code did not start: {exc}{self._stderr_tail()}") from exc
        self._client = client
        self._mode_changed = False
        self._inbox = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(client), name="claude-reader")

    async def _sandboxed_cli(self) -> Path | None:
        """With the host's sandbox: a wrapper script the SDK spawns as its CLI, which drops the environment
        the SDK built from the host's and runs the real CLI in the tenant's sandbox (launcher.py)."""
        if self._sandbox is None:
            return None
        from .options import SDK_SPAWN_ENV, cli_env, real_cli

        if self._prepared is not None:
            await self._prepared.close()
        self._starts += 1
        cli = real_cli(self.settings).resolve()
        home = self._config_dir.parent / "home"
        projects = self.store.projects.resolve()
        self._prepared = await self._sandbox.prepare(
            tenant=self.request.tenant,
            name=f"{self.request.session_id}-{self._starts}",
            workspace=self.workspace,
            homes=[self._config_dir, home, projects],
            binaries=[cli.parent],
            argv=[str(cli)],
            runtime_env={
                **cli_env(self.settings, self._config_dir, self.request.runtime_mode),
                **runtime_env(self.mcp_access),
            },
            model_urls=[self.settings.base_url or "https://api.anthropic.com"],
            home=home,
            orchestrator_url=egress_url(self.mcp_access),
            inherit=SDK_SPAWN_ENV,
        )
        return self._prepared.wrapper

    async def _read(self, client: ClaudeSDKClient) -> None:
        try:
            async for message in client.receive_messages():
                self._inbox.put_nowait(message)
            self._inbox.put_nowait(_Ended("Claude Code closed its output"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the SDK's ProcessError carries the CLI's exit code
            self._inbox.put_nowait(_Ended(f"Claude Code failed: {exc}", getattr(exc, "exit_code", None)))

    def _on_stderr(self, line: str) -> None:
        self._stderr.append(line)
        log.debug("claude stderr: %s", line)

    def _stderr_tail(self) -> str:
        line = exits.relevant_line(self._stderr)
        return f" ({line})" if line else ""

    def _describe_end(self, ended: _Ended) -> str:
        if ended.returncode is None:
            return f"{ended.reason}{self._stderr_tail()}"
        return exits.describe("Claude Code", ended.returncode, self._stderr)

    @property
    def _alive(self) -> bool:
        return self._client is not None and self._reader is not None and not self._reader.done()

    async def _drop_client(self) -> None:
        client, reader, self._client, self._reader = self._client, self._reader, None, None
        if self._approvals is not None:
            self._approvals.abandon()
        if reader is not None:
            reader.cancel()
        if client is not None:
            try:
                async with asyncio.timeout(self.settings.close_timeout):
                    await client.disconnect()
            except Exception as exc:  # the process is gone or stuck: nothing more to release here
                log.warning("Claude Code did not disconnect cleanly: %r", exc)

    # --- turns --------------------------------------------------------------------------------------

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        self._waiting[turn.attempt_id] = False
        try:
            async with self._turn_lock:
                prompt_uuid = str(uuid.uuid4())
                turn.native_ref = prompt_uuid
                await sink.event(pe.TurnStarted(native_turn_ref=prompt_uuid))
                try:
                    await self._ensure_alive()
                except ClaudeUnavailable as exc:
                    await sink.event(pe.TurnCompleted(status="failed", error=str(exc)))
                    return
                text = self._with_unsent(turn)
                if self._waiting[turn.attempt_id]:
                    # Interrupted while the CLI was starting (or an earlier turn ending): the prompt never
                    # reached Claude, and on its own it never will (see _with_unsent).
                    self._unsent = (turn.run_id, text)
                    await sink.event(pe.TurnCompleted(status="interrupted"))
                    return
                await sink.event(await self._play(turn, sink, prompt_uuid, text))
        finally:
            self._waiting.pop(turn.attempt_id, None)

    async def _ensure_alive(self) -> None:
        """Start the CLI for the first turn, and (L9.3 inside one session) again after it died."""
        ended = None
        while not self._inbox.empty():  # what a previous turn left behind (a late notification, an end)
            message = self._inbox.get_nowait()
            if isinstance(message, _Ended):
                ended = message
        if self._alive and ended is None:
            return
        if self.session_id is None:
            raise ClaudeUnavailable("no Claude Code session is open (open_thread was not called)")
        if self._approvals is None:
            await asyncio.to_thread(_import_runtime)
            from .approvals import Approvals

            self._approvals = Approvals(str(self.workspace))
        await self._drop_client()
        await self._open(self.session_id)

    def _with_unsent(self, turn: Turn) -> str:
        """L3.3: a steer restarts its run as a new attempt that carries only the steering message. When the
        attempt it interrupted never sent its prompt (a quick steer on a CLI still starting), that prompt goes
        with the restart, or Claude would never hear what the run was about. A new run does not take it: a
        plain interrupt means "do not do that"."""
        unsent, self._unsent = self._unsent, None
        if unsent is None or unsent[0] != turn.run_id or unsent[1] in turn.text:
            return turn.text
        return f"{unsent[1]}\n\n{turn.text}"

    async def _play(self, turn: Turn, sink: TurnSink, prompt_uuid: str, text: str) -> pe.TurnCompleted:
        from .translate import TurnTranslator

        assert self._approvals is not None
        translator = TurnTranslator(turn, sink)
        self._interrupt_requested = False
        self._playing = (turn, translator)
        self._approvals.turn = translator
        ended: _Ended | None = None
        cut_short = False  # interrupted while waiting for a background agent after the CLI's result
        try:
            assert self._client is not None
            if self._mode_changed:
                # A proposed plan waits for the user; their next message runs in the thread's runtime mode.
                await self._client.set_permission_mode(PERMISSION_MODES[self.request.runtime_mode])
                self._mode_changed = False
            await self._client.query(_prompt(text, prompt_uuid))
            while True:
                message = await self._inbox.get()
                if isinstance(message, _Ended):
                    ended = message
                    break
                if await translator.feed(message):
                    break
                if translator.result is not None and self._interrupt_requested:
                    cut_short = True
                    break
        except Exception as exc:  # writing to a dead process
            ended = _Ended(f"Claude Code failed: {exc!r}")
        finally:
            self._mode_changed = self._mode_changed or translator.entered_plan_mode
            translator.finished = True
            self._approvals.turn = None
            self._playing = None
        await translator.close_open()
        if ended is not None and not self._interrupt_requested:
            await self._drop_client()
            # L9.3: a lost runtime is a lost attempt, retried on the resumed session; the cut-off turn is not
            # recorded as ended, so that resume leaves it out and the model hears the message once.
            raise RuntimeLost(self._describe_end(ended))
        if self.session_id is not None:
            await asyncio.to_thread(self.store.record_ended, self.session_id, prompt_uuid)
        if ended is not None:
            await self._drop_client()
            return pe.TurnCompleted(status="interrupted")
        if translator.session_id is not None and translator.session_id == self.session_id:
            # The turn is written: a fork now has its own transcript, and after a rollback the newest entry
            # is on the kept branch, so a plain resume finds the right conversation from here on.
            await asyncio.to_thread(self._settled, translator.session_id)
        if cut_short:
            return pe.TurnCompleted(status="interrupted")
        return translator.completion(self._interrupt_requested)

    def _settled(self, session_id: str) -> None:
        self.store.forget_fork(session_id)
        self.store.forget_rewind(session_id)

    async def interrupt(self, turn: Turn) -> None:
        playing = self._playing
        if playing is None or playing[0].attempt_id != turn.attempt_id or not self._alive:
            if turn.attempt_id in self._waiting:
                self._waiting[turn.attempt_id] = True  # not sent yet: it ends as soon as it would start
            return  # otherwise that turn is over: it already reported how it ended
        self._interrupt_requested = True
        assert self._client is not None
        await self._client.interrupt()
        for task_id in playing[1].background_running:  # an interrupted run stops what it started
            try:
                await self._client.stop_task(task_id)
            except Exception as exc:
                log.warning("could not stop background task %s: %r", task_id, exc)

    async def respond(self, request_id: str, response: Response) -> None:
        if self._approvals is None:
            raise Unsupported(f"request {request_id} is not live (no Claude Code session is open)")
        self._approvals.respond(request_id, response)

    # --- forks and the end --------------------------------------------------------------------------

    async def fork(self, at_turn_ref: str | None) -> str:
        """L6.2: a new Claude session that starts with this one's history (up to and including the turn
        whose prompt is ``at_turn_ref``). Claude Code writes a fork when it is first used, so the fork is
        recorded here and materialised by the ``open_thread`` of the new ref."""
        if self.session_id is None:
            raise Unsupported("no Claude Code session is open to fork")
        source = self.session_id
        rewind = self.store.pending_rewind(source)
        fork = PendingFork(source=source, at=rewind.at if rewind else None)
        if self.store.transcript(source) is None:
            earlier = self.store.pending_fork(source)
            if earlier is None:
                return str(uuid.uuid4())  # nothing was said yet: the fork is an empty conversation
            fork = earlier  # a fork of a fork that was never used is a fork of the same point
        if at_turn_ref:
            if fork.source != source:
                raise Unsupported("cannot fork at a turn of a fork that has not been used yet")
            ends = [last for prompt, last in await asyncio.to_thread(self.store.turns, source) if prompt == at_turn_ref]
            if not ends:
                raise ValueError(f"turn {at_turn_ref} is not in Claude session {source}")
            fork = PendingFork(source=source, at=ends[0])
        new_id = str(uuid.uuid4())
        await asyncio.to_thread(self.store.record_fork, new_id, fork)
        return new_id

    async def rollback(self, turns: int) -> dict[str, Any] | None:
        """L10.5: drop the last ``turns`` turns. The session keeps its id; the CLI is restarted to resume it
        at the end of the last kept turn, and that point is recorded until a new turn is written after it
        (the dropped turns stay in the transcript file as a dead branch). Returns the remaining turns."""
        if self.session_id is None:
            raise Unsupported("no Claude Code session is open to roll back")
        if turns < 1:
            raise ValueError("rollback needs at least one turn to drop")
        async with self._turn_lock:
            session_id = self.session_id
            kept = await asyncio.to_thread(self.store.turns, session_id)
            if turns > len(kept):
                raise ValueError(f"Claude session {session_id} has {len(kept)} turns; cannot drop {turns}")
            if turns == len(kept):
                raise Unsupported("Claude Code cannot resume a session before its first turn")
            kept = kept[:-turns]
            await asyncio.to_thread(self.store.record_rewind, session_id, PendingRewind(at=kept[-1][1]))
            await self._drop_client()  # the next turn starts the CLI at the kept point
        return {"session_id": session_id, "turns": [prompt for prompt, _ in kept]}

    async def close(self) -> None:
        await self._drop_client()
        if self._prepared is not None:
            await self._prepared.close()
        if self.request.ephemeral and self.session_id is not None:  # a summary's conversation is not kept
            await asyncio.to_thread(self.store.forget, self.session_id)

    @property
    def pending_requests(self) -> list[str]:
        return self._approvals.pending if self._approvals else []


def _exit_code(exc: BaseException) -> int | None:
    """The CLI's exit status as the SDK's failed connect reports it: a ``ProcessError``'s ``exit_code``, or the
    ``(exit code: N)`` of its ``CLIConnectionError`` (the SDK drops its process object when a connect fails)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(code := getattr(seen, "exit_code", None), int):
            return code
        if found := _EXIT_CODE.search(str(seen)):
            return int(found.group(1))
        seen = seen.__cause__ or seen.__context__
    return None
