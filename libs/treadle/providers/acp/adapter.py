"""The generic ACP adapter: one Agent Client Protocol agent process per provider session, JSON-RPC over stdio.

A provider thread is an ACP session (its id is the native ref). What the agent can do is read from its
``initialize`` answer and mapped onto Treadle's capabilities (docs/requirements.md "Capabilities"):
ACP has no active steering (Treadle interrupts and restarts), ``session/cancel`` is the interrupt, a session
resumes through ``session/load`` (or ``session/resume``) and only where the agent offers one (else resuming
fails typed and L9.4's replacement runs), and forks are portable (ACP forks only at a session's end).
Permission requests become approvals with the agent's own options; ``plan`` updates become the run's todo
list. The agent's file reads and writes are served inside the workspace only (``files.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from treadle.core import provider_events as pe
from treadle.core.ids import is_token
from treadle.core.providers.model import ProviderCapabilities

from ...sandbox.host import Prepared, Sandbox
from .. import mcp_access, native_state
from ..base import ProviderAdapter, Response, ResumeFailed, RuntimeLost, Turn, TurnSink, Unsupported
from ..codex.rpc import ProcessGone, RpcError, RpcProcess
from ..protocol import PlaceSession
from .files import FileRefused, WorkspaceFiles
from .settings import AcpAgent, AcpNotConfigured, AcpSettings
from .translate import LiveRequest, Outcome, TurnTranslator, mcp_call_of, offered_options

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
TURN_TIMEOUT = 6 * 3600.0  # a prompt turn ends by the agent's answer (or a cancel), not by this
# Treadle's decisions -> the ACP option kinds that carry them, in order of preference
_OPTION_KINDS = {
    "accept": ("allow_once", "allow_always"),
    "accept_for_session": ("allow_always", "allow_once"),
    "decline": ("reject_once", "reject_always"),
    "cancel": ("reject_once", "reject_always"),
}
_END = object()  # queued when the process exits under a playing turn


def capabilities_of(init: dict[str, Any]) -> ProviderCapabilities:
    """Treadle's capabilities of an agent from its ``initialize`` answer."""
    del init  # every ACP agent maps alike today; resume (can_resume) and MCP (session params) read it
    return ProviderCapabilities(
        create_empty_thread=True,  # session/new is an empty conversation
        read_snapshot=False,
        rollback=False,  # ACP cannot drop turns: files are restored, the next run starts a fresh thread
        # session/fork (unstable, claude-agent-acp) forks a session at its end only, while Treadle forks at a
        # run's point: every ACP fork is portable (L6.2's degradation), whatever the agent offers
        fork=False,
        native_turn_ids=False,  # prompt turns have no ids: Treadle mints the turn refs
        interrupt=True,  # session/cancel is part of the protocol
        active_steering=False,  # no way to add to a running prompt: interrupt and restart (L3.3)
        terminal_status="strong",  # every prompt ends with a stop reason
        streaming=True,
        approvals=["command", "file_change", "file_read"],
        approvals_live_only=True,
        structured_questions=False,
        plan_updates=True,
        todo_list=True,
        proposed_plan=False,
        subagents=False,
        identity="weak",
    )


def takes_http_mcp(init: dict[str, Any]) -> bool:
    return bool(((init.get("agentCapabilities") or {}).get("mcpCapabilities") or {}).get("http"))


def can_resume(init: dict[str, Any]) -> bool:
    agent = init.get("agentCapabilities") or {}
    return bool(agent.get("loadSession")) or "resume" in (agent.get("sessionCapabilities") or {})


class AcpAdapter(ProviderAdapter):
    name = "acp"
    capabilities = ProviderCapabilities(active_steering=False, native_turn_ids=False, identity="weak")
    sandboxed = True  # the host's launcher runs the agent (treadle.sandbox)

    def __init__(
        self,
        workspace: Path,
        request: PlaceSession,
        state_dir: Path,
        settings: AcpSettings | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        super().__init__(workspace)
        if not is_token(request.tenant):
            raise ValueError(f"tenant {request.tenant!r} is not a valid token")
        self._settings = settings or AcpSettings()
        self.agent_name, self.agent = self._settings.agent(request.provider)
        self.name = request.provider
        self._request = request
        self._state_dir = Path(state_dir)
        self._sandbox = sandbox if sandbox is not None and sandbox.enabled else None
        self._prepared: Prepared | None = None
        self._rpc: RpcProcess | None = None
        self._init: dict[str, Any] = {}
        self.session_id: str | None = None
        self._files = WorkspaceFiles(workspace)
        self._queue: asyncio.Queue[Any] | None = None  # what the playing turn consumes
        self._live: dict[str, LiveRequest] = {}
        self._cancelled = False
        self._turns = 0
        self._translator: TurnTranslator | None = None
        self._reload = False  # the last turn was cancelled on an agent that must be reloaded after one
        # a loaded session's replay: the text of its last user message, and whether that message is still arriving
        self._replayed: tuple[str, bool] | None = None
        self._loading: str | None = None  # the session whose replay is arriving
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- process ---------------------------------------------------------------------------------

    def home(self) -> Path:
        """The agent's private per-tenant home (its sessions live there, so a later process resumes them)."""
        root = self._settings.home_root or self._state_dir.parent / "acp-homes"
        return Path(root) / self.agent_name / self._request.tenant

    async def native_state(self) -> native_state.NativeFiles | None:
        """Issue 35: the agent's whole home (its session storage is its own affair, so it is listed anew after
        every turn; unchanged files are not read, and appended ones only for what they gained)."""
        if self.session_id is None or self._request.ephemeral:
            return None
        home = self.home()
        files = await asyncio.to_thread(native_state.walk, home)
        return native_state.NativeFiles(home, tuple(files)) if files else None

    async def restore_native_state(
        self, native_ref: str, fetch: Callable[[], Awaitable[dict[str, bytes] | None]]
    ) -> bool:
        """Before ``session/load``: only into a home that is not there at all (a new node, a lost disk), since
        what an agent keeps of one session cannot be told apart in a home it shares with the tenant's others."""
        home = self.home()
        if await asyncio.to_thread(home.exists):
            return False
        files = await fetch()
        if files is None:
            return False
        await asyncio.to_thread(native_state.restore, home, files)
        return True

    def _write_home(self, home: Path, agent: AcpAgent) -> None:
        (home / "home").mkdir(parents=True, exist_ok=True)
        for name, text in agent.home_files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"home file {name!r} must be a plain file name")
            wanted = text.replace("{model_url}", agent.model_url or "")
            path = home / name
            if not path.exists() or path.read_text() != wanted:
                path.write_text(wanted)

    def _env(self, home: Path) -> dict[str, str]:
        agent = self.agent
        env = {name: os.environ[name] for name in agent.env_allow if name in os.environ}
        env |= {k: v.replace("{home}", str(home)) for k, v in agent.env.items()}
        env |= {name: str(home) for name in agent.home_env}
        env["HOME"] = str(home / "home")
        if agent.mcp_token == "env":
            env |= mcp_access.runtime_env(self.mcp_access)
        return env

    async def _start(self) -> RpcProcess:
        if self._rpc is not None and not self._rpc.exited.is_set():
            return self._rpc
        home = self.home()
        await asyncio.to_thread(self._write_home, home, self.agent)
        argv, env = self.agent.argv(), self._env(home)
        if self._sandbox is not None:
            # the install is bound at its real path: a path through a link (a checkout's .tools) is not inside
            argv = [str(Path(a).resolve()) if a.startswith("/") and Path(a).exists() else a for a in argv]
            binaries = [Path(a).parent for a in argv if a.startswith("/") and Path(a).exists()]
            if self._prepared is not None:
                await self._prepared.close()
            self._turns += 1
            self._prepared = await self._sandbox.prepare(
                tenant=self._request.tenant,
                name=f"{self._request.session_id}-{self._turns}",
                workspace=self.workspace,
                homes=[home],
                binaries=_install_roots(binaries),
                argv=argv,
                runtime_env=env,
                model_urls=[self.agent.model_url] if self.agent.model_url else [],
                home=home / "home",
                orchestrator_url=mcp_access.egress_url(self.mcp_access),
            )
            self._files = WorkspaceFiles(self.workspace, (self._prepared.ids.uid, self._prepared.ids.gid))
            argv, env = self._prepared.command, {}
        else:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        rpc = RpcProcess(self._on_notification, self._on_request, runtime=f"ACP agent {self.agent_name}", jsonrpc=True)
        await rpc.start(argv, env, self.workspace)
        try:
            self._init = await rpc.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    # no terminals: the agent runs its commands itself, inside its sandbox
                    "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
                    "clientInfo": {"name": "treadle", "title": "Treadle", "version": "0.1.0"},
                },
                self.agent.start_timeout,
            )
        except BaseException:
            await rpc.close(grace=1.0)
            raise
        self._rpc = rpc
        self.capabilities = capabilities_of(self._init)
        watch = asyncio.create_task(self._watch_exit(rpc), name=f"acp-exit-{self.agent_name}")
        self._tasks.add(watch)
        watch.add_done_callback(self._tasks.discard)
        return rpc

    async def _watch_exit(self, rpc: RpcProcess) -> None:
        await rpc.exited.wait()
        self._live.clear()  # L11.3: their callbacks died with the process
        if self._queue is not None:
            self._queue.put_nowait((_END, rpc))

    async def _call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        rpc = await self._start()
        return await rpc.request(method, params, timeout or self.agent.request_timeout) or {}

    @property
    def offers_orchestrator(self) -> bool:
        """Issue 21: the orchestrator's MCP server (an http one) reaches only an agent that takes http servers."""
        return self.mcp_access is not None and takes_http_mcp(self._init)

    def _session_params(self) -> dict[str, Any]:
        """``cwd`` and ``mcpServers`` of ``session/new`` and ``session/load``: the configured servers the agent
        takes (stdio is the baseline; http/sse where it says so), and the orchestrator's with the session's
        credential where it takes http (no stdio bridge is offered: the credential would need a process)."""
        mcp = self.agent.mcp_servers
        accepted = (self._init.get("agentCapabilities") or {}).get("mcpCapabilities") or {}
        servers = [s for s in mcp if s.get("type", "stdio") == "stdio" or accepted.get(s.get("type"))]
        if self.mcp_access is not None and takes_http_mcp(self._init):
            # the orchestrator's name is its own: its calls are allowed by the credential (_allowed_by_credential)
            servers = [s for s in servers if s.get("name") != mcp_access.SERVER]
            servers.append(mcp_access.acp_server(self.mcp_access, self.agent.mcp_token))
        return {"cwd": str(self.workspace), "mcpServers": servers}

    # --- provider threads --------------------------------------------------------------------------

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        """Load ``native_ref`` (L9.2) where the agent can, or begin a new session. ``fresh_ref`` is unused:
        the agent names its sessions."""
        try:
            await self._start()
            if native_ref:
                await self._load(native_ref)
                self.session_id = native_ref
                resumed = True
            else:
                result = await self._call("session/new", self._session_params())
                self.session_id = str(result["sessionId"])
                resumed = False
            await self._apply_settings()
        except BaseException:
            await self.close()  # the host keeps no session that failed to open
            raise
        return self.session_id, resumed

    async def _load(self, native_ref: str) -> None:
        agent = self._init.get("agentCapabilities") or {}
        if not can_resume(self._init):
            raise ResumeFailed(f"ACP agent {self.agent_name} cannot load or resume sessions (no session/load)")
        method = "session/load" if agent.get("loadSession") else "session/resume"
        self._replayed, self._loading = None, native_ref
        try:
            await self._call(method, {"sessionId": native_ref, **self._session_params()})
        except (RpcError, ProcessGone, TimeoutError) as exc:
            raise ResumeFailed(f"ACP agent {self.agent_name} could not resume session {native_ref}: {exc}") from exc
        finally:
            self._loading = None

    async def _reload_session(self, session_id: str) -> None:
        """A fresh process on the same session (``reload_after_cancel``); a failure is a lost runtime (L9.3)."""
        self._reload = False
        old, self._rpc = self._rpc, None
        if old is not None:
            await old.close(grace=self.agent.close_grace)
        try:
            await self._start()
            await self._load(session_id)
            await self._apply_settings()
        except (ResumeFailed, RpcError, ProcessGone, TimeoutError) as exc:
            raise RuntimeLost(f"ACP agent {self.agent_name} did not come back after a cancel: {exc}") from exc

    async def _apply_settings(self) -> None:
        """The thread's runtime mode and model, where the agent offers them. A model or mode the agent refuses
        is a configuration the host cannot serve: the run fails with the agent's reason (no endless retry)."""
        mode = self.agent.modes.get(self._request.runtime_mode)
        model = self._request.model
        if model and self.agent.models and model not in self.agent.models:
            raise AcpNotConfigured(
                f"ACP agent {self.agent_name} offers no model {model!r} (offered: {self.agent.models})"
            )
        try:
            if mode:
                await self._call("session/set_mode", {"sessionId": self.session_id, "modeId": mode})
            if model:
                await self._call("session/set_model", {"sessionId": self.session_id, "modelId": model})
        except RpcError as exc:
            raise AcpNotConfigured(f"ACP agent {self.agent_name} refused the thread's settings: {exc}") from exc

    def _require_session(self) -> str:
        if self.session_id is None:
            raise RuntimeError("open_thread must come first")
        return self.session_id

    # --- turns -------------------------------------------------------------------------------------

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        if self._queue is not None:
            raise RuntimeError("a turn is already playing on this session")
        session_id = self._require_session()
        if self._reload and self._rpc is not None and not self._rpc.exited.is_set():
            await self._reload_session(session_id)
        rpc = self._rpc
        if rpc is None or rpc.exited.is_set():
            raise RuntimeLost(rpc.describe_exit() if rpc else f"ACP agent {self.agent_name} is not running")
        translator = TurnTranslator(turn, str(self.workspace))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queue, self._translator, self._cancelled = queue, translator, False
        if turn.script:
            await sink.event(pe.TurnCompleted(status="failed", error="ACP agents take no turn options"))
            self._queue = None
            return
        turn.native_ref = turn.attempt_id  # weak identity: Treadle's own name for the prompt turn
        # L9.3: a loaded session holds the prompt a failure cut off (the agent keeps it from the turn's start)
        held, self._replayed = self._replayed, None
        text = turn.prompt_after(held[0] if held else None)
        prompt = asyncio.ensure_future(
            rpc.request(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
                TURN_TIMEOUT,
            )
        )
        # The answer is queued behind every update the agent sent before it (callbacks run in order)
        prompt.add_done_callback(lambda done: queue.put_nowait(("answer", done)))
        try:
            await sink.event(pe.TurnStarted(native_turn_ref=turn.native_ref))
            await self._play(translator, queue, sink)
        except asyncio.CancelledError:
            if not rpc.exited.is_set():  # the host let go of the turn: do not leave the agent working on it
                self._background(self._quietly_cancel(rpc, session_id))
            prompt.cancel()
            raise
        finally:
            self._queue = self._translator = None
            self._live.clear()  # L11.3: a request outlives its turn only as not resumable

    async def _play(self, translator: TurnTranslator, queue: asyncio.Queue[Any], sink: TurnSink) -> None:
        root = translator.turn.root_node_id
        while True:
            kind, payload = await queue.get()
            if kind is _END:
                if payload is not self._rpc and self._rpc is not None:
                    continue
                raise RuntimeLost(payload.describe_exit())  # L9.3: the host stops the session, the run retries
            if kind == "update":
                await self._report(translator.update(payload), root, sink)
            elif kind == "permission":
                rpc_id, params = payload
                if self._cancelled:
                    self._background(self._answer(rpc_id, {"outcome": {"outcome": "cancelled"}}))
                    continue
                allowed = self._allowed_by_credential(params)
                if allowed is not None:
                    self._background(self._answer(rpc_id, {"outcome": {"outcome": "selected", "optionId": allowed}}))
                    continue
                await self._report(translator.permission(rpc_id, params), root, sink)
            elif kind == "answer":
                try:
                    result = payload.result() or {}
                    stop = str(result.get("stopReason") or "end_turn")
                    self._reload = stop == "cancelled" and self.agent.reload_after_cancel
                    out = translator.finish(stop)
                except ProcessGone as exc:
                    raise RuntimeLost(str(exc)) from exc
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # an error answer: the turn failed, the session lives on (L2.5)
                    out = translator.finish(None, error=f"ACP agent {self.agent_name}: {exc}")
                await self._report(out, root, sink)
                return

    def _allowed_by_credential(self, params: dict[str, Any]) -> str | None:
        """The agent's allow-once option when the request is a call of one of Treadle's own MCP tools that the
        session's credential grants: those are allowed by the credential's tool list, as for native Codex and
        Claude (the gateway checks the credential on every call), not asked of the user. None: ask."""
        call = mcp_call_of(params)
        if call is None or self.mcp_access is None or not self.offers_orchestrator:
            return None
        server, tool = call
        if server != mcp_access.SERVER or tool not in self.mcp_access.tools:
            return None
        return next((o["id"] for o in offered_options(params) if o.get("kind") == "allow_once"), None)

    async def _report(self, outcome: Outcome, root: str, sink: TurnSink) -> None:
        for request_id, live in outcome.opened:
            self._live[request_id] = live
        for message_id, chunk in outcome.text:
            await sink.text(message_id, root, chunk)
        for message_id, text in outcome.text_done:
            await sink.text_done(message_id, root, text)
        for body in outcome.events:
            await sink.event(body)

    # --- what the agent sends ----------------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update" or params.get("sessionId") not in (self.session_id, self._loading):
            return
        update = params.get("update") or {}
        if self._queue is not None and params.get("sessionId") == self.session_id:
            self._queue.put_nowait(("update", update))
        else:  # between turns (a loaded session's replay, command lists): nothing to report
            self._replay(update)

    def _replay(self, update: dict[str, Any]) -> None:
        """Follow a loaded session's replay to its last user message (L9.3: a recovery must not send the
        prompt the session already holds)."""
        kind = update.get("sessionUpdate")
        if kind == "user_message_chunk":
            text = self._replayed[0] if self._replayed and self._replayed[1] else ""
            self._replayed = (text + _chunk_text(update.get("content")), True)
        elif self._replayed is not None:  # anything else ends the user message
            self._replayed = (self._replayed[0], False)

    def _on_request(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> None:
        if params.get("sessionId") != self.session_id:
            self._background(self._error(rpc_id, -32602, "unknown session"))
        elif method == "session/request_permission":
            if self._queue is not None:
                self._queue.put_nowait(("permission", (rpc_id, params)))
            else:  # no turn is playing: nobody could answer it
                self._background(self._answer(rpc_id, {"outcome": {"outcome": "cancelled"}}))
        elif method in ("fs/read_text_file", "fs/write_text_file"):
            self._background(self._serve_file(rpc_id, method, params))
        else:
            self._background(self._error(rpc_id, -32601, f"Treadle does not serve {method}"))

    async def _serve_file(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> None:
        try:
            if method == "fs/read_text_file":
                result: dict[str, Any] | None = await asyncio.to_thread(self._files.read, params)
            else:
                await asyncio.to_thread(self._files.write, params)
                result = None
        except FileRefused as exc:
            await self._error(rpc_id, -32602, str(exc))
            return
        await self._answer(rpc_id, result)

    async def _answer(self, rpc_id: int | str, result: dict[str, Any] | None) -> None:
        if self._rpc is not None:
            with contextlib.suppress(ProcessGone):
                await self._rpc.reply(rpc_id, result)

    async def _error(self, rpc_id: int | str, code: int, message: str) -> None:
        if self._rpc is not None:
            with contextlib.suppress(ProcessGone):
                await self._rpc.reply_error(rpc_id, code, message)

    def _background(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- what the user sends -----------------------------------------------------------------------

    async def interrupt(self, turn: Turn) -> None:
        """L8.1: ``session/cancel``; every pending permission request is answered ``cancelled`` (as ACP asks)
        and the prompt then ends with stop reason ``cancelled`` (the attempt becomes interrupted)."""
        if self._queue is None or self._rpc is None:
            raise Unsupported("no turn is playing")
        self._cancelled = True
        for request_id, live in list(self._live.items()):
            self._live.pop(request_id, None)
            await self._answer(live.rpc_id, {"outcome": {"outcome": "cancelled"}})
        try:
            await self._rpc.notify("session/cancel", {"sessionId": self._require_session()})
        except ProcessGone as exc:
            raise Unsupported(f"the agent is gone: {exc}") from exc

    async def _quietly_cancel(self, rpc: RpcProcess, session_id: str) -> None:
        with contextlib.suppress(Exception):
            await rpc.notify("session/cancel", {"sessionId": session_id})

    async def respond(self, request_id: str, response: Response) -> None:
        """An approval's decision as one of the options the agent offered: ``answers={"option": <id>}`` picks
        one by id, else the decision picks the first option of a matching kind."""
        live = self._live.get(request_id)
        if live is None or self._rpc is None or self._rpc.exited.is_set():
            raise Unsupported(f"request {request_id} is not live")
        chosen = (response.answers or {}).get("option")
        if chosen is not None:
            if chosen not in {o["id"] for o in live.options}:
                raise ValueError(f"no such option: {chosen!r} (offered: {', '.join(o['id'] for o in live.options)})")
        elif response.decision is None:
            raise ValueError("an approval needs a decision (accept, accept_for_session, decline, cancel) or an option")
        else:
            chosen = next(
                (o["id"] for kind in _OPTION_KINDS[response.decision] for o in live.options if o.get("kind") == kind),
                None,
            )
        self._live.pop(request_id, None)
        outcome = {"outcome": "selected", "optionId": chosen} if chosen is not None else {"outcome": "cancelled"}
        try:
            await self._rpc.reply(live.rpc_id, {"outcome": outcome})
        except ProcessGone as exc:
            raise Unsupported(f"request {request_id} is not live: {exc}") from exc
        if response.decision == "cancel":  # decline and stop the turn
            with contextlib.suppress(Unsupported):
                await self.interrupt(self._translator.turn if self._translator else None)  # type: ignore[arg-type]  # interrupt ignores the turn

    async def abandon(self) -> None:
        """SIGKILL, as a crash: asked to stop, an agent cancels its turn as the user's (codex-acp's Codex then
        tells the model "The user interrupted the previous turn on purpose"), which a retry must not read."""
        if self._rpc is not None:
            await self._rpc.kill()

    async def close(self) -> None:
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            await rpc.close(grace=self.agent.close_grace)
        for task in list(self._tasks):
            task.cancel()
        if self._prepared is not None:
            await self._prepared.close()


def _chunk_text(content: object) -> str:
    return str(content.get("text") or "") if isinstance(content, dict) and content.get("type") == "text" else ""


def _install_roots(dirs: list[Path]) -> list[Path]:
    """Each binary's package root (its ``node_modules`` tree), so a script finds the modules it imports; system
    directories are mounted already."""
    roots: list[Path] = []
    for d in dirs:
        if str(d).startswith(("/usr/", "/bin", "/sbin", "/lib")):
            continue
        parts = d.parts
        root = Path(*parts[: parts.index("node_modules")]) if "node_modules" in parts else d
        if root not in roots:
            roots.append(root)
    return roots
