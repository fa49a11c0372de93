"""The Codex adapter: one ``codex app-server`` process per provider session, driven over JSON-RPC.

The process serves one provider thread (the session's). Its notifications and server requests are
routed, in arrival order, to the turn that is playing; the translator turns them into provider events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import stat
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from treadle.core import provider_events as pe
from treadle.core.providers.model import ProviderCapabilities

from ...sandbox.host import Prepared, Sandbox
from .. import mcp_access, native_state
from ..base import SPARE_THREAD, ProviderAdapter, Response, RuntimeLost, Turn, TurnSink, Unsupported
from ..base import ResumeFailed as ResumeFailedBase
from ..protocol import PlaceSession
from .home import PROVIDER_ID, home_root, prepare_home
from .rpc import ProcessGone, RpcError, RpcProcess
from .settings import CodexSettings
from .translate import LiveRequest, Outcome, TurnTranslator

log = logging.getLogger(__name__)

CAPABILITIES = ProviderCapabilities(
    create_empty_thread=True,
    read_snapshot=True,
    rollback=True,
    fork=True,
    native_turn_ids=True,
    interrupt=True,
    active_steering=True,
    terminal_status="strong",
    streaming=True,
    approvals=["command", "file_change"],
    approvals_live_only=True,  # a callback dies with its process; nothing is pending across restarts
    structured_questions=True,
    plan_updates=True,
    todo_list=True,
    proposed_plan=True,
    subagents=False,
    identity="strong",
)

# Treadle runtime mode -> (Codex approval policy, sandbox)
RUNTIME_MODES: dict[str, tuple[str, str]] = {
    "approval_required": ("untrusted", "workspace-write"),  # anything not known-safe asks first
    "auto_accept_edits": ("on-request", "workspace-write"),  # edits in the workspace run; escalations ask
    "full_access": ("never", "danger-full-access"),
}
_DECISIONS = {"accept": "accept", "accept_for_session": "acceptForSession", "decline": "decline", "cancel": "cancel"}
_END = object()  # queued when the process exits under a playing turn


class ResumeFailed(ResumeFailedBase):
    """L9.4: the provider thread could not be resumed (orchestration continues on a new one)."""


class CodexAdapter(ProviderAdapter):
    name = "codex"
    capabilities = CAPABILITIES
    sandboxed = True  # the host's launcher runs the app-server (treadle.sandbox)
    warms = True  # the app-server's start (sandbox, process, initialize) is most of a first turn's wait
    spares = True  # ... so one may be started before its thread exists (take_workspace)

    def __init__(
        self,
        workspace: Path,
        request: PlaceSession,
        state_dir: Path,
        settings: CodexSettings | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        super().__init__(workspace)
        self._host_sandbox = sandbox if sandbox is not None and sandbox.enabled else None
        self._prepared: Prepared | None = None  # the sandbox of the current process
        self._starts = 0
        self._request = request
        self._state_dir = Path(state_dir)
        self._settings = settings or CodexSettings()
        mode = request.runtime_mode if request.runtime_mode in RUNTIME_MODES else "approval_required"
        self._approval_policy, self._sandbox = RUNTIME_MODES[mode]
        self._model = request.model or self._settings.model
        self._rpc: RpcProcess | None = None
        self._thread_id: str | None = None
        self._native_home: Path | None = None  # the tenant's CODEX_HOME, once the native state was asked for
        self._known_rollouts: dict[str, tuple[str, ...]] = {}  # thread id -> its rollouts found (issue 35)
        self._queue: asyncio.Queue[Any] | None = None  # messages of the playing turn
        self._translator: TurnTranslator | None = None
        self._turn_known = asyncio.Event()
        self._live: dict[str, LiveRequest] = {}
        self._exit_watch: asyncio.Task[Any] | None = None
        self._closed: dict[str, asyncio.Event] = {}  # threads being let go of -> set on thread/closed
        self._usage: dict[str, Any] | None = None  # codex's token usage after the last turn (shown in snapshots)
        # Codex keeps a turn's collaboration mode for the turns after it: the mode the thread is in, None when
        # not known (a resumed thread), so a turn that asks for none is put back to default explicitly
        self._mode: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # fire-and-forget replies, kept referenced until done
        # A spare's empty stand-in for a workspace (the host's, its own): removed with the runtime
        self._placeholder = workspace if request.thread == SPARE_THREAD else None

    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def pid(self) -> int | None:
        return self._rpc.pid if self._rpc else None

    @property
    def running(self) -> bool:
        """Its app-server started and has not exited."""
        return self._rpc is not None and not self._rpc.exited.is_set()

    # --- process ------------------------------------------------------------------------------

    def _home_root(self) -> Path:
        # state_dir is <host runtime dir>/<session id>; the homes live beside the sessions (home.home_root)
        return home_root(self._settings, self._state_dir.parent / "codex-homes")

    async def _ensure_process(self) -> RpcProcess:
        if self._rpc is not None and not self._rpc.exited.is_set():
            return self._rpc
        home = prepare_home(self._home_root(), self._request.tenant, self._settings)
        # A private HOME too: the commands Codex runs through a login shell must not depend on (or wait for)
        # the host user's profile, and must not see its dotfiles.
        user_home = home / "home"
        user_home.mkdir(exist_ok=True)
        argv, env = await self._command(home, user_home)
        rpc = RpcProcess(self._on_notification, self._on_request)
        await rpc.start(argv, env, self.workspace)
        try:
            await rpc.request(
                "initialize",
                {
                    "clientInfo": {"name": "treadle", "title": "Treadle", "version": "0.1.0"},
                    "capabilities": {"experimentalApi": True},
                },
                self._settings.start_timeout,
            )
            await rpc.notify("initialized")
        except BaseException:
            await rpc.close(grace=1.0)
            raise
        self._rpc = rpc
        self._exit_watch = asyncio.create_task(self._watch_exit(rpc), name="codex-exit-watch")
        if self._thread_id is not None:
            # the session's earlier process died: its successor takes the thread back (L9.2)
            await self._resume(self._thread_id)
        return rpc

    async def _command(self, home: Path, user_home: Path) -> tuple[list[str], dict[str, str]]:
        """The app-server's argv and environment: in the host's sandbox (launcher.py) an allow-listed
        environment with the model key as the only secret, else the host's environment."""
        binary = self._settings.resolve_binary()
        own = {"CODEX_HOME": str(home), "HOME": str(user_home), "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        own.update(mcp_access.runtime_env(self.mcp_access))
        serve = ["app-server", *mcp_access.codex_args(self.mcp_access)]
        key_env = self._settings.api_key_env
        if self._settings.api_key is not None:
            own[key_env] = self._settings.api_key.get_secret_value()
        elif self._host_sandbox is not None and key_env in os.environ:
            own[key_env] = os.environ[key_env]  # the one host variable this runtime needs
        if self._host_sandbox is None:
            env = {**os.environ, **own}
            if self._settings.proxy:
                for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
                    env[name] = self._settings.proxy
                env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
            return [str(binary), *serve], env
        if self._prepared is not None:
            await self._prepared.close()  # the sandbox of a process that died
        self._starts += 1
        # The whole vendor dir of the native binary: codex-resources/bwrap and codex-path/rg sit beside bin/.
        install = binary.resolve().parent.parent if binary.resolve().parent.name == "bin" else binary.resolve().parent
        self._prepared = await self._host_sandbox.prepare(
            tenant=self._request.tenant,
            name=f"{self._request.session_id}-{self._starts}",
            workspace=self.workspace,
            homes=[home],
            binaries=[install],
            argv=[str(binary.resolve()), *serve],
            runtime_env=own,
            model_urls=[self._settings.base_url],
            home=user_home,
            orchestrator_url=mcp_access.egress_url(self.mcp_access),
        )
        return self._prepared.command, {}

    async def warm(self) -> None:
        try:
            await self._ensure_process()
        except BaseException:
            await self.close()
            raise

    def adopt(self, request: PlaceSession) -> None:
        if (request.tenant, request.session_id) != (self._request.tenant, self._request.session_id):
            raise ValueError("a warmed runtime is adopted by its own session only")
        self._request = request

    async def take_workspace(self, workspace: Path, request: PlaceSession) -> None:
        """A spare runtime (started with a placeholder workspace, before its thread existed) becomes ``request``'s:
        the workspace is bound into its running sandbox (``Sandbox.attach``), and the thread it opens next uses it.
        Once only, same tenant only, and only while the process it was started as still runs."""
        rpc = self._rpc
        if request.tenant != self._request.tenant:
            raise ValueError("a spare runtime serves its own tenant only")
        if self._thread_id is not None or self._request.thread != SPARE_THREAD:
            raise ValueError("a spare runtime takes one workspace, before any thread")
        if rpc is None or rpc.exited.is_set() or rpc.pid is None:
            raise RuntimeLost("the spare runtime is not running")
        self._request = request  # never a spare again, whatever follows
        if self._host_sandbox is not None:
            assert self._prepared is not None  # a running sandboxed process was prepared
            await self._host_sandbox.attach(self._prepared, rpc.pid, workspace)
        if rpc.exited.is_set():
            raise RuntimeLost("the spare runtime exited while its workspace was bound")
        self.workspace = workspace
        mode = request.runtime_mode if request.runtime_mode in RUNTIME_MODES else "approval_required"
        self._approval_policy, self._sandbox = RUNTIME_MODES[mode]
        self._model = request.model or self._settings.model

    async def _watch_exit(self, rpc: RpcProcess) -> None:
        await rpc.exited.wait()
        self._live.clear()  # L11.3: their callbacks died with the process
        if self._queue is not None:
            self._queue.put_nowait((_END, rpc))

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rpc = await self._ensure_process()
        return await rpc.request(method, params, self._settings.request_timeout) or {}

    def _thread_overrides(self) -> dict[str, Any]:
        return {
            "cwd": str(self.workspace),
            "model": self._model,
            "modelProvider": PROVIDER_ID,
            "approvalPolicy": self._approval_policy,
            "sandbox": self._sandbox,
        }

    # --- threads ------------------------------------------------------------------------------

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        """``fresh_ref`` is ignored: Codex names its threads itself (strong identity)."""
        try:
            if native_ref:
                result = await self._resume(native_ref)
                self._thread_id = result["thread"]["id"]
                return self._thread_id, True
            ephemeral = {"ephemeral": True} if self._request.ephemeral else {}  # a summary's: no rollout kept
            result = await self._call("thread/start", {**self._thread_overrides(), **ephemeral})
        except BaseException:
            await self.close()  # the host keeps no session that failed to open: nothing may linger
            raise
        self._thread_id, self._mode = result["thread"]["id"], "default"
        return self._thread_id, False

    async def _resume(self, native_ref: str) -> dict[str, Any]:
        self._mode = None  # whatever mode the thread was left in
        params = {"threadId": native_ref, "excludeTurns": True, **self._thread_overrides()}
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + self._settings.request_timeout, 0.05
        while True:
            try:
                return await self._call("thread/resume", params)
            except RpcError as exc:
                # the process of a session that just died may still hold the thread for a moment
                if "active writer" not in exc.message or loop.time() >= deadline:
                    raise ResumeFailed(f"codex could not resume thread {native_ref}: {exc.message}") from exc
            await asyncio.sleep(delay)  # backoff while the old writer exits
            delay = min(delay * 2, 1.0)

    # --- native state off the node (issue 35) ---------------------------------------------------

    def _rollouts(self, home: Path, thread_id: str) -> list[str]:
        """The thread's rollout files in ``home`` (``sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``): a
        walk of the tenant's whole ``sessions`` tree, so done once per thread and session (``_rollouts_kept``)."""
        return [
            f"sessions/{p}" for p in native_state.walk(home / "sessions") if _rollout_of(f"sessions/{p}", thread_id)
        ]

    def _rollouts_kept(self, home: Path, thread_id: str) -> tuple[str, ...]:
        """The rollouts found before, while each is still a regular file; else (a new thread's first, written
        once it has a turn; one gone or replaced; a revert's new one, see ``rollback``) found again. Codex
        appends a resumed thread to its rollout, and a fork is another thread (another provider thread, kept
        under its own name)."""
        found = self._known_rollouts.get(thread_id, ())
        if not found or not all(_is_regular(home / name) for name in found):
            found = tuple(self._rollouts(home, thread_id))
            self._known_rollouts = {thread_id: found} if found else {}
        return found

    async def native_state(self) -> native_state.NativeFiles | None:
        """The open thread's rollout: all Codex needs to resume it (its sqlite state is an index it rebuilds)."""
        if self._thread_id is None or self._request.ephemeral:
            return None
        thread_id = self._thread_id
        if self._native_home is None:
            self._native_home = prepare_home(self._home_root(), self._request.tenant, self._settings)
        home = self._native_home
        found = await asyncio.to_thread(self._rollouts_kept, home, thread_id)
        return native_state.NativeFiles(home, found) if found else None

    async def restore_native_state(
        self, native_ref: str, fetch: Callable[[], Awaitable[dict[str, bytes] | None]]
    ) -> bool:
        thread_id = _valid_thread_id(native_ref)
        home = prepare_home(self._home_root(), self._request.tenant, self._settings)
        if await asyncio.to_thread(self._rollouts, home, thread_id):
            return False  # this node still has it
        files = await fetch()
        if files is None:
            return False
        strays = [name for name in files if not _rollout_of(name, thread_id)]
        if strays or not files:
            raise native_state.NativeStateRefused(f"codex native state of {thread_id} holds {strays or 'nothing'}")
        await asyncio.to_thread(native_state.restore, home, files)
        return True

    def _require_thread(self) -> str:
        if self._thread_id is None:
            raise RuntimeError("open_thread must come first")
        return self._thread_id

    async def fork(self, at_turn_ref: str | None) -> str:
        params = {
            "threadId": self._require_thread(),
            "excludeTurns": True,
            **self._thread_overrides(),
            "config": {"thread_unload_delay_secs": 0},
        }  # unloaded as soon as it is let go of
        if at_turn_ref:
            params["lastTurnId"] = at_turn_ref
        result = await self._call("thread/fork", params)
        forked: str = result["thread"]["id"]
        # The fork belongs to the session that will open it: this process must let go of it, or codex
        # refuses to resume it elsewhere ("already has an active writer").
        closed = self._closed.setdefault(forked, asyncio.Event())
        try:
            await self._call("thread/unsubscribe", {"threadId": forked})
            async with asyncio.timeout(self._settings.request_timeout):
                await closed.wait()
        finally:
            self._closed.pop(forked, None)
        return forked

    async def rollback(self, turns: int) -> dict[str, Any] | None:
        if turns < 1:
            raise ValueError("rollback needs at least one turn")
        thread_id = self._require_thread()
        page = await self._call("thread/turns/list", {"threadId": thread_id, "limit": turns, "sortDirection": "desc"})
        newest = page.get("data") or []
        if len(newest) < turns:
            raise ValueError(f"the provider thread has {len(newest)} turns, cannot drop {turns}")
        await self._call("thread/revert", {"threadId": thread_id, "beforeTurnId": newest[turns - 1]["id"]})
        self._known_rollouts = {}  # the revert wrote a new rollout beside the earlier ones: found again
        return await self.snapshot()

    async def snapshot(self) -> dict[str, Any]:
        result = await self._call("thread/read", {"threadId": self._require_thread(), "includeTurns": True})
        thread = result["thread"]
        return {
            "native_ref": thread["id"],
            "forked_from": thread.get("forkedFromId"),
            "status": (thread.get("status") or {}).get("type"),
            "token_usage": self._usage,
            "turns": [
                {
                    "id": t["id"],
                    "status": t.get("status"),
                    "error": (t.get("error") or {}).get("message"),
                    "items": [_item_summary(i) for i in t.get("items") or []],
                }
                for t in thread.get("turns") or []
            ],
        }

    # --- turns --------------------------------------------------------------------------------

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        if self._queue is not None:
            raise RuntimeError("a turn is already playing on this session")
        thread_id = self._require_thread()
        translator = TurnTranslator(turn)
        self._translator, self._queue = translator, asyncio.Queue()
        self._turn_known.clear()
        try:
            try:
                mode = self._requested_mode(turn.script)
            except ValueError as exc:
                await sink.event(pe.TurnCompleted(status="failed", error=str(exc)))
                return
            try:
                await self._ensure_process()  # a restarted process resumes the thread first: mode unknown then
                text = turn.prompt_after(await self._cut_off_prompt(thread_id)) if turn.recovery else turn.text
                params = {"threadId": thread_id, "input": [_text_input(text)]}
                if mode != self._mode:
                    params |= self._mode_option(mode)
                result = await self._call("turn/start", params)
            except (RpcError, ProcessGone, ResumeFailed, TimeoutError) as exc:
                await sink.event(pe.TurnCompleted(status="failed", error=f"codex could not start the turn: {exc}"))
                return
            self._mode = mode
            translator.native_turn_id = turn.native_ref = result["turn"]["id"]
            self._turn_known.set()
            await sink.event(pe.TurnStarted(native_turn_ref=turn.native_ref))
            await self._play(translator, sink)
        except asyncio.CancelledError:
            # the host let go of the turn (session ending): do not leave codex working on it
            if translator.native_turn_id and self._rpc is not None and not self._rpc.exited.is_set():
                self._background(self._quietly_interrupt(self._rpc, thread_id, translator.native_turn_id))
            raise
        finally:
            self._usage = translator.usage or self._usage
            self._queue = self._translator = None
            self._turn_known.clear()
            self._live.clear()  # L11.3: a request outlives its turn only as not resumable

    async def _cut_off_prompt(self, thread_id: str) -> str | None:
        """The prompt of the thread's newest turn when a failure cut it off (it did not complete): Codex keeps
        the user message of a turn from its start, so a recovery must not send it again."""
        try:
            listed = await self._call("thread/turns/list", {"threadId": thread_id, "limit": 1, "sortDirection": "desc"})
        except RpcError:
            return None  # not known: the prompt is sent (at worst twice, as before)
        newest = (listed.get("data") or [None])[0]
        if not isinstance(newest, dict) or newest.get("status") == "completed":
            return None
        for item in newest.get("items") or []:
            if isinstance(item, dict) and item.get("type") == "userMessage":
                return "".join(c.get("text", "") for c in item.get("content") or [] if c.get("type") == "text")
        return None

    async def abandon(self) -> None:
        """SIGKILL, as a crash: asked to stop (``turn/interrupt``, or its stdin closed) Codex records the turn
        as the user's interruption ("The user interrupted the previous turn on purpose", a pending command
        "aborted by user"), which the retried turn would read as the user's will and not run again."""
        if self._rpc is not None:
            await self._rpc.kill()

    async def _quietly_interrupt(self, rpc: RpcProcess, thread_id: str, turn_id: str) -> None:
        with contextlib.suppress(Exception):
            await rpc.request(
                "turn/interrupt", {"threadId": thread_id, "turnId": turn_id}, self._settings.request_timeout
            )

    @staticmethod
    def _requested_mode(script: dict[str, Any] | None) -> str:
        """A Codex turn's options travel in the message's ``script``: ``{"collaboration_mode": "plan"}``;
        a turn that names no mode is a default-mode turn."""
        options = dict(script or {})
        mode = options.pop("collaboration_mode", None) or "default"
        if options:
            raise ValueError(f"codex turn options: unknown {', '.join(sorted(options))} (known: collaboration_mode)")
        if mode not in ("plan", "default"):
            raise ValueError(f"codex turn options: collaboration_mode must be plan or default, not {mode!r}")
        return mode

    def _mode_option(self, mode: str) -> dict[str, Any]:
        return {
            "collaborationMode": {
                "mode": mode,
                "settings": {
                    "model": self._model,
                    "reasoning_effort": self._settings.reasoning_effort,
                    "developer_instructions": None,
                },
            }
        }

    async def _play(self, translator: TurnTranslator, sink: TurnSink) -> None:
        assert self._queue is not None
        root = translator.turn.root_node_id
        while True:
            message = await self._queue.get()
            if message[0] is _END:
                if message[1] is not self._rpc and self._rpc is not None:
                    continue  # an earlier process's late word: this turn plays on its successor
                # L9.3: a lost runtime is a lost attempt (the host stops the session; the run is retried)
                raise RuntimeLost(message[1].describe_exit())
            kind, method, params, rpc_id = message
            if not translator.mine(params):
                continue
            if method == "serverRequest/resolved":
                self._forget(params.get("requestId"))  # answered, or withdrawn by codex (interrupt)
                continue
            if kind == "request":
                outcome = translator.request(rpc_id, method, params)
                if outcome is None:
                    await self._refuse(rpc_id, method)
                    continue
            else:
                outcome = translator.notification(method, params)
            await self._report(outcome, root, sink)
            if outcome.finished is not None:
                await sink.event(outcome.finished)
                return

    async def _report(self, outcome: Outcome, root: str, sink: TurnSink) -> None:
        for request_id, live in outcome.opened:
            self._live[request_id] = live  # answerable as soon as anyone can have seen it
        for message_id, chunk in outcome.text:
            await sink.text(message_id, root, chunk)
        for body in outcome.events:
            await sink.event(body)
        for message_id, text in outcome.text_done:
            await sink.text_done(message_id, root, text)

    def _forget(self, rpc_id: int | str | None) -> None:
        for request_id, live in list(self._live.items()):
            if live.rpc_id == rpc_id:
                self._live.pop(request_id, None)

    def _background(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refuse(self, rpc_id: int | str, method: str) -> None:
        if self._rpc is not None:
            with contextlib.suppress(ProcessGone):
                await self._rpc.reply_error(rpc_id, -32601, f"Treadle does not serve {method}")

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "thread/closed" and params.get("threadId") in self._closed:
            self._closed[params["threadId"]].set()
            return
        if self._queue is not None and params.get("threadId") == self._thread_id:
            self._queue.put_nowait(("notification", method, params, None))

    def _on_request(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> None:
        if self._queue is not None and params.get("threadId") == self._thread_id:
            self._queue.put_nowait(("request", method, params, rpc_id))
        else:
            self._background(self._refuse(rpc_id, method))

    async def steer(self, turn: Turn, text: str, message_id: str | None = None) -> None:
        """L3.2: Codex adds the text to the running turn (same turn id) and restarts its model call. Its user
        message item carries ``message_id`` back (``clientId``) where the steer joined the turn."""
        await self._wait_turn_known()
        params = {"threadId": self._require_thread(), "input": [_text_input(text)], "expectedTurnId": turn.native_ref}
        if message_id:
            params["clientUserMessageId"] = message_id
        try:
            await self._call("turn/steer", params)
        except RpcError as exc:
            raise Unsupported(f"codex cannot steer this turn now: {exc.message}") from exc

    async def interrupt(self, turn: Turn) -> None:
        await self._wait_turn_known()
        try:
            await self._call("turn/interrupt", {"threadId": self._require_thread(), "turnId": turn.native_ref})
        except RpcError as exc:
            raise Unsupported(f"codex cannot interrupt this turn now: {exc.message}") from exc

    async def _wait_turn_known(self) -> None:
        """Steer and interrupt name the native turn, which is known once ``turn/start`` answered."""
        if self._queue is None:
            raise Unsupported("no turn is playing")
        async with asyncio.timeout(self._settings.request_timeout):
            await self._turn_known.wait()

    async def respond(self, request_id: str, response: Response) -> None:
        live = self._live.get(request_id)
        if live is None or self._rpc is None or self._rpc.exited.is_set():
            raise Unsupported(f"request {request_id} is not live")
        result: dict[str, object]
        if live.kind == "user_input":
            result = {"answers": _answers(live, response)}
        else:
            if response.decision is None:
                raise ValueError("an approval needs a decision: accept, accept_for_session, decline or cancel")
            result = {"decision": _DECISIONS[response.decision]}
        self._live.pop(request_id, None)
        try:
            await self._rpc.reply(live.rpc_id, result)
        except ProcessGone as exc:
            raise Unsupported(f"request {request_id} is not live: {exc}") from exc

    async def close(self) -> None:
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            await rpc.close()
        if self._exit_watch is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._exit_watch
        if self._prepared is not None:
            await self._prepared.close()
        if self._placeholder is not None:
            with contextlib.suppress(OSError):  # empty: nothing ran in it (a thread works in its own workspace)
                self._placeholder.rmdir()


# A thread's rollout, and each one ``thread/revert`` writes for it (``…-<thread id>_<uuid>.jsonl``, the earlier
# ones left as they were): a resume reads the newest, so all are kept, as the node had them.
_ROLLOUT = re.compile(
    r"sessions/\d{4}/\d{2}/\d{2}/rollout-[0-9T:.-]{1,40}-(?P<thread>[0-9a-f-]{36})(?:_[0-9a-f-]{36})?\.jsonl"
)


def _rollout_of(name: str, thread_id: str) -> bool:
    found = _ROLLOUT.fullmatch(name)
    return found is not None and found["thread"] == thread_id


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _valid_thread_id(value: str) -> str:
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        raise ValueError(f"{value!r} is not a Codex thread id (a UUID)") from None
    if canonical != value:
        raise ValueError(f"{value!r} is not a Codex thread id in its own spelling")
    return value


def _text_input(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "text_elements": []}


def _answers(live: LiveRequest, response: Response) -> dict[str, Any]:
    """Treadle answers (question id, or "0" for the only question) → Codex's ``{id: {answers: [...]}}``. The
    model reads only these answers, so a free-text ``message`` answers every question not answered otherwise."""
    given = dict(response.answers or {})
    if "0" in given and len(live.question_ids) == 1 and live.question_ids[0] not in given:
        given[live.question_ids[0]] = given.pop("0")
    unknown = set(given) - set(live.question_ids)
    if unknown:
        raise ValueError(f"no such question: {', '.join(sorted(unknown))}")
    if response.message:
        given = {qid: given.get(qid, response.message) for qid in live.question_ids}
    return {qid: {"answers": [given[qid]]} for qid in live.question_ids if qid in given}


def _item_summary(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type")
    summary: dict[str, Any] = {"type": kind}
    if kind == "userMessage":
        summary["text"] = " ".join(c.get("text", "") for c in item.get("content") or [] if c.get("type") == "text")
    elif kind in ("agentMessage", "plan"):
        summary["text"] = item.get("text", "")
    elif kind == "commandExecution":
        summary |= {"command": item.get("command"), "status": item.get("status")}
    elif kind == "fileChange":
        summary |= {"paths": [c.get("path") for c in item.get("changes") or []], "status": item.get("status")}
    return summary
